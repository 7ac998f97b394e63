/*
 * Vector access per element type for the Highway back end, one target at a
 * time: which lanes accumulate a datatype, how a unit of elements loads
 * into them and is rounded back (the conversions of cpu_hwy_convert-inl.h
 * for fp16, bf16 and fp8), and which operations have a vector path that
 * pays on this target.
 *
 * Included by cpu_hwy-inl.h inside baton::HWY_NAMESPACE (with hn naming
 * hwy::HWY_NAMESPACE), once per target: Highway's toggle guard stands for
 * #pragma once.
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#if defined(BATON_KERNELS_CPU_HWY_LANES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef BATON_KERNELS_CPU_HWY_LANES_INL_H_
#undef BATON_KERNELS_CPU_HWY_LANES_INL_H_
#else
#define BATON_KERNELS_CPU_HWY_LANES_INL_H_
#endif

#include "kernels/cpu_hwy_convert-inl.h"

// Types whose accumulator is the element itself: one lane per element.
template <typename T, class Tag = hn::ScalableTag<T>>
struct DirectLanes {
  using D = Tag;
  using V = hn::Vec<D>;
  using Stored = T;
  using DS = D;
  static constexpr int kParts = 1;
  static HWY_INLINE V Load(D d, const T* p) { return hn::LoadU(d, p); }
  static HWY_INLINE V Pack(D /*d*/, V v) { return v; }
};

// Vector access for element type T: D describes the accumulators, DS the
// vector a store writes (Stored lanes, a "unit" of elements), kParts how
// many accumulators one unit holds: 1, with Load(d, p) and Pack(d, a), or 2
// (bf16), with LoadPair(d, p, a, b) and Pack(d, a, b).
template <typename T>
struct LanesOf {
  using type = DirectLanes<T>;
};
template <>
struct LanesOf<half_t> {
  using type = HalfLanes;
};
template <>
struct LanesOf<bfloat16_t> {
  using type = Bf16Lanes;
};
template <>
struct LanesOf<fp8_e4m3_t> {
  using type = Fp8Lanes<fp8_e4m3_t>;
};
template <>
struct LanesOf<fp8_e5m2_t> {
  using type = Fp8Lanes<fp8_e5m2_t>;
};

// Which reduction a call performs, for picking the vector operation.
enum class OpKind { kSum, kProd, kMax, kMin };

template <typename T, OpKind kKind>
using CoreOp = std::conditional_t<
    kKind == OpKind::kProd, FuncProd<T>,
    std::conditional_t<kKind == OpKind::kMax, FuncMax<T>,
                       std::conditional_t<kKind == OpKind::kMin, FuncMin<T>, FuncSum<T>>>>;

// What the target offers for accumulators V, asked rather than listed:
// Highway 1.0.3 has no 8-bit products, 64-bit ones natively only on AVX-512
// and SVE (emulated from 32-bit multiplies elsewhere), and on SVE its
// operators are named functions (elsewhere Mul is an unconstrained wrapper
// of operator*, so only the operator itself can be asked about).
template <class V>
constexpr bool HasMul() {
#if HWY_HAVE_SCALABLE
  return requires(V a) {
    hn::Mul(a, a);
  };
#else
  return requires(V a) {
    operator*(a, a);
  };
#endif
}
template <class V>
constexpr bool HasMinMax() {
  return requires(V a) {
    hn::Min(a, a);
    hn::Max(a, a);
  };
}

// Whether a vector product pays: Highway emulates 64-bit integer products
// from three 32-bit ones outside AVX-512 and SVE, which with two lanes
// (SSE4, NEON) loses to the scalar multiply (0.4x under SSE4 in
// kernels_bench); with four (AVX2) it wins 1.85x.
template <class D>
constexpr bool ProductPays() {
  using Lane = hn::TFromD<D>;
  if constexpr (sizeof(Lane) == 8 && std::is_integral_v<Lane>) {
    return HWY_HAVE_SCALABLE || (HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3) || hn::MaxLanes(D()) >= 4;
  } else {
    return true;
  }
}

// Whether lanes L have a vector path for kKind.
template <class L, OpKind kKind>
constexpr bool HasOp() {
  using Lane = hn::TFromD<typename L::D>;
  if constexpr (kKind == OpKind::kProd) {
    return HasMul<typename L::V>() && ProductPays<typename L::D>();
  } else if constexpr (kKind == OpKind::kMax || kKind == OpKind::kMin) {
    return std::is_floating_point_v<Lane> || HasMinMax<typename L::V>();
  } else {
    return true;
  }
}

// The lanes of PreMulSum's passes: those of the reduce-copy, but at most
// 256 bits wide on AVX-512 for the types stored as they accumulate. With
// one multiply per element they are bound by memory from L2 on, and there
// 512-bit vectors moved 10% less from DRAM than 256-bit ones on the Zen 4
// measured (docs/design.md), while 256-bit ones were as fast in L1.
template <typename T>
struct ScaleLanesOf {
  using type = typename LanesOf<T>::type;
};
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
template <typename T>
requires std::is_arithmetic_v<T>
struct ScaleLanesOf<T> {
  using type = DirectLanes<T, hn::CappedTag<T, 32 / sizeof(T)>>;
};
#endif

#endif  // BATON_KERNELS_CPU_HWY_LANES_INL_H_ toggle
