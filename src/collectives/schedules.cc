// The algorithms, each as a schedule builder. docs/algorithms.md explains
// them; the comments here say how each maps onto send/recv/copy steps.
#include <algorithm>

#include "collectives/ops.h"
#include "collectives/schedule.h"
#include "kernels/cpu_reduce.h"

namespace baton {
namespace {

// One rank's place in the ring: its position, its neighbours, and its
// distance from the root along the ring (for rooted collectives).
struct RingView {
  int q, next, prev, from_root;
  explicit RingView(const CollArgs& a) {
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
};

}  // namespace

void Schedule::append(Schedule&& other) {
  int base = static_cast<int>(ops.size());
  for (Op op : other.ops) {
    for (int& d : op.deps)
      if (d >= 0) d += base;
    ops.push_back(op);
  }
  // Take over other's live blocks; it gets our spare ones in exchange.
  for (size_t i = 0; i < other.scratch_used; ++i) {
    if (scratch_used == scratch.size()) scratch.emplace_back();
    scratch[scratch_used++].swap(other.scratch[i]);
  }
  other.scratch_used = 0;
}

// Ring allreduce = ring reduce-scatter + ring allgather. The buffer is cut
// into p segments, each into chunks; a chunk's send in step s waits only for
// the same chunk's receive in step s-1, so chunks flow through the ring as a
// pipeline. Each segment is reduced along the ring in one order and then
// copied out, so every rank ends with bitwise identical results.
void BuildRingAllReduce(const CollArgs& a, Schedule* out) {
  const size_t es = datatypeSize(a.datatype);
  const int p = a.nranks;
  const auto* send = static_cast<const uint8_t*>(a.send);
  auto* recv = static_cast<uint8_t*>(a.recv);
  if (a.count == 0) return;
  if (p == 1) {
    if (send != recv) out->add(CopyOp(a, send, recv, a.count * es));
    return;
  }
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
  for (int s = 0; s < p - 1; ++s) {
    const int send_seg = Mod(q - s, p), recv_seg = Mod(q - s - 1, p);
    const uint32_t divisor = s == p - 2 ? AvgDivisor(a) : 0;
    for (size_t j = 0; j < nchunks; ++j) {
      size_t b, e;
      chunk(send_seg, j, &b, &e);
      if (e > b) out->add(SendOp(next, (s == 0 ? send : recv) + b * es, (e - b) * es, last[j]));
      chunk(recv_seg, j, &b, &e);
      last[j] = e > b
                    ? out->add(RecvOp(a, prev, recv + b * es, (e - b) * es, send + b * es, divisor))
                    : -1;
    }
  }
  for (int s = 0; s < p - 1; ++s) {
    const int send_seg = Mod(q + 1 - s, p), recv_seg = Mod(q - s, p);
    for (size_t j = 0; j < nchunks; ++j) {
      size_t b, e;
      chunk(send_seg, j, &b, &e);
      if (e > b) out->add(SendOp(next, recv + b * es, (e - b) * es, last[j]));
      chunk(recv_seg, j, &b, &e);
      last[j] = e > b ? out->add(RecvOp(a, prev, recv + b * es, (e - b) * es, nullptr, 0)) : -1;
    }
  }
}

// Pipelined chain from the root along the ring: each rank forwards chunk j
// as soon as it has it, so the time is about (p - 1 + chunks) chunk times.
void BuildChainBroadcast(const CollArgs& a, Schedule* out) {
  const size_t es = datatypeSize(a.datatype);
  const int p = a.nranks;
  const auto* send = static_cast<const uint8_t*>(a.send);
  auto* recv = static_cast<uint8_t*>(a.recv);
  const size_t bytes = a.count * es;
  if (bytes == 0) return;
  const bool is_root = a.rank == a.root;
  if (is_root && send != recv) out->add(CopyOp(a, send, recv, bytes));
  if (p == 1) return;
  const RingView rv(a);
  const int pos = rv.from_root, next = rv.next, prev = rv.prev;
  const size_t nchunks = ChunksFor(a.count, es, a.chunk_bytes);
  for (size_t j = 0; j < nchunks; ++j) {
    size_t b, e;
    Partition(a.count, nchunks, j, &b, &e);
    if (is_root) {
      out->add(SendOp(next, send + b * es, (e - b) * es, -1));
      continue;
    }
    int r = out->add(RecvOp(a, prev, recv + b * es, (e - b) * es, nullptr, 0));
    if (pos < p - 1) out->add(SendOp(next, recv + b * es, (e - b) * es, r));
  }
}

// Pipelined chain towards the root: the rank farthest from the root sends
// its input, every other rank adds its own and passes the partial sum on.
void BuildChainReduce(const CollArgs& a, Schedule* out) {
  const size_t es = datatypeSize(a.datatype);
  const int p = a.nranks;
  const auto* send = static_cast<const uint8_t*>(a.send);
  auto* recv = static_cast<uint8_t*>(a.recv);
  const size_t bytes = a.count * es;
  if (bytes == 0) return;
  if (p == 1) {
    if (send != recv) out->add(CopyOp(a, send, recv, bytes));
    return;
  }
  const RingView rv(a);
  const int pos = rv.from_root, toward = rv.prev, from = rv.next;
  const size_t nchunks = ChunksFor(a.count, es, a.chunk_bytes);
  uint8_t* acc = pos == 0 ? recv : (pos < p - 1 ? out->allocScratch(bytes) : nullptr);
  for (size_t j = 0; j < nchunks; ++j) {
    size_t b, e;
    Partition(a.count, nchunks, j, &b, &e);
    const size_t off = b * es, len = (e - b) * es;
    if (pos == p - 1) {
      out->add(SendOp(toward, send + off, len, -1));
      continue;
    }
    int r = out->add(RecvOp(a, from, acc + off, len, send + off, pos == 0 ? AvgDivisor(a) : 0));
    if (pos > 0) out->add(SendOp(toward, acc + off, len, r));
  }
}

// Ring allgather: in step s each rank forwards the block it received in
// step s-1; blocks land at their owner's offset in every rank's output.
void BuildRingAllGather(const CollArgs& a, Schedule* out) {
  const size_t es = datatypeSize(a.datatype);
  const int p = a.nranks;
  const size_t blk = a.count * es;
  const auto* send = static_cast<const uint8_t*>(a.send);
  auto* recv = static_cast<uint8_t*>(a.recv);
  if (blk == 0) return;
  if (send != recv + a.rank * blk) out->add(CopyOp(a, send, recv + a.rank * blk, blk));
  if (p == 1) return;
  const auto& ring = *a.ring;
  const RingView rv(a);
  const int q = rv.q, next = rv.next, prev = rv.prev;
  const size_t nchunks = ChunksFor(a.count, es, a.chunk_bytes);
  std::vector<int> last(nchunks, -1);
  for (int s = 0; s < p - 1; ++s) {
    const int send_owner = ring[Mod(q - s, p)], recv_owner = ring[Mod(q - s - 1, p)];
    for (size_t j = 0; j < nchunks; ++j) {
      size_t b, e;
      Partition(a.count, nchunks, j, &b, &e);
      const size_t off = b * es, len = (e - b) * es;
      const uint8_t* src = s == 0 ? send + off : recv + send_owner * blk + off;
      out->add(SendOp(next, src, len, last[j]));
      last[j] = out->add(RecvOp(a, prev, recv + recv_owner * blk + off, len, nullptr, 0));
    }
  }
}

// Ring reduce-scatter: like the first half of the ring allreduce, shifted
// by one so that each rank finishes with its own block. Partial sums of
// other ranks' blocks go through scratch, since the input is read-only.
void BuildRingReduceScatter(const CollArgs& a, Schedule* out) {
  const size_t es = datatypeSize(a.datatype);
  const int p = a.nranks;
  const size_t blk = a.count * es;
  const auto* send = static_cast<const uint8_t*>(a.send);
  auto* recv = static_cast<uint8_t*>(a.recv);
  if (blk == 0) return;
  if (p == 1) {
    if (send != recv) out->add(CopyOp(a, send, recv, blk));
    return;
  }
  const auto& ring = *a.ring;
  const RingView rv(a);
  const int q = rv.q, next = rv.next, prev = rv.prev;
  const size_t nchunks = ChunksFor(a.count, es, a.chunk_bytes);
  uint8_t* partial = p > 2 ? out->allocScratch(blk * p) : nullptr;
  std::vector<int> last(nchunks, -1);
  for (int s = 0; s < p - 1; ++s) {
    const int send_owner = ring[Mod(q - s - 1, p)], recv_owner = ring[Mod(q - s - 2, p)];
    const bool final_step = s == p - 2;
    for (size_t j = 0; j < nchunks; ++j) {
      size_t b, e;
      Partition(a.count, nchunks, j, &b, &e);
      const size_t off = b * es, len = (e - b) * es;
      const uint8_t* src =
          s == 0 ? send + send_owner * blk + off : partial + send_owner * blk + off;
      out->add(SendOp(next, src, len, last[j]));
      uint8_t* dst = final_step ? recv + off : partial + recv_owner * blk + off;
      last[j] = out->add(
          RecvOp(a, prev, dst, len, send + recv_owner * blk + off, final_step ? AvgDivisor(a) : 0));
    }
  }
}

// Pairwise exchange: every send and receive is posted at once; the executor
// progresses all peers together, so no ordering can deadlock.
void BuildPairwiseAlltoAll(const CollArgs& a, Schedule* out) {
  const size_t es = datatypeSize(a.datatype);
  const int p = a.nranks;
  const size_t blk = a.count * es;
  const auto* send = static_cast<const uint8_t*>(a.send);
  auto* recv = static_cast<uint8_t*>(a.recv);
  if (blk == 0) return;
  if (send == recv) {
    // In place: the outgoing blocks must be saved before receives land.
    uint8_t* copy = out->allocScratch(blk * p);
    std::copy(send, send + blk * p, copy);
    send = copy;
  }
  out->add(CopyOp(a, send + a.rank * blk, recv + a.rank * blk, blk));
  for (int k = 1; k < p; ++k) {
    const int to = Mod(a.rank + k, p), from = Mod(a.rank - k, p);
    out->add(SendOp(to, send + to * blk, blk, -1));
    out->add(RecvOp(a, from, recv + from * blk, blk, nullptr, 0));
  }
}

// Dissemination barrier: in round k each rank signals rank + 2^k and waits
// for rank - 2^k; after ceil(log2 p) rounds everyone has heard from all.
void BuildDisseminationBarrier(const CollArgs& a, Schedule* out) {
  const int p = a.nranks;
  if (p == 1) return;
  uint8_t* token = out->allocScratch(2);
  int last = -1;
  for (int k = 1; k < p; k *= 2) {
    out->add(SendOp(Mod(a.rank + k, p), token, 1, last));
    // Receives come from different peers, so they could complete out of
    // order; chaining them keeps "round k done" meaning "all rounds <= k".
    Op recv = RecvOp(a, Mod(a.rank - k, p), token + 1, 1, nullptr, 0);
    recv.deps[0] = last;
    last = out->add(recv);
  }
}

void BuildSend(const CollArgs& a, int peer, Schedule* out) {
  size_t bytes = a.count * datatypeSize(a.datatype);
  if (bytes == 0) return;
  if (peer == a.rank) return;  // paired with a self-receive by the caller
  out->add(SendOp(peer, static_cast<const uint8_t*>(a.send), bytes, -1));
}

void BuildRecv(const CollArgs& a, int peer, Schedule* out) {
  size_t bytes = a.count * datatypeSize(a.datatype);
  if (bytes == 0) return;
  out->add(RecvOp(a, peer, static_cast<uint8_t*>(a.recv), bytes, nullptr, 0));
}

}  // namespace baton
