// Chain algorithms: broadcast and reduce as a pipeline along the ring from
// (or towards) the root. Bandwidth-optimal for large messages: each rank
// sends every byte once, and the time is about (p - 1 + chunks) chunk times.
#pragma once

#include "algorithms/schedule.h"

namespace baton {

// Each rank forwards chunk j as soon as it has it.
void BuildChainBroadcast(const CollArgs& args, Schedule* out);

// The rank farthest from the root sends its input; every other rank adds
// its own and passes the partial result on; the root writes args.recv.
void BuildChainReduce(const CollArgs& args, Schedule* out);

}  // namespace baton
