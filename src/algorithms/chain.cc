// The chain algorithms as schedule builders; see chain.h.
#include "algorithms/chain.h"

#include "algorithms/ops.h"
#include "algorithms/ring.h"
#include "base/datatype.h"
#include "base/partition.h"

namespace baton {

// Pipelined chain from the root along the ring: each rank forwards chunk j
// as soon as it has it, so the time is about (p - 1 + chunks) chunk times.
void BuildChainBroadcast(const CollArgs& a, Schedule* out) {
  const size_t es = DatatypeSize(a.datatype);
  const int p = a.nranks;
  const auto* send = static_cast<const uint8_t*>(a.send);
  auto* recv = static_cast<uint8_t*>(a.recv);
  const size_t bytes = a.count * es;
  if (bytes == 0) return;
  const bool is_root = a.rank == a.root;
  // Final: the root sends from its input.
  if (is_root && send != recv) out->Add(StreamedIf(a, p > 1, CopyOp(a, send, recv, bytes)));
  if (p == 1) return;
  const RingView rv(a);
  const int pos = rv.from_root, next = rv.next, prev = rv.prev;
  const size_t nchunks = ChunksFor(a.count, es, a.chunk_bytes);
  for (size_t j = 0; j < nchunks; ++j) {
    size_t b, e;
    Partition(a.count, nchunks, j, &b, &e);
    if (is_root) {
      out->Add(SendOp(next, send + b * es, (e - b) * es, -1));
      continue;
    }
    // The chain's end forwards nothing.
    int r = out->Add(
        StreamedIf(a, pos == p - 1, RecvOp(a, prev, recv + b * es, (e - b) * es, nullptr, 0)));
    if (pos < p - 1) out->Add(SendOp(next, recv + b * es, (e - b) * es, r));
  }
}

// Pipelined chain towards the root: the rank farthest from the root sends
// its input, every other rank adds its own and passes the partial sum on.
void BuildChainReduce(const CollArgs& a, Schedule* out) {
  const size_t es = DatatypeSize(a.datatype);
  const int p = a.nranks;
  const auto* send = static_cast<const uint8_t*>(a.send);
  auto* recv = static_cast<uint8_t*>(a.recv);
  const size_t bytes = a.count * es;
  if (bytes == 0) return;
  if (p == 1) {
    if (send != recv) out->Add(CopyOp(a, send, recv, bytes));
    return;
  }
  const RingView rv(a);
  const int pos = rv.from_root, toward = rv.prev, from = rv.next;
  const size_t nchunks = ChunksFor(a.count, es, a.chunk_bytes);
  uint8_t* acc = pos == 0 ? recv : (pos < p - 1 ? out->AllocScratch(bytes) : nullptr);
  for (size_t j = 0; j < nchunks; ++j) {
    size_t b, e;
    Partition(a.count, nchunks, j, &b, &e);
    const size_t off = b * es, len = (e - b) * es;
    if (pos == p - 1) {
      out->Add(SendOp(toward, send + off, len, -1));
      continue;
    }
    // The root's sums are final (in place the reduction just read them).
    int r = out->Add(
        StreamedIf(a, pos == 0 && send != recv,
                   RecvOp(a, from, acc + off, len, send + off, pos == 0 ? AvgDivisor(a) : 0)));
    if (pos > 0) out->Add(SendOp(toward, acc + off, len, r));
  }
}

}  // namespace baton
