/*
 * The per-thread body and launch geometry of the CUDA reduce-copy kernels,
 * written as BATON_HD code over the portable core (reduce_copy.h) so that the
 * host tests (tests/cuda_host_test.cc) can run exactly what a GPU thread runs,
 * thread by thread, for several launch shapes.
 *
 * Work split: when every source and destination has the same offset modulo 16
 * bytes (and that offset is a whole number of elements), the elements up to
 * the first 16-byte boundary are a scalar head, then come whole 16-byte packs
 * (one vector load per source, one vector store per destination), then a
 * scalar tail. Otherwise everything is scalar. Each part is a grid-stride loop
 * over all threads of the launch.
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/reduce_copy.h"

namespace baton {
namespace cudakern {

inline constexpr int kMaxSrcs = 8;
inline constexpr int kMaxDsts = 2;
inline constexpr size_t kPackBytes = 16;
// Threads per block: a multiple of the warp size that keeps enough loads in
// flight per SM without limiting occupancy through registers.
inline constexpr unsigned kThreadsPerBlock = 256;
// Grid-stride loops make more blocks than this pointless: enough to fill
// every SM of current GPUs several times over.
inline constexpr unsigned kMaxBlocks = 1024;

// Arguments of one launch, passed to the kernel by value (about 100 bytes).
struct KernelArgs {
  const void* srcs[kMaxSrcs];
  void* dsts[kMaxDsts];
  int nsrcs;
  int ndsts;
  size_t count;           // elements
  uint32_t post_divisor;  // > 1: divide the result (last step of batonAvg)
};

// How count elements split into a scalar head, 16-byte packs and a scalar
// tail (head + packs * elements per pack + tail == count).
struct VectorSplit {
  size_t head;   // elements before the first 16-byte boundary
  size_t packs;  // whole 16-byte packs
  size_t tail;   // elements after the last pack
};

// Grid size of a launch; the block size is kThreadsPerBlock.
struct LaunchShape {
  unsigned blocks;
  unsigned threads;
};

BATON_HD_INLINE VectorSplit SplitForVectors(const KernelArgs& a, size_t elem_size) {
  const uintptr_t offset = reinterpret_cast<uintptr_t>(a.srcs[0]) & (kPackBytes - 1);
  bool same_offset = offset % elem_size == 0;
  for (int s = 1; s < a.nsrcs; ++s)
    same_offset &= (reinterpret_cast<uintptr_t>(a.srcs[s]) & (kPackBytes - 1)) == offset;
  for (int d = 0; d < a.ndsts; ++d)
    same_offset &= (reinterpret_cast<uintptr_t>(a.dsts[d]) & (kPackBytes - 1)) == offset;
  if (!same_offset) return VectorSplit{a.count, 0, 0};
  size_t head = ((kPackBytes - offset) & (kPackBytes - 1)) / elem_size;
  if (head > a.count) head = a.count;
  const size_t per_pack = kPackBytes / elem_size;
  const size_t packs = (a.count - head) / per_pack;
  return VectorSplit{head, packs, a.count - head - packs * per_pack};
}

// One thread per pack (or per scalar element when there are more of those),
// capped at kMaxBlocks blocks; at least one block so a launch is always valid.
BATON_HD_INLINE LaunchShape ShapeFor(const VectorSplit& split) {
  size_t work = split.packs;
  if (split.head > work) work = split.head;
  if (split.tail > work) work = split.tail;
  size_t blocks = (work + kThreadsPerBlock - 1) / kThreadsPerBlock;
  if (blocks < 1) blocks = 1;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  return LaunchShape{static_cast<unsigned>(blocks), kThreadsPerBlock};
}

// 16 bytes of elements; alignas lets nvcc emit one 128-bit load or store.
template <typename T>
struct alignas(kPackBytes) Pack {
  static constexpr int kElems = static_cast<int>(kPackBytes / sizeof(T));
  T v[kElems];
};

// On the device, one 128-bit load or store whatever T is: nvcc splits a copy
// of the struct itself into one access per element (16 two-byte stores per
// pack of fp16 ran at a quarter of the memory bandwidth).
template <typename T>
BATON_HD_INLINE Pack<T> LoadPack(const T* p) {
#ifdef __CUDA_ARCH__
  union {
    uint4 raw;
    Pack<T> pack;
  } u;
  u.raw = *reinterpret_cast<const uint4*>(p);
  return u.pack;
#else
  Pack<T> pack;  // memcpy: the host has no aliasing exemption for this cast
  memcpy(&pack, p, sizeof(pack));
  return pack;
#endif
}

template <typename T>
BATON_HD_INLINE void StorePack(T* p, const Pack<T>& pack) {
#ifdef __CUDA_ARCH__
  union {
    Pack<T> pack;
    uint4 raw;
  } u;
  u.pack = pack;
  // nvcc splits even a uint4 store into 32-bit ones here; PTX says it once.
  asm("st.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(u.raw.x), "r"(u.raw.y), "r"(u.raw.z),
      "r"(u.raw.w)
      : "memory");
#else
  memcpy(p, &pack, sizeof(pack));
#endif
}

// Reduces the pack starting at element `base` of every source into every
// destination, element by element with the core's arithmetic (same operand
// order, same accumulation type, same rounding as ReduceCopyRange).
template <typename T, typename Op>
BATON_HD_INLINE void ReducePack(const T* const* srcs, int nsrcs, T* const* dsts, int ndsts,
                                size_t base, uint32_t post_divisor) {
  constexpr int kN = Pack<T>::kElems;
  const Pack<T> first = LoadPack<T>(srcs[0] + base);
  if (nsrcs == 1 && post_divisor <= 1) {  // bit-exact copy, as in ReduceCopyRange
    for (int d = 0; d < ndsts; ++d) StorePack<T>(dsts[d] + base, first);
    return;
  }
  const Op op;
  Accum<T> acc[kN];
  for (int j = 0; j < kN; ++j) acc[j] = LoadAcc<T>(first.v[j]);
  for (int s = 1; s < nsrcs; ++s) {
    const Pack<T> next = LoadPack<T>(srcs[s] + base);
    for (int j = 0; j < kN; ++j) acc[j] = op(acc[j], LoadAcc<T>(next.v[j]));
  }
  Pack<T> out;
  for (int j = 0; j < kN; ++j) {
    Accum<T> v = acc[j];
    if (post_divisor > 1) v = PostDivide<T>(v, post_divisor);
    out.v[j] = StoreAcc<T>(v);
  }
  for (int d = 0; d < ndsts; ++d) StorePack<T>(dsts[d] + base, out);
}

// Reduces element i of every source into every destination (the scalar
// head and tail, or everything when the pointers do not allow 16-byte packs).
template <typename T, typename Op>
BATON_HD_INLINE void ReduceElement(const T* const* srcs, int nsrcs, T* const* dsts, int ndsts,
                                   size_t i, uint32_t post_divisor) {
  if (nsrcs == 1 && post_divisor <= 1) {  // bit-exact copy, as in ReduceCopyRange
    const T v = srcs[0][i];
    for (int d = 0; d < ndsts; ++d) dsts[d][i] = v;
    return;
  }
  const Op op;
  Accum<T> acc = LoadAcc<T>(srcs[0][i]);
  for (int s = 1; s < nsrcs; ++s) acc = op(acc, LoadAcc<T>(srcs[s][i]));
  if (post_divisor > 1) acc = PostDivide<T>(acc, post_divisor);
  const T out = StoreAcc<T>(acc);
  for (int d = 0; d < ndsts; ++d) dsts[d][i] = out;
}

// Everything thread `tid` of `nthreads` does in one launch: its share of the
// packs, then of the scalar elements (head and tail as one index range, so
// the kernel holds a single scalar loop), each a grid-stride loop.
template <typename T, typename Op>
BATON_HD void ReduceCopyThread(const KernelArgs& a, const VectorSplit& split, size_t tid,
                               size_t nthreads) {
  const T* srcs[kMaxSrcs];
  T* dsts[kMaxDsts];
  for (int s = 0; s < a.nsrcs; ++s) srcs[s] = static_cast<const T*>(a.srcs[s]);
  for (int d = 0; d < a.ndsts; ++d) dsts[d] = static_cast<T*>(a.dsts[d]);
  constexpr size_t kN = static_cast<size_t>(Pack<T>::kElems);
  for (size_t p = tid; p < split.packs; p += nthreads)
    ReducePack<T, Op>(srcs, a.nsrcs, dsts, a.ndsts, split.head + p * kN, a.post_divisor);
  // Scalar index j < head is element j; j >= head is element j + packs * kN.
  const size_t skip = split.packs * kN;
  for (size_t j = tid; j < split.head + split.tail; j += nthreads)
    ReduceElement<T, Op>(srcs, a.nsrcs, dsts, a.ndsts, j < split.head ? j : j + skip,
                         a.post_divisor);
}

}  // namespace cudakern
}  // namespace baton
