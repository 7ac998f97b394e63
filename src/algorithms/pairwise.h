// Pairwise alltoall: every send and receive is posted at once, and the
// executor progresses all peers together, so no ordering can deadlock.
#pragma once

#include "algorithms/schedule.h"

namespace baton {

// Alltoall of args.count elements per pair of ranks; in place when
// args.send == args.recv (the outgoing blocks are saved first).
void BuildPairwiseAlltoAll(const CollArgs& args, Schedule* out);

// Alltoallv: the block for rank j is send_counts[j] elements at
// send_displs[j] of the input, the block from rank i lands at displs[i] of
// the output (counts[i] elements). In place when args.send == args.recv.
void BuildPairwiseAlltoAllV(const CollArgs& args, Schedule* out);

}  // namespace baton
