#include "algorithms/barrier.h"

#include "algorithms/ops.h"

namespace baton {

// Dissemination barrier: in round k each rank signals rank + 2^k and waits
// for rank - 2^k; after ceil(log2 p) rounds everyone has heard from all.
void BuildDisseminationBarrier(const CollArgs& a, Schedule* out) {
  const int p = a.nranks;
  if (p == 1) return;
  uint8_t* token = out->AllocScratch(2);
  int last = -1;
  for (int k = 1; k < p; k *= 2) {
    out->Add(SendOp(Mod(a.rank + k, p), token, 1, last));
    // Receives come from different peers, so they could complete out of
    // order; chaining them keeps "round k done" meaning "all rounds <= k".
    Op recv = RecvOp(a, Mod(a.rank - k, p), token + 1, 1, nullptr, 0);
    recv.deps[0] = last;
    last = out->Add(recv);
  }
}

}  // namespace baton
