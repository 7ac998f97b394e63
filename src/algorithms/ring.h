// Ring algorithms: bandwidth-optimal, 2(p-1) steps. The ranks form a ring
// in CollArgs::ring order (ranks of one host next to each other, so the
// ring crosses each host boundary once); every step moves one segment to
// the next rank, cut into chunks that flow through the ring as a pipeline.
#pragma once

#include "algorithms/schedule.h"

namespace baton {

// One rank's place in the ring: its position, its neighbours, and its
// distance from the root along the ring (for rooted collectives).
struct RingView {
  int q, next, prev, from_root;
  explicit RingView(const CollArgs& a);
};

// Allreduce = ring reduce-scatter + ring allgather: each of the p segments
// is reduced along the ring in one order and then copied out, so every rank
// ends with bitwise identical results.
void BuildRingAllReduce(const CollArgs& args, Schedule* out);

// The two halves of the ring allreduce, for compositions (hierarchical
// algorithms); nranks > 1. After the reduce-scatter half the rank at ring
// position q holds segment RingAllReduceOwnedSegment (of Partition(count,
// nranks, .)) of the result in args.recv; the allgather half expects that
// and fills in the other segments.
void BuildRingAllReduceHalves(const CollArgs& args, bool reduce_scatter, bool all_gather,
                              Schedule* out);
int RingAllReduceOwnedSegment(const CollArgs& args);

// Allgather (args.count elements per rank): in step s each rank forwards
// the block it received in step s-1.
void BuildRingAllGather(const CollArgs& args, Schedule* out);

// Reduce-scatter (args.count elements per rank): the first half of the ring
// allreduce, shifted so that each rank finishes with its own block.
void BuildRingReduceScatter(const CollArgs& args, Schedule* out);

// The same with a block size per rank (ring_v.cc): allgatherv (blocks at
// CollArgs::displs of the output; in place when send is this rank's block
// of it) and reducescatterv (the input holds the blocks back to back in
// rank order; in place when recv is this rank's block of it). Empty blocks
// send nothing.
void BuildRingAllGatherV(const CollArgs& args, Schedule* out);
void BuildRingReduceScatterV(const CollArgs& args, Schedule* out);

}  // namespace baton
