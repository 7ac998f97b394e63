/*
 * The vectorized reduce-copy loop, written once over an instruction-set
 * adapter. Included only by cpu_avx2.cc and cpu_avx512.cc (kept for perf/kernels_bench), each after
 * it has switched on its GCC target (#pragma GCC target) and defined, in an anonymous namespace, a
 * specialization of
 *
 *   template <typename T> struct Simd {
 *     static constexpr bool kAvailable;   // false: no vector path for T
 *     static constexpr bool kHasProd;     // a vector multiply exists
 *     static constexpr bool kHasDiv;      // a vector divide exists (floats)
 *     using V;                            // kLanes accumulators of Accum<T>
 *     static constexpr size_t kLanes;
 *     V Load(const T*);  void Store(T*, V);  void StoreNonTemporal(T*, V);
 *     V Sum(V, V);  V Prod(V, V);  V Max(V, V);  V Min(V, V);
 *     V Divisor(uint32_t);  V Div(V, V);
 *   };
 *
 * with max/min following the core's FuncMax/FuncMin exactly (take the right
 * operand when it is strictly greater/smaller or the left one is NaN) and
 * load/store converting like LoadAcc/StoreAcc (F16C for fp16 and E5M2,
 * integer round-to-nearest-even for bf16, the core's branch-free steps lane
 * for lane for fp8). Everything here has internal linkage, so
 * the two inclusions cannot clash at link time and no AVX-512 copy of a
 * shared inline function can end up running on a CPU without AVX-512.
 *
 * Per element the loop does what ReduceCopyRange does: read every source,
 * combine left to right, divide, round once, store to each destination. The
 * element count is split into a scalar head (up to the first 64-byte boundary
 * of the first destination, for large counts), an unrolled vector body and a
 * scalar tail; head and tail use the core functors themselves.
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#pragma once

namespace baton {
namespace {

#define BATON_SIMD_INLINE inline __attribute__((always_inline))

// Which reduction a core functor performs, for picking the vector operation.
enum class OpKind { kSum, kProd, kMax, kMin };

template <typename T, typename Op>
constexpr OpKind OpKindOf() {
  if constexpr (std::is_same_v<Op, FuncProd<T>>) {
    return OpKind::kProd;
  } else if constexpr (std::is_same_v<Op, FuncMax<T>>) {
    return OpKind::kMax;
  } else if constexpr (std::is_same_v<Op, FuncMin<T>>) {
    return OpKind::kMin;
  } else {
    return OpKind::kSum;
  }
}

template <typename T, OpKind kKind>
BATON_SIMD_INLINE typename Simd<T>::V ApplyOp(typename Simd<T>::V a, typename Simd<T>::V b) {
  if constexpr (kKind == OpKind::kProd) {
    return Simd<T>::Prod(a, b);
  } else if constexpr (kKind == OpKind::kMax) {
    return Simd<T>::Max(a, b);
  } else if constexpr (kKind == OpKind::kMin) {
    return Simd<T>::Min(a, b);
  } else {
    return Simd<T>::Sum(a, b);
  }
}

// The core's per-element loop for [begin, end): the head and tail of a call.
template <typename T, typename Op, bool kDiv>
void ScalarRange(const T* const* srcs, int nsrcs, T* d0, T* d1, size_t begin, size_t end,
                 uint32_t divisor) {
  const Op op;
  for (size_t i = begin; i < end; ++i) {
    Accum<T> acc = LoadAcc<T>(srcs[0][i]);
    for (int s = 1; s < nsrcs; ++s) acc = op(acc, LoadAcc<T>(srcs[s][i]));
    if constexpr (kDiv) acc = PostDivide<T>(acc, divisor);
    const T out = StoreAcc<T>(acc);
    d0[i] = out;
    if (d1 != nullptr) d1[i] = out;
  }
}

// Vectors per loop iteration: enough independent loads in flight to cover
// the latency of a reduction chain, few enough to stay in registers for 8
// sources.
constexpr int kUnroll = 4;

template <typename T, bool kNt>
BATON_SIMD_INLINE void StoreVec(T* p, typename Simd<T>::V v) {
  if constexpr (kNt) {
    Simd<T>::StoreNonTemporal(p, v);
  } else {
    Simd<T>::Store(p, v);
  }
}

// The vector body over [begin, end) in whole vectors; returns where it
// stopped. kSrcs > 0 fixes the source count at compile time (the hot
// two-source case); 0 reads it from nsrcs. Within one iteration every source
// is read before any destination is written, so a destination that is one of
// the sources (in place) is safe.
template <typename T, OpKind kKind, bool kDiv, int kSrcs, bool kNt>
size_t VectorRange(const T* const* srcs, int nsrcs, T* d0, T* d1, size_t begin, size_t end,
                   uint32_t divisor) {
  using S = Simd<T>;
  using V = typename S::V;
  constexpr size_t kLanes = S::kLanes;
  constexpr size_t kStep = kUnroll * kLanes;
  const int ns = kSrcs > 0 ? kSrcs : nsrcs;
  // Local copies: the stores below may alias anything (intrinsic vector types
  // are may_alias), and the compiler can then keep these in registers.
  const T* sp[kMaxReduceSrcs];
  for (int s = 0; s < ns; ++s) sp[s] = srcs[s];
  V dv{};
  if constexpr (kDiv) dv = S::Divisor(divisor);

  size_t i = begin;
  for (; i + kStep <= end; i += kStep) {
    V acc[kUnroll];
    for (int u = 0; u < kUnroll; ++u) acc[u] = S::Load(sp[0] + i + u * kLanes);
    for (int s = 1; s < ns; ++s) {
      for (int u = 0; u < kUnroll; ++u) {
        acc[u] = ApplyOp<T, kKind>(acc[u], S::Load(sp[s] + i + u * kLanes));
      }
    }
    if constexpr (kDiv) {
      for (int u = 0; u < kUnroll; ++u) acc[u] = S::Div(acc[u], dv);
    }
    for (int u = 0; u < kUnroll; ++u) StoreVec<T, kNt>(d0 + i + u * kLanes, acc[u]);
    if (d1 != nullptr) {
      for (int u = 0; u < kUnroll; ++u) StoreVec<T, kNt>(d1 + i + u * kLanes, acc[u]);
    }
  }
  for (; i + kLanes <= end; i += kLanes) {
    V acc = S::Load(sp[0] + i);
    for (int s = 1; s < ns; ++s) acc = ApplyOp<T, kKind>(acc, S::Load(sp[s] + i));
    if constexpr (kDiv) acc = S::Div(acc, dv);
    StoreVec<T, kNt>(d0 + i, acc);
    if (d1 != nullptr) StoreVec<T, kNt>(d1 + i, acc);
  }
  return i;
}

template <typename T, OpKind kKind, bool kDiv, bool kNt>
size_t VectorRangeAnySrcs(const T* const* srcs, int nsrcs, T* d0, T* d1, size_t begin, size_t end,
                          uint32_t divisor) {
  if (nsrcs == 2) return VectorRange<T, kKind, kDiv, 2, kNt>(srcs, 2, d0, d1, begin, end, divisor);
  return VectorRange<T, kKind, kDiv, 0, kNt>(srcs, nsrcs, d0, d1, begin, end, divisor);
}

template <typename T, typename Op, bool kDiv>
void RunTyped(const ReduceCopyArgs& args, const old_kernels::SimdOptions& options) {
  constexpr OpKind kKind = OpKindOf<T, Op>();
  const T* srcs[kMaxReduceSrcs];
  for (int s = 0; s < args.nsrcs; ++s) srcs[s] = static_cast<const T*>(args.srcs[s]);
  T* d0 = static_cast<T*>(args.dsts[0]);
  T* d1 = args.ndsts > 1 && args.dsts[1] != args.dsts[0] ? static_cast<T*>(args.dsts[1]) : nullptr;
  const size_t count = args.count;
  const uint32_t divisor = args.post_divisor;

  // Large calls first align the first destination to a cache line with a
  // scalar head: no store then splits a line, and streaming stores need it.
  // (Sources keep their own alignment; a split load costs much less.)
  constexpr size_t kLine = 64;
  const uintptr_t d0_addr = reinterpret_cast<uintptr_t>(d0);
  size_t head = 0;
  if (count >= 4 * kUnroll * Simd<T>::kLanes && d0_addr % sizeof(T) == 0) {
    head = ((kLine - d0_addr % kLine) % kLine) / sizeof(T);
  }
  ScalarRange<T, Op, kDiv>(srcs, args.nsrcs, d0, d1, 0, head, divisor);

  const bool d1_in_phase =
      d1 == nullptr || (reinterpret_cast<uintptr_t>(d1) - d0_addr) % kLine == 0;
  const bool use_nt = count * sizeof(T) >= options.non_temporal_min_bytes && d1_in_phase &&
                      (d0_addr + head * sizeof(T)) % kLine == 0;
  size_t done;
  if (use_nt) {
    done = VectorRangeAnySrcs<T, kKind, kDiv, true>(srcs, args.nsrcs, d0, d1, head, count, divisor);
    // Order the streaming stores before whatever publishes the result.
    _mm_sfence();
  } else {
    done =
        VectorRangeAnySrcs<T, kKind, kDiv, false>(srcs, args.nsrcs, d0, d1, head, count, divisor);
  }
  ScalarRange<T, Op, kDiv>(srcs, args.nsrcs, d0, d1, done, count, divisor);
}

// The back end's entry: false when (datatype, op, divisor) has no vector path.
bool SimdReduceCopy(const ReduceCopyArgs& args, const old_kernels::SimdOptions& options) {
  bool handled = false;
  const bool divide = args.post_divisor > 1;
  DispatchReduce(args.datatype, args.op, [&](auto type_tag, auto op_tag) {
    using T = typename decltype(type_tag)::type;
    using Op = typename decltype(op_tag)::type;
    using S = Simd<T>;
    if constexpr (S::kAvailable) {
      if constexpr (OpKindOf<T, Op>() == OpKind::kProd && !S::kHasProd) {
        return;
      } else {
        if (divide) {
          if constexpr (S::kHasDiv) {
            RunTyped<T, Op, true>(args, options);
            handled = true;
          }
        } else {
          RunTyped<T, Op, false>(args, options);
          handled = true;
        }
      }
    }
  });
  return handled;
}

#undef BATON_SIMD_INLINE

}  // namespace
}  // namespace baton
