// Ring allgatherv and reducescatterv: the ring allgather and reduce-scatter
// (ring.cc) with a block size per rank. Every rank knows every block's size
// (the counts are the same on all ranks), so both ends of a ring edge skip
// the same empty blocks; each block is chunked on its own, and a chunk's
// send in step s waits only for the same chunk's receive in step s - 1.
#include <vector>

#include "algorithms/ops.h"
#include "algorithms/ring.h"
#include "algorithms/vblocks.h"
#include "base/partition.h"

namespace baton {

void BuildRingAllGatherV(const CollArgs& a, Schedule* out) {
  const size_t es = DatatypeSize(a.datatype);
  const int p = a.nranks;
  const VBlocks b = RecvBlocks(a);
  const auto* send = static_cast<const uint8_t*>(a.send);
  auto* recv = static_cast<uint8_t*>(a.recv);
  const size_t mine = b.bytes[a.rank];
  if (mine > 0 && send != recv + b.offset[a.rank])
    out->Add(CopyOp(a, send, recv + b.offset[a.rank], mine));
  if (p == 1 || b.total == 0) return;
  const auto& ring = *a.ring;
  const RingView rv(a);
  std::vector<int> last;  // per chunk of the block received in the previous step
  for (int s = 0; s < p - 1; ++s) {
    const int send_owner = ring[Mod(rv.q - s, p)], recv_owner = ring[Mod(rv.q - s - 1, p)];
    // Sends: the block received in step s - 1 (own block in step 0).
    const size_t send_elems = b.bytes[send_owner] / es;
    const size_t send_chunks = ChunksFor(send_elems, es, a.chunk_bytes);
    for (size_t j = 0; j < send_chunks && send_elems > 0; ++j) {
      size_t cb, ce;
      Partition(send_elems, send_chunks, j, &cb, &ce);
      const uint8_t* src = (s == 0 ? send : recv + b.offset[send_owner]) + cb * es;
      out->Add(SendOp(rv.next, src, (ce - cb) * es, j < last.size() ? last[j] : -1));
    }
    const size_t recv_elems = b.bytes[recv_owner] / es;
    const size_t recv_chunks = ChunksFor(recv_elems, es, a.chunk_bytes);
    last.assign(recv_elems > 0 ? recv_chunks : 0, -1);
    for (size_t j = 0; j < last.size(); ++j) {
      size_t cb, ce;
      Partition(recv_elems, recv_chunks, j, &cb, &ce);
      last[j] = out->Add(
          RecvOp(a, rv.prev, recv + b.offset[recv_owner] + cb * es, (ce - cb) * es, nullptr, 0));
    }
  }
}

// Partial sums of the other ranks' blocks go through scratch (the input is
// read-only); the last step reduces into recv and divides for avg.
void BuildRingReduceScatterV(const CollArgs& a, Schedule* out) {
  const size_t es = DatatypeSize(a.datatype);
  const int p = a.nranks;
  const VBlocks b = RecvBlocks(a);  // the input's blocks, packed
  const auto* send = static_cast<const uint8_t*>(a.send);
  auto* recv = static_cast<uint8_t*>(a.recv);
  if (b.total == 0) return;
  if (p == 1) {
    if (send != recv) out->Add(CopyOp(a, send, recv, b.total));
    return;
  }
  const auto& ring = *a.ring;
  const RingView rv(a);
  uint8_t* partial = p > 2 ? out->AllocScratch(b.total) : nullptr;
  std::vector<int> last;
  for (int s = 0; s < p - 1; ++s) {
    const int send_owner = ring[Mod(rv.q - s - 1, p)], recv_owner = ring[Mod(rv.q - s - 2, p)];
    const bool final_step = s == p - 2;
    const size_t send_elems = b.bytes[send_owner] / es;
    const size_t send_chunks = ChunksFor(send_elems, es, a.chunk_bytes);
    for (size_t j = 0; j < send_chunks && send_elems > 0; ++j) {
      size_t cb, ce;
      Partition(send_elems, send_chunks, j, &cb, &ce);
      const size_t off = b.offset[send_owner] + cb * es;
      const uint8_t* src = (s == 0 ? send : partial) + off;
      out->Add(SendOp(rv.next, src, (ce - cb) * es, j < last.size() ? last[j] : -1));
    }
    const size_t recv_elems = b.bytes[recv_owner] / es;
    const size_t recv_chunks = ChunksFor(recv_elems, es, a.chunk_bytes);
    last.assign(recv_elems > 0 ? recv_chunks : 0, -1);
    for (size_t j = 0; j < last.size(); ++j) {
      size_t cb, ce;
      Partition(recv_elems, recv_chunks, j, &cb, &ce);
      const size_t off = b.offset[recv_owner] + cb * es;
      uint8_t* dst = final_step ? recv + cb * es : partial + off;
      last[j] = out->Add(
          RecvOp(a, rv.prev, dst, (ce - cb) * es, send + off, final_step ? AvgDivisor(a) : 0));
    }
  }
}

}  // namespace baton
