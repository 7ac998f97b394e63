// Pairwise alltoall: every send and receive is posted at once, and the
// executor progresses all peers together, so no ordering can deadlock.
#pragma once

#include "algorithms/schedule.h"

namespace baton {

// Alltoall of args.count elements per pair of ranks; in place when
// args.send == args.recv (the outgoing blocks are saved first).
void BuildPairwiseAlltoAll(const CollArgs& args, Schedule* out);

}  // namespace baton
