// The ring algorithms as schedule builders; see ring.h. The comments here
// say how each maps onto send/recv/copy steps.
#include "algorithms/ring.h"

#include <algorithm>
#include <vector>

#include "algorithms/ops.h"
#include "base/datatype.h"
#include "base/partition.h"

namespace baton {

RingView::RingView(const CollArgs& a) {
  const auto& ring = *a.ring;
  const int p = a.nranks;
  auto position = [&](int rank) {
    return static_cast<int>(std::find(ring.begin(), ring.end(), rank) - ring.begin());
  };
  q = position(a.rank);
  next = ring[Mod(q + 1, p)];
  prev = ring[Mod(q - 1, p)];
  from_root = Mod(q - position(a.root), p);
}

// Ring allreduce = ring reduce-scatter + ring allgather. The buffer is cut
// into p segments, each into chunks; a chunk's send in step s waits only for
// the same chunk's receive in step s-1, so chunks flow through the ring as a
// pipeline. Each segment is reduced along the ring in one order and then
// copied out, so every rank ends with bitwise identical results.
void BuildRingAllReduce(const CollArgs& a, Schedule* out) {
  const auto* send = static_cast<const uint8_t*>(a.send);
  auto* recv = static_cast<uint8_t*>(a.recv);
  if (a.count == 0) return;
  if (a.nranks == 1) {
    if (send != recv) out->Add(CopyOp(a, send, recv, a.count * DatatypeSize(a.datatype)));
    return;
  }
  BuildRingAllReduceHalves(a, true, true, out);
}

void BuildRingAllReduceHalves(const CollArgs& a, bool reduce_scatter, bool all_gather,
                              Schedule* out) {
  const size_t es = DatatypeSize(a.datatype);
  const int p = a.nranks;
  const auto* send = static_cast<const uint8_t*>(a.send);
  auto* recv = static_cast<uint8_t*>(a.recv);
  if (a.count == 0 || p == 1) return;
  const RingView rv(a);
  const int q = rv.q, next = rv.next, prev = rv.prev;
  const size_t nchunks = ChunksFor((a.count + p - 1) / p, es, a.chunk_bytes);
  auto chunk = [&](int seg, size_t j, size_t* b, size_t* e) {
    size_t sb, se, cb, ce;
    Partition(a.count, p, seg, &sb, &se);
    Partition(se - sb, nchunks, j, &cb, &ce);
    *b = sb + cb;
    *e = sb + ce;
  };
  std::vector<int> last(nchunks, -1);  // previous step's receive, per chunk
  // The reduce-scatter's sends, by step and chunk.
  std::vector<int> rs_sent(reduce_scatter ? static_cast<size_t>(p - 1) * nchunks : 0, -1);
  // Steps t: the reduce-scatter's p - 1, then the allgather's p - 1.
  const int first_step = reduce_scatter ? 0 : p - 1;
  const int end_step = all_gather ? 2 * (p - 1) : p - 1;
  // Where the transport holds every send of the call without the peer
  // (CollArgs::sends_buffered_bytes), an allgather receive waits for the
  // same step's send: the send then runs to its end in one go while its
  // chunk is in cache, instead of taking turns with the receive pass by
  // pass (docs/performance.md, "The ring's allgather sends first"). No
  // wait can close a cycle: a send completes on its own.
  const size_t segment_bytes = (a.count + p - 1) / p * es;
  const bool send_first =
      segment_bytes * static_cast<size_t>(end_step - first_step) <= a.sends_buffered_bytes;
  auto emit = [&](int t, size_t j) {
    size_t b, e;
    if (t < p - 1) {
      const int s = t;
      const int send_seg = Mod(q - s, p), recv_seg = Mod(q - s - 1, p);
      const uint32_t divisor = s == p - 2 ? AvgDivisor(a) : 0;
      chunk(send_seg, j, &b, &e);
      rs_sent[static_cast<size_t>(s) * nchunks + j] =
          e > b ? out->Add(SendOp(next, (s == 0 ? send : recv) + b * es, (e - b) * es, last[j]))
                : -1;
      chunk(recv_seg, j, &b, &e);
      last[j] = e > b
                    ? out->Add(RecvOp(a, prev, recv + b * es, (e - b) * es, send + b * es, divisor))
                    : -1;
    } else {
      const int s = t - (p - 1);
      const int send_seg = Mod(q + 1 - s, p), recv_seg = Mod(q - s, p);
      chunk(send_seg, j, &b, &e);
      const int sent = e > b ? out->Add(SendOp(next, recv + b * es, (e - b) * es, last[j])) : -1;
      chunk(recv_seg, j, &b, &e);
      if (e > b) {
        // The reduce-scatter's send of this chunk in step s read these
        // bytes (in place, or s > 0): the peers order the two already (the
        // data comes back around the ring), this says so here as well. The
        // allgather's send goes to the same peer after it, so waiting for
        // that one waits for both.
        const int read_by = send_first && sent >= 0 ? sent
                            : reduce_scatter        ? rs_sent[static_cast<size_t>(s) * nchunks + j]
                                                    : -1;
        // The last step's chunk is final: nothing reads it again.
        last[j] = out->Add(
            StreamedIf(a, s == p - 2,
                       RecvOp(a, prev, recv + b * es, (e - b) * es, nullptr, 0, last[j], read_by)));
      } else {
        last[j] = -1;
      }
    }
  };
  // In waves, as NCCL's ring runs (ForEachInWaves; docs/performance.md,
  // "Ordinary buffers: waves, stages and streaming stores").
  ForEachInWaves(nchunks, static_cast<size_t>(end_step - first_step),
                 [&](size_t i, size_t j) { emit(first_step + static_cast<int>(i), j); });
}

int RingAllReduceOwnedSegment(const CollArgs& a) {
  return Mod(RingView(a).q + 1, a.nranks);
}

// Ring allgather: in step s each rank forwards the block it received in
// step s-1; blocks land at their owner's offset in every rank's output.
void BuildRingAllGather(const CollArgs& a, Schedule* out) {
  const size_t es = DatatypeSize(a.datatype);
  const int p = a.nranks;
  const size_t blk = a.count * es;
  const auto* send = static_cast<const uint8_t*>(a.send);
  auto* recv = static_cast<uint8_t*>(a.recv);
  if (blk == 0) return;
  // Final: the first step sends from the input, not from here.
  if (send != recv + a.rank * blk)
    out->Add(StreamedIf(a, p > 1, CopyOp(a, send, recv + a.rank * blk, blk)));
  if (p == 1) return;
  const auto& ring = *a.ring;
  const RingView rv(a);
  const int q = rv.q, next = rv.next, prev = rv.prev;
  const size_t nchunks = ChunksFor(a.count, es, a.chunk_bytes);
  std::vector<int> last(nchunks, -1);
  // In waves, as the allreduce: a chunk is forwarded while it is cached.
  ForEachInWaves(nchunks, static_cast<size_t>(p - 1), [&](size_t step, size_t j) {
    const int s = static_cast<int>(step);
    const int send_owner = ring[Mod(q - s, p)], recv_owner = ring[Mod(q - s - 1, p)];
    size_t b, e;
    Partition(a.count, nchunks, j, &b, &e);
    const size_t off = b * es, len = (e - b) * es;
    const uint8_t* src = s == 0 ? send + off : recv + send_owner * blk + off;
    out->Add(SendOp(next, src, len, last[j]));
    // The last step's blocks are not forwarded.
    last[j] = out->Add(
        StreamedIf(a, s == p - 2, RecvOp(a, prev, recv + recv_owner * blk + off, len, nullptr, 0)));
  });
}

// Ring reduce-scatter: like the first half of the ring allreduce, shifted
// by one so that each rank finishes with its own block. Partial sums of
// other ranks' blocks go through scratch, since the input is read-only.
void BuildRingReduceScatter(const CollArgs& a, Schedule* out) {
  const size_t es = DatatypeSize(a.datatype);
  const int p = a.nranks;
  const size_t blk = a.count * es;
  const auto* send = static_cast<const uint8_t*>(a.send);
  auto* recv = static_cast<uint8_t*>(a.recv);
  if (blk == 0) return;
  if (p == 1) {
    if (send != recv) out->Add(CopyOp(a, send, recv, blk));
    return;
  }
  const auto& ring = *a.ring;
  const RingView rv(a);
  const int q = rv.q, next = rv.next, prev = rv.prev;
  const size_t nchunks = ChunksFor(a.count, es, a.chunk_bytes);
  uint8_t* partial = p > 2 ? out->AllocScratch(blk * p) : nullptr;
  std::vector<int> last(nchunks, -1);
  // In waves, as the allreduce: a partial sum moves on while it is cached.
  ForEachInWaves(nchunks, static_cast<size_t>(p - 1), [&](size_t step, size_t j) {
    const int s = static_cast<int>(step);
    const int send_owner = ring[Mod(q - s - 1, p)], recv_owner = ring[Mod(q - s - 2, p)];
    const bool final_step = s == p - 2;
    size_t b, e;
    Partition(a.count, nchunks, j, &b, &e);
    const size_t off = b * es, len = (e - b) * es;
    const uint8_t* src = s == 0 ? send + send_owner * blk + off : partial + send_owner * blk + off;
    out->Add(SendOp(next, src, len, last[j]));
    uint8_t* dst = final_step ? recv + off : partial + recv_owner * blk + off;
    const uint8_t* own = send + recv_owner * blk + off;
    // (In place the reduction just read those lines: nothing to skip.)
    last[j] = out->Add(StreamedIf(a, final_step && own != dst,
                                  RecvOp(a, prev, dst, len, own, final_step ? AvgDivisor(a) : 0)));
  });
}

}  // namespace baton
