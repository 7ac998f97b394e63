/*
 * The vectorized reduce-copy and PreMulSum loops, written once with Google
 * Highway. cpu_hwy_float.cc, cpu_hwy_int.cc and cpu_hwy_lowp.cc include this
 * through hwy/foreach_target.h, which compiles it once per target of
 * cpu_hwy_targets.h: each pass defines HWY_TARGET, opens that target's
 * namespace (baton::N_AVX2, baton::N_NEON, ...) and switches on its
 * instruction set with #pragma GCC target (HWY_BEFORE_NAMESPACE), so one
 * binary runs on any CPU of its architecture and no vector copy of a shared
 * inline function (the core's, compiled before the pragma) exists.
 *
 * Per element the loops do what ReduceCopyRange does: read every source,
 * combine left to right in the accumulation type, divide, round once, store
 * to each destination; max/min follow the core's FuncMax/FuncMin exactly
 * (take the right operand when it is strictly greater/smaller or the left
 * one is NaN), integers wrap, no FMA. The element count is split into a
 * scalar head (up to the first cache-line boundary of the first destination,
 * for large counts), an unrolled vector body and a scalar tail; head and
 * tail run the core functors themselves. Combinations without a vector
 * path that pays (integer division, 8-bit products, 64-bit products with
 * two lanes: cpu_hwy_lanes-inl.h) return false and stay on the portable
 * loops.
 *
 * Highway's toggle guard stands for #pragma once: this file is meant to be
 * read once per target.
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#if defined(BATON_KERNELS_CPU_HWY_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef BATON_KERNELS_CPU_HWY_INL_H_
#undef BATON_KERNELS_CPU_HWY_INL_H_
#else
#define BATON_KERNELS_CPU_HWY_INL_H_
#endif

#include <hwy/cache_control.h>
#include <hwy/highway.h>
#include <stdint.h>
#include <string.h>

#include <type_traits>

#include "kernels/cpu_hwy.h"
#include "kernels/reduce_copy.h"

HWY_BEFORE_NAMESPACE();
namespace baton {
namespace HWY_NAMESPACE {

// The scalar fallback target gets stubs: the portable loops cover it.
#if HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128

namespace hn = hwy::HWY_NAMESPACE;

#include "kernels/cpu_hwy_lanes-inl.h"

template <OpKind kKind, class V>
HWY_INLINE V Apply(V a, V b) {
  using Lane = hn::TFromV<V>;
  if constexpr (kKind == OpKind::kSum) {
    return hn::Add(a, b);
  } else if constexpr (kKind == OpKind::kProd) {
    return hn::Mul(a, b);
  } else if constexpr (std::is_floating_point_v<Lane>) {
    // FuncMax / FuncMin: b when it is strictly greater (smaller) or a is NaN,
    // written as "keep a where a == a and b is not better": two plain
    // compares (Highway's IsNaN is the slower VFPCLASSPS on AVX-512).
    if constexpr (kKind == OpKind::kMax) {
      return hn::IfThenElse(hn::AndNot(hn::Gt(b, a), hn::Eq(a, a)), a, b);
    } else {
      return hn::IfThenElse(hn::AndNot(hn::Lt(b, a), hn::Eq(a, a)), a, b);
    }
  } else if constexpr (kKind == OpKind::kMax) {
    return hn::Max(a, b);
  } else {
    return hn::Min(a, b);
  }
}

// The accumulators of one unit at p (one, or two for kParts 2).
template <class L, typename T, class V>
HWY_INLINE void LoadUnit(typename L::D d, const T* p, V& a0, V& a1) {
  if constexpr (L::kParts == 1) {
    a0 = L::Load(d, p);
    a1 = a0;  // unused, but never an indeterminate value
  } else {
    L::LoadPair(d, p, a0, a1);
  }
}

// The four accumulators of an unrolled step at p: four units, or two.
template <class L, typename T, class V>
HWY_INLINE void LoadStep(typename L::D d, const T* p, size_t unit, V& a0, V& a1, V& a2, V& a3) {
  if constexpr (L::kParts == 1) {
    a0 = L::Load(d, p);
    a1 = L::Load(d, p + unit);
    a2 = L::Load(d, p + 2 * unit);
    a3 = L::Load(d, p + 3 * unit);
  } else {
    L::LoadPair(d, p, a0, a1);
    L::LoadPair(d, p + unit, a2, a3);
  }
}

// Whether Stream writes exactly one vector of DS. Highway 1.0.3 streams
// x86 vectors narrower than 16 bytes with a 16-byte store (past the end);
// other architectures store exactly the lanes.
template <class DS>
constexpr bool StreamsWhole() {
#if HWY_ARCH_X86
  return hn::MaxLanes(DS()) * sizeof(hn::TFromD<DS>) >= 16;
#else
  return true;
#endif
}

template <bool kNt, class DS, class VS, typename S>
HWY_INLINE void StoreUnit(DS ds, VS v, S* p) {
  if constexpr (kNt && StreamsWhole<DS>()) {
    hn::Stream(v, ds, p);
  } else {
    hn::StoreU(v, ds, p);
  }
}

// Four adjacent units from p. Streaming stores of vectors narrower than 16
// bytes (fp8 under SSE4 and AVX2, fp16 under SSE4) join two or four of
// them into one 16-byte store; p is then 16-byte aligned (the cache-line
// head and whole steps since).
template <bool kNt, class DS, class VS, typename S>
HWY_INLINE void StoreFour(DS ds, VS v0, VS v1, VS v2, VS v3, S* p, size_t unit) {
  if constexpr (kNt && !StreamsWhole<DS>()) {
    constexpr size_t kBytes = hn::MaxLanes(DS()) * sizeof(S);
    const hn::Twice<DS> d2;
    if constexpr (kBytes == 8) {
      hn::Stream(hn::Combine(d2, v1, v0), d2, p);
      hn::Stream(hn::Combine(d2, v3, v2), d2, p + 2 * unit);
    } else {
      static_assert(kBytes == 4, "streaming stores of this width");
      const hn::Twice<decltype(d2)> d4;
      hn::Stream(hn::Combine(d4, hn::Combine(d2, v3, v2), hn::Combine(d2, v1, v0)), d4, p);
    }
  } else {
    StoreUnit<kNt>(ds, v0, p);
    StoreUnit<kNt>(ds, v1, p + unit);
    StoreUnit<kNt>(ds, v2, p + 2 * unit);
    StoreUnit<kNt>(ds, v3, p + 3 * unit);
  }
}

// The rounded unit of one or two accumulators.
template <class L, class V>
HWY_INLINE auto PackUnit(typename L::D d, V a0, V a1) {
  if constexpr (L::kParts == 1) {
    (void)a1;
    return L::Pack(d, a0);
  } else {
    return L::Pack(d, a0, a1);
  }
}

// Rounds and stores the four accumulators of a step to dst (elements, as
// Stored lanes).
template <class L, bool kNt, class V>
HWY_INLINE void StoreStep(typename L::D d, V a0, V a1, V a2, V a3, typename L::Stored* o0,
                          typename L::Stored* o1, size_t unit) {
  const typename L::DS ds;
  if constexpr (L::kParts == 1) {
    const auto p0 = L::Pack(d, a0), p1 = L::Pack(d, a1), p2 = L::Pack(d, a2), p3 = L::Pack(d, a3);
    StoreFour<kNt>(ds, p0, p1, p2, p3, o0, unit);
    if (o1 != nullptr) StoreFour<false>(ds, p0, p1, p2, p3, o1, unit);
  } else {
    const auto p0 = L::Pack(d, a0, a1), p1 = L::Pack(d, a2, a3);
    StoreUnit<kNt>(ds, p0, o0);
    StoreUnit<kNt>(ds, p1, o0 + unit);
    if (o1 != nullptr) {
      StoreUnit<false>(ds, p0, o1);
      StoreUnit<false>(ds, p1, o1 + unit);
    }
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

// One step of four accumulators at element i: every source read before
// any destination is written. (A function rather than a lambda: GCC does
// not inline a lambda this size, and a call per step costs 10%.)
template <class L, OpKind kKind, bool kDiv, bool kNt, typename T, class V>
HWY_INLINE void ReduceStep(typename L::D d, const T* const* sp, int ns, size_t i, size_t unit, V dv,
                           typename L::Stored* o0, typename L::Stored* o1) {
  V a0, a1, a2, a3;
  LoadStep<L>(d, sp[0] + i, unit, a0, a1, a2, a3);
  for (int s = 1; s < ns; ++s) {
    V b0, b1, b2, b3;
    LoadStep<L>(d, sp[s] + i, unit, b0, b1, b2, b3);
    a0 = Apply<kKind>(a0, b0);
    a1 = Apply<kKind>(a1, b1);
    a2 = Apply<kKind>(a2, b2);
    a3 = Apply<kKind>(a3, b3);
  }
  if constexpr (kDiv) {
    a0 = hn::Div(a0, dv);
    a1 = hn::Div(a1, dv);
    a2 = hn::Div(a2, dv);
    a3 = hn::Div(a3, dv);
  } else {
    (void)dv;
  }
  StoreStep<L, kNt>(d, a0, a1, a2, a3, o0 + i, o1 == nullptr ? nullptr : o1 + i, unit);
}

// The vector body over [begin, end) in whole steps, then whole units;
// returns where it stopped. kSrcs > 0 fixes the source count at compile
// time (the hot two-source case); 0 reads it from nsrcs. Four independent
// accumulators per step cover the latency of a reduction chain and stay in
// registers for 8 sources. Within a step every source is read before any
// destination is written, so a destination that is one of the sources (in
// place) is safe.
template <typename T, OpKind kKind, bool kDiv, int kSrcs, bool kNt>
size_t ReduceVectors(const T* const* srcs, int nsrcs, T* d0, T* d1, size_t begin, size_t end,
                     uint32_t divisor) {
  using L = typename LanesOf<T>::type;
  using S = typename L::Stored;
  using Lane = hn::TFromD<typename L::D>;
  const typename L::D d;
  const typename L::DS ds;
  const size_t unit = hn::Lanes(ds);
  const size_t step = (4 / L::kParts) * unit;
  const int ns = kSrcs > 0 ? kSrcs : nsrcs;
  // Local copies: the stores below may alias anything, and the compiler can
  // then keep these in registers.
  const T* sp[kMaxReduceSrcs];
  for (int s = 0; s < ns; ++s) sp[s] = srcs[s];
  const auto dv = hn::Set(d, static_cast<Lane>(kDiv ? divisor : 1u));
  S* o0 = reinterpret_cast<S*>(d0);
  S* o1 = reinterpret_cast<S*>(d1);

  using V = typename L::V;
  size_t i = begin;
  if constexpr (L::kParts == 2) {
    // Four units per iteration for bf16 too, as for the other types.
    for (; i + 2 * step <= end; i += 2 * step) {
      ReduceStep<L, kKind, kDiv, kNt>(d, sp, ns, i, unit, dv, o0, o1);
      ReduceStep<L, kKind, kDiv, kNt>(d, sp, ns, i + step, unit, dv, o0, o1);
    }
  }
  for (; i + step <= end; i += step)
    ReduceStep<L, kKind, kDiv, kNt>(d, sp, ns, i, unit, dv, o0, o1);
  // Whole units; streaming only where a unit is a whole streaming store.
  for (; i + unit <= end; i += unit) {
    V a0, a1;
    LoadUnit<L>(d, sp[0] + i, a0, a1);
    for (int s = 1; s < ns; ++s) {
      V b0, b1;
      LoadUnit<L>(d, sp[s] + i, b0, b1);
      a0 = Apply<kKind>(a0, b0);
      if constexpr (L::kParts == 2) a1 = Apply<kKind>(a1, b1);
    }
    if constexpr (kDiv) {
      a0 = hn::Div(a0, dv);
      if constexpr (L::kParts == 2) a1 = hn::Div(a1, dv);
    }
    const auto packed = PackUnit<L>(d, a0, a1);
    StoreUnit<kNt>(ds, packed, o0 + i);
    if (o1 != nullptr) StoreUnit<false>(ds, packed, o1 + i);
  }
  return i;
}

template <typename T, OpKind kKind, bool kDiv, bool kNt>
size_t ReduceVectorsAnySrcs(const T* const* srcs, int nsrcs, T* d0, T* d1, size_t begin, size_t end,
                            uint32_t divisor) {
  if (nsrcs == 2) {
    return ReduceVectors<T, kKind, kDiv, 2, kNt>(srcs, 2, d0, d1, begin, end, divisor);
  }
  return ReduceVectors<T, kKind, kDiv, 0, kNt>(srcs, nsrcs, d0, d1, begin, end, divisor);
}

template <typename T, OpKind kKind, bool kDiv>
void RunReduce(const ReduceCopyArgs& args, const SimdOptions& options) {
  using Op = CoreOp<T, kKind>;
  const T* srcs[kMaxReduceSrcs];
  for (int s = 0; s < args.nsrcs; ++s) srcs[s] = static_cast<const T*>(args.srcs[s]);
  T* d0 = static_cast<T*>(args.dsts[0]);
  T* d1 = args.ndsts > 1 && args.dsts[1] != args.dsts[0] ? static_cast<T*>(args.dsts[1]) : nullptr;
  const size_t count = args.count;
  const uint32_t divisor = args.post_divisor;

  // Large calls first align the first destination to a cache line with a
  // scalar head: no store then splits a line, and streaming stores need it.
  // (Sources keep their own alignment; a split load costs much less.)
  const size_t vector_bytes = hn::Lanes(hn::ScalableTag<uint8_t>());
  const size_t asked = options.line_bytes;
  const size_t line = asked > vector_bytes && (asked & (asked - 1)) == 0 ? asked : vector_bytes;
  const uintptr_t d0_addr = reinterpret_cast<uintptr_t>(d0);
  const size_t unit = hn::Lanes(typename LanesOf<T>::type::DS());
  size_t head = 0;
  if (count >= 16 * unit && d0_addr % sizeof(T) == 0) {
    head = ((line - d0_addr % line) % line) / sizeof(T);
  }
  ScalarRange<T, Op, kDiv>(srcs, args.nsrcs, d0, d1, 0, head, divisor);

  // Only the first destination streams (ReduceCopyArgs::non_temporal).
  const bool use_nt = count * sizeof(T) >= options.non_temporal_min_bytes &&
                      (d0_addr + head * sizeof(T)) % line == 0;
  size_t done;
  if (use_nt) {
    done =
        ReduceVectorsAnySrcs<T, kKind, kDiv, true>(srcs, args.nsrcs, d0, d1, head, count, divisor);
    // Order the streaming stores before whatever publishes the result.
    hwy::FlushStream();
  } else {
    done =
        ReduceVectorsAnySrcs<T, kKind, kDiv, false>(srcs, args.nsrcs, d0, d1, head, count, divisor);
  }
  ScalarRange<T, Op, kDiv>(srcs, args.nsrcs, d0, d1, done, count, divisor);
}

template <typename T, OpKind kKind>
bool ReduceWithOp(const ReduceCopyArgs& args, const SimdOptions& options) {
  if constexpr (!HasOp<typename LanesOf<T>::type, kKind>()) {
    return false;
  } else if (args.post_divisor > 1) {
    // Only floating accumulators divide in vectors (no integer division).
    if constexpr (std::is_floating_point_v<Accum<T>>) {
      RunReduce<T, kKind, true>(args, options);
      return true;
    } else {
      return false;
    }
  } else {
    RunReduce<T, kKind, false>(args, options);
    return true;
  }
}

template <typename T>
bool ReduceCopyTyped(const ReduceCopyArgs& args, const SimdOptions& options) {
  switch (args.op) {
    case batonProd:
      return ReduceWithOp<T, OpKind::kProd>(args, options);
    case batonMax:
      return ReduceWithOp<T, OpKind::kMax>(args, options);
    case batonMin:
      return ReduceWithOp<T, OpKind::kMin>(args, options);
    default:  // batonSum, batonAvg (the divisor makes the average)
      return ReduceWithOp<T, OpKind::kSum>(args, options);
  }
}

// ---- PreMulSum --------------------------------------------------------------

// own * s, then (kReduce) the sum with the other operand y in the
// requested order.
template <bool kReduce, bool kOwnFirst, class V>
HWY_INLINE V ScaleOne(V s, V own, V y) {
  const V product = hn::Mul(own, s);
  if constexpr (!kReduce) {
    (void)y;
    return product;
  } else if constexpr (kOwnFirst) {
    return hn::Add(product, y);
  } else {
    return hn::Add(y, product);
  }
}

// dst = own * s (kReduce false), or own * s + other / other + own * s: the
// product kept in the accumulation type, rounded once with the sum, as
// ScaleCopyRange and ScaleReduceRange do. Every operand of a step is read
// before it is stored, so dst may be own or other.
template <typename T, bool kReduce, bool kOwnFirst>
void RunScale(T* dst, const T* own, const T* other, size_t count, T scalar) {
  using L = typename ScaleLanesOf<T>::type;
  using S = typename L::Stored;
  const typename L::D d;
  const typename L::DS ds;
  const size_t unit = hn::Lanes(ds);
  const size_t step = (4 / L::kParts) * unit;
  const auto s = hn::Set(d, LoadAcc<T>(scalar));
  S* out = reinterpret_cast<S*>(dst);
  using V = typename L::V;
  auto scaled = [&](V own_acc, V other_acc) {
    return ScaleOne<kReduce, kOwnFirst>(s, own_acc, other_acc);
  };
  size_t i = 0;
  for (; i + step <= count; i += step) {
    V a0, a1, a2, a3, b0, b1, b2, b3;
    LoadStep<L>(d, own + i, unit, a0, a1, a2, a3);
    if constexpr (kReduce) {
      LoadStep<L>(d, other + i, unit, b0, b1, b2, b3);
    } else {
      b0 = a0, b1 = a1, b2 = a2, b3 = a3;  // unused by ScaleOne
    }
    StoreStep<L, false>(d, scaled(a0, b0), scaled(a1, b1), scaled(a2, b2), scaled(a3, b3), out + i,
                        nullptr, unit);
  }
  for (; i + unit <= count; i += unit) {
    V a0, a1, b0, b1;
    LoadUnit<L>(d, own + i, a0, a1);
    if constexpr (kReduce) {
      LoadUnit<L>(d, other + i, b0, b1);
    } else {
      b0 = a0, b1 = a1;  // unused by ScaleOne
    }
    hn::StoreU(PackUnit<L>(d, scaled(a0, b0), scaled(a1, b1)), ds, out + i);
  }
  if constexpr (kReduce) {
    ScaleReduceRange<T>(own, other, dst, i, count, 1, scalar, kOwnFirst);
  } else {
    ScaleCopyRange<T>(own, dst, i, count, 1, scalar);
  }
}

template <typename T>
bool ScaleTyped(const ScaleArgs& args) {
  if constexpr (!HasOp<typename ScaleLanesOf<T>::type, OpKind::kProd>()) {
    return false;
  } else {
    T scalar;
    memcpy(&scalar, args.scalar, sizeof(T));
    T* dst = static_cast<T*>(args.dst);
    const T* own = static_cast<const T*>(args.own);
    const T* other = static_cast<const T*>(args.other);
    if (other == nullptr) {
      RunScale<T, false, true>(dst, own, nullptr, args.count, scalar);
    } else if (args.own_first) {
      RunScale<T, true, true>(dst, own, other, args.count, scalar);
    } else {
      RunScale<T, true, false>(dst, own, other, args.count, scalar);
    }
    return true;
  }
}

// ---- Entry points of one group of datatypes ----------------------------------

template <typename T>
constexpr batonDataType_t kDatatypeOf = batonFloat32;
template <>
constexpr batonDataType_t kDatatypeOf<int8_t> = batonInt8;
template <>
constexpr batonDataType_t kDatatypeOf<uint8_t> = batonUint8;
template <>
constexpr batonDataType_t kDatatypeOf<int32_t> = batonInt32;
template <>
constexpr batonDataType_t kDatatypeOf<uint32_t> = batonUint32;
template <>
constexpr batonDataType_t kDatatypeOf<int64_t> = batonInt64;
template <>
constexpr batonDataType_t kDatatypeOf<uint64_t> = batonUint64;
template <>
constexpr batonDataType_t kDatatypeOf<half_t> = batonFloat16;
template <>
constexpr batonDataType_t kDatatypeOf<double> = batonFloat64;
template <>
constexpr batonDataType_t kDatatypeOf<bfloat16_t> = batonBfloat16;
template <>
constexpr batonDataType_t kDatatypeOf<fp8_e4m3_t> = batonFloat8e4m3;
template <>
constexpr batonDataType_t kDatatypeOf<fp8_e5m2_t> = batonFloat8e5m2;

// ReduceCopy for whichever of Ts args.datatype is; false for the others.
template <typename... Ts>
bool ReduceCopyOneOf(const ReduceCopyArgs& args, const SimdOptions& options) {
  bool handled = false;
  (void)((args.datatype == kDatatypeOf<Ts> &&
          (handled = ReduceCopyTyped<Ts>(args, options), true)) ||
         ...);
  return handled;
}

template <typename... Ts>
bool ScaleOneOf(const ScaleArgs& args) {
  bool handled = false;
  (void)((args.datatype == kDatatypeOf<Ts> && (handled = ScaleTyped<Ts>(args), true)) || ...);
  return handled;
}

#else  // the scalar fallback target

template <typename... Ts>
bool ReduceCopyOneOf(const ReduceCopyArgs&, const SimdOptions&) {
  return false;
}
template <typename... Ts>
bool ScaleOneOf(const ScaleArgs&) {
  return false;
}

#endif  // HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128

}  // namespace HWY_NAMESPACE
}  // namespace baton
HWY_AFTER_NAMESPACE();

#endif  // BATON_KERNELS_CPU_HWY_INL_H_ toggle
