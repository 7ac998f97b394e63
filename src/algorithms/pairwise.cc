#include "algorithms/pairwise.h"

#include <algorithm>

#include "algorithms/ops.h"
#include "algorithms/vblocks.h"
#include "base/datatype.h"

namespace baton {

// Pairwise exchange: every send and receive is posted at once; the executor
// progresses all peers together, so no ordering can deadlock.
void BuildPairwiseAlltoAll(const CollArgs& a, Schedule* out) {
  const size_t es = DatatypeSize(a.datatype);
  const int p = a.nranks;
  const size_t blk = a.count * es;
  const auto* send = static_cast<const uint8_t*>(a.send);
  auto* recv = static_cast<uint8_t*>(a.recv);
  if (blk == 0) return;
  if (send == recv) {
    // In place: the outgoing blocks must be saved before receives land.
    uint8_t* copy = out->AllocScratch(blk * p);
    std::copy(send, send + blk * p, copy);
    send = copy;
  }
  // Every block lands where it stays: all of them may stream.
  out->Add(StreamedIf(a, true, CopyOp(a, send + a.rank * blk, recv + a.rank * blk, blk)));
  for (int k = 1; k < p; ++k) {
    const int to = Mod(a.rank + k, p), from = Mod(a.rank - k, p);
    out->Add(SendOp(to, send + to * blk, blk, -1));
    out->Add(StreamedIf(a, true, RecvOp(a, from, recv + from * blk, blk, nullptr, 0)));
  }
}

// The same with counts and displacements per peer; a pair whose block is
// empty exchanges nothing (both ends see the same count when the call is
// consistent; when not, the transports report the sizes that differ).
void BuildPairwiseAlltoAllV(const CollArgs& a, Schedule* out) {
  const int p = a.nranks;
  const VBlocks sb = SendBlocks(a), rb = RecvBlocks(a);
  const auto* send = static_cast<const uint8_t*>(a.send);
  auto* recv = static_cast<uint8_t*>(a.recv);
  if (send == recv) {
    // In place: the outgoing blocks must be saved before receives land.
    size_t extent = 0;
    for (int r = 0; r < p; ++r)
      if (sb.bytes[r] > 0) extent = std::max(extent, sb.offset[r] + sb.bytes[r]);
    if (extent > 0) {
      uint8_t* copy = out->AllocScratch(extent);
      std::copy(send, send + extent, copy);
      send = copy;
    }
  }
  const size_t own = std::min(sb.bytes[a.rank], rb.bytes[a.rank]);
  if (own > 0)
    out->Add(
        StreamedIf(a, true, CopyOp(a, send + sb.offset[a.rank], recv + rb.offset[a.rank], own)));
  for (int k = 1; k < p; ++k) {
    const int to = Mod(a.rank + k, p), from = Mod(a.rank - k, p);
    if (sb.bytes[to] > 0) out->Add(SendOp(to, send + sb.offset[to], sb.bytes[to], -1));
    if (rb.bytes[from] > 0)
      out->Add(
          StreamedIf(a, true, RecvOp(a, from, recv + rb.offset[from], rb.bytes[from], nullptr, 0)));
  }
}

}  // namespace baton
