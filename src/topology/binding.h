// Binding: which CPUs each rank of a host may run on. A rank that keeps its
// core does not lose its caches and never waits for a peer that the kernel
// put on the same core (docs/tuning.md has the figures); batonrun binds its
// ranks as mpirun does, and the library binds a rank itself when asked.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "topology/machine.h"

namespace baton {

enum class BindPolicy {
  kAuto,  // core when every rank can have a core of its own, else numa
  kCore,  // one core per rank (all its hardware threads)
  kNuma,  // all cores of one NUMA node per rank
  kNone,  // no binding
};

// "auto", "core", "numa", "none" (case insensitive); false for anything else.
bool ParseBindPolicy(const std::string& text, BindPolicy* out);
const char* BindPolicyName(BindPolicy policy);

// The PUs (OS indices) of each of `local_ranks` ranks on `machine`, using
// only PUs in `allowed` (the launcher's own affinity; every PU when empty).
// An empty list leaves that rank unbound. Ranks spread across NUMA nodes
// (and so packages) in turn; when each rank has a GPU of its own
// (local_ranks <= GPUs, rank r using GPU r as the trainer does), or else a
// NIC of its own, it is placed on that device's NUMA node instead. `kCore`
// with more ranks than cores wraps around (cores then shared); `kAuto` then
// falls back to `kNuma`, and to no binding on a single-NUMA machine, where a
// NUMA node is the whole machine.
std::vector<std::vector<int>> PlanBinding(const Machine& machine, int local_ranks,
                                          BindPolicy policy, const std::vector<int>& allowed);

// The library's own binding, for ranks started by a launcher that did not
// bind them: when `policy_text` (BATON_BIND) asks for a binding and this
// process may still run everywhere, binds it as local rank `local_rank` of
// `local_size` would be by PlanBinding, on the machine `topo_file` names (or
// this one). A rank someone already bound is left alone. *bound says
// whether it bound. batonInvalidArgument for a malformed policy.
Status BindThisRank(const std::string& policy_text, const std::string& topo_file, int local_rank,
                    int local_size, bool* bound);

// Binds this rank as rank `index` of the `count` ranks that share this
// machine under `policy_text`, whatever binding it has: several hosts on one
// machine (containers, network namespaces) each had a launcher that saw only
// its own ranks. No-op for an empty or "none" policy. *bound says whether it
// bound.
Status BindAmongMachineRanks(const std::string& policy_text, const std::string& topo_file,
                             int index, int count, bool* bound);

// Restricts this process to `pus` (no-op for an empty list).
Status BindTo(const std::vector<int>& pus);

// "0-3,8,10-11": a PU list the way taskset and mpirun print it.
std::string PuListString(const std::vector<int>& pus);

}  // namespace baton
