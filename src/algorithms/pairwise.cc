#include "algorithms/pairwise.h"

#include <algorithm>

#include "algorithms/ops.h"
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
  out->Add(CopyOp(a, send + a.rank * blk, recv + a.rank * blk, blk));
  for (int k = 1; k < p; ++k) {
    const int to = Mod(a.rank + k, p), from = Mod(a.rank - k, p);
    out->Add(SendOp(to, send + to * blk, blk, -1));
    out->Add(RecvOp(a, from, recv + from * blk, blk, nullptr, 0));
  }
}

}  // namespace baton
