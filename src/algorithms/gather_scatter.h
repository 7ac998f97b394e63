// Gather and scatter: the root collects every rank's block of args.count
// elements into its output (blocks in rank order), or hands block r of its
// input to rank r. Two algorithms:
//
// - direct: the root sends to (or receives from) every rank itself, all
//   messages posted at once; one latency, p - 1 messages at the root.
// - binomial: the binomial tree over ranks relative to the root (as for
//   broadcast). A subtree holds consecutive relative ranks, so each tree
//   edge carries one contiguous range of blocks: ceil(log2 p) latencies,
//   at the price of intermediate ranks forwarding their subtrees' blocks.
//   Ranges are cut at fixed multiples of the chunk size, so a large range
//   is forwarded a chunk at a time while the next chunk is on the wire.
//
// Only the root's output (gather) or input (scatter) is touched: the other
// ranks' may be null. In place at the root when (gather) send == recv +
// root * count elements, or (scatter) recv == send + root * count.
#pragma once

#include "algorithms/schedule.h"

namespace baton {

void BuildDirectGather(const CollArgs& args, Schedule* out);
void BuildBinomialGather(const CollArgs& args, Schedule* out);
void BuildDirectScatter(const CollArgs& args, Schedule* out);
void BuildBinomialScatter(const CollArgs& args, Schedule* out);

}  // namespace baton
