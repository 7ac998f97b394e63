// Small builders shared by the algorithm files: one Op per helper, so a
// schedule reads as the algorithm's steps.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "algorithms/schedule.h"

namespace baton {

// a mod p in [0, p), also for negative a.
inline int Mod(int a, int p) {
  return ((a % p) + p) % p;
}

// Chunks per block so each chunk is about chunk_bytes, and at most one per
// element (so no chunk of a non-empty block is empty: no zero-byte messages).
inline size_t ChunksFor(size_t block_elems, size_t elem_size, size_t chunk_bytes) {
  size_t bytes = block_elems * elem_size;
  size_t n = (bytes + chunk_bytes - 1) / std::max<size_t>(chunk_bytes, 1);
  return std::clamp<size_t>(n, 1, std::max<size_t>(block_elems, 1));
}

// The divisor of avg's final step (0: none).
inline uint32_t AvgDivisor(const CollArgs& a) {
  return a.op == batonAvg ? static_cast<uint32_t>(a.nranks) : 0;
}

inline Op SendOp(int peer, const uint8_t* src, size_t bytes, int dep) {
  Op op;
  op.kind = Op::Kind::kSend;
  op.peer = peer;
  op.src = src;
  op.bytes = bytes;
  op.deps[0] = dep;
  return op;
}

// A receive into dst; with reduce_with, dst = reduce_with (op) incoming.
inline Op RecvOp(const CollArgs& a, int peer, uint8_t* dst, size_t bytes,
                 const uint8_t* reduce_with, uint32_t post_divisor, int dep0 = -1, int dep1 = -1) {
  Op op;
  op.kind = Op::Kind::kRecv;
  op.peer = peer;
  op.dst = dst;
  op.bytes = bytes;
  op.reduce_with = reduce_with;
  op.datatype = a.datatype;
  op.redop = a.op;
  op.post_divisor = post_divisor;
  op.deps[0] = dep0;
  op.deps[1] = dep1;
  return op;
}

// A reducing receive whose operand order is chosen by the caller: with
// incoming_first, dst = incoming (op) reduce_with, so two partners can both
// put the lower rank's data first.
inline Op OrderedRecvOp(const CollArgs& a, int peer, uint8_t* dst, size_t bytes,
                        const uint8_t* reduce_with, bool incoming_first, uint32_t post_divisor,
                        int dep0, int dep1) {
  Op op = RecvOp(a, peer, dst, bytes, reduce_with, post_divisor, dep0, dep1);
  op.incoming_first = reduce_with != nullptr && incoming_first;
  return op;
}

// One op that completes after all of `deps` (entries < 0 are ignored; -1
// when none is left): the op itself where there is one, else a chain of
// empty copies, two dependencies each.
template <typename Deps>
inline int Join(const Deps& deps, Schedule* out) {
  int joined = -1;
  for (int d : deps) {
    if (d < 0) continue;
    if (joined < 0) {
      joined = d;
      continue;
    }
    Op op;
    op.kind = Op::Kind::kCopy;
    op.deps[0] = joined;
    op.deps[1] = d;
    joined = out->Add(op);
  }
  return joined;
}
inline int Join(std::initializer_list<int> deps, Schedule* out) {
  return Join<std::initializer_list<int>>(deps, out);
}

// `op` with Op::stream_dst set to `final` (its destination is not read
// again) when the call streams its outputs.
inline Op StreamedIf(const CollArgs& a, bool final, Op op) {
  op.stream_dst = a.stream_outputs && final;
  return op;
}

// Calls emit(step, chunk) for `nsteps` steps of `nchunks` chunks in waves:
// chunk j's step i in wave i + j, steps in order within a wave. A chunk
// moves on to its next step one wave after the previous chunk did, while
// it is still in the cache (listed step by step, every chunk of a large
// call was read back from memory before its next step), and both ends of
// a connection list their messages in the same order.
template <typename Emit>
inline void ForEachInWaves(size_t nchunks, size_t nsteps, Emit&& emit) {
  for (size_t w = 0; w + 1 < nchunks + nsteps; ++w)
    for (size_t i = 0; i < nsteps && i <= w; ++i)
      if (w - i < nchunks) emit(i, w - i);
}

inline Op CopyOp(const CollArgs& a, const uint8_t* src, uint8_t* dst, size_t bytes, int dep = -1) {
  Op op;
  op.kind = Op::Kind::kCopy;
  op.src = src;
  op.dst = dst;
  op.bytes = bytes;
  op.datatype = a.datatype;
  op.deps[0] = dep;
  return op;
}

}  // namespace baton
