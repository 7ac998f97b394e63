// How batonrun binds its ranks: the policy from --bind-to, else BATON_BIND,
// else auto, applied to this machine as hwloc sees it (docs/tuning.md).
#pragma once

#include <vector>

#include "tools/batonrun/options.h"

namespace batonrun {

// The CPUs (OS indices) of each local rank; an empty list leaves a rank
// unbound. Prints the plan with --report-bindings. Never fails the job: a
// malformed BATON_BIND or a machine hwloc cannot read is a warning and no
// binding. With BATON_TOPO_FILE (another machine's XML) the plan is made for
// that machine and only reported, never applied.
std::vector<std::vector<int>> PlanRankBindings(const Options& options);

}  // namespace batonrun
