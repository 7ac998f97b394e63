/*
 * Vector loads and stores of fp16, bf16 and the two fp8 formats for the
 * Highway back end, one target at a time: each reproduces the scalar
 * conversion of reduce_copy.h (HalfToFloat, FloatToHalf, Bf16ToFloat,
 * FloatToBf16, Fp8E4m3ToFloat, Fp8E5m2ToFloat, FloatToFp8) bit for bit,
 * lane for lane, with the same branch-free steps (a select per case).
 *
 * fp16 uses the hardware conversions where they are exact and match the
 * core: x86 F16C (VCVTPH2PS / VCVTPS2PH, in every target from AVX2 up) and
 * aarch64's FCVT (NEON, SVE); both keep NaN payloads, quiet NaNs and round
 * to nearest even as the core does. SSE4 has no F16C, and Highway 1.0.3's
 * emulation truncates, so that target runs the core's integer steps.
 * bf16 never uses a hardware conversion (Highway's DemoteTo truncates, and
 * AVX512_BF16 flushes subnormals). fp8 is the core's integer steps on every
 * target, except E5M2 loads, which are the upper byte of an fp16.
 *
 * Included by cpu_hwy_lanes-inl.h inside baton::HWY_NAMESPACE, once per target
 * (Highway's toggle instead of #pragma once). No FMA can appear: no
 * multiply feeds an add here, and the build passes -ffp-contract=off.
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#if defined(BATON_KERNELS_CPU_HWY_CONVERT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef BATON_KERNELS_CPU_HWY_CONVERT_INL_H_
#undef BATON_KERNELS_CPU_HWY_CONVERT_INL_H_
#else
#define BATON_KERNELS_CPU_HWY_CONVERT_INL_H_
#endif

// Whether this target converts fp16 in hardware (see above).
#undef BATON_HWY_NATIVE_F16
#if (HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2) || (HWY_ARCH_ARM_A64 && HWY_TARGET <= HWY_NEON)
#define BATON_HWY_NATIVE_F16 1
#else
#define BATON_HWY_NATIVE_F16 0
#endif

// Every lane of a 32-bit vector of d's shape set to bits.
template <class D>
HWY_INLINE hn::Vec<hn::RebindToUnsigned<D>> U32(D /*d*/, uint32_t bits) {
  return hn::Set(hn::RebindToUnsigned<D>(), bits);
}

// a > b for 32-bit patterns below 2^31 (|x| bits): a signed compare, which
// every target has natively (x86 lacks an unsigned one); a mask for the
// unsigned lanes.
template <class DF, class VU>
HWY_INLINE auto GreaterBits(DF, VU a, VU b) {
  const hn::RebindToSigned<DF> di;
  return hn::RebindMask(hn::RebindToUnsigned<DF>(), hn::Gt(hn::BitCast(di, a), hn::BitCast(di, b)));
}

// HalfToFloat on 16-bit patterns held in 32-bit lanes.
template <class DF, class VU>
HWY_INLINE hn::Vec<DF> HalfBitsToFloat(DF df, VU h) {
  const hn::RebindToUnsigned<DF> du;
  const auto sign = hn::ShiftLeft<16>(hn::And(h, U32(df, 0x8000u)));
  const auto exp_mant = hn::ShiftLeft<13>(hn::And(h, U32(df, 0x7fffu)));
  const auto exp = hn::And(exp_mant, U32(df, 0x0f800000u));
  const auto normal = hn::Add(exp_mant, U32(df, (127u - 15u) << 23));
  // Inf/NaN: a NaN (nonzero mantissa) also gets the quiet bit.
  const auto has_mant = hn::Ne(hn::And(exp_mant, U32(df, 0x007fe000u)), hn::Zero(du));
  const auto quiet = hn::IfThenElseZero(has_mant, U32(df, 1u << 22));
  const auto non_finite = hn::Or(hn::Or(exp_mant, U32(df, 0x7f800000u)), quiet);
  // Zero/subnormal: exactly (2^-14 + m * 2^-24) - 2^-14.
  const auto magic = hn::Set(df, BitsFloat(113u << 23));
  const auto subnormal =
      hn::BitCast(du, hn::Sub(hn::BitCast(df, hn::Add(exp_mant, U32(df, 113u << 23))), magic));
  auto out = hn::IfThenElse(hn::Eq(exp, hn::Zero(du)), subnormal, normal);
  out = hn::IfThenElse(hn::Eq(exp, U32(df, 0x0f800000u)), non_finite, out);
  return hn::BitCast(df, hn::Or(out, sign));
}

// FloatToHalf: the fp16 pattern in the low 16 bits of each 32-bit lane.
template <class DF>
HWY_INLINE hn::Vec<hn::RebindToUnsigned<DF>> FloatToHalfBits(DF df, hn::Vec<DF> f) {
  const hn::RebindToUnsigned<DF> du;
  const auto u = hn::BitCast(du, f);
  const auto sign = hn::And(hn::ShiftRight<16>(u), U32(df, 0x8000u));
  const auto a = hn::And(u, U32(df, 0x7fffffffu));
  // Subnormal or zero results: the FPU rounds after adding 0.5.
  const float half = BitsFloat(((127u - 15u) + (23u - 10u) + 1u) << 23);
  const auto subnormal = hn::Sub(hn::BitCast(du, hn::Add(hn::BitCast(df, a), hn::Set(df, half))),
                                 U32(df, FloatBits(half)));
  // Normal results: rebias, add 0x0fff plus the lowest kept bit, shift.
  const auto lsb = hn::And(hn::ShiftRight<13>(a), U32(df, 1u));
  const auto normal =
      hn::ShiftRight<13>(hn::Add(hn::Add(a, U32(df, ((15u - 127u) << 23) + 0x0fffu)), lsb));
  const auto nan = hn::Or(U32(df, 0x7e00u), hn::And(hn::ShiftRight<13>(a), U32(df, 0x03ffu)));
  auto out = hn::IfThenElse(GreaterBits(df, U32(df, 0x38800000u), a), subnormal, normal);
  out = hn::IfThenElse(GreaterBits(df, a, U32(df, 0x477fffffu)), U32(df, 0x7c00u), out);
  out = hn::IfThenElse(GreaterBits(df, a, U32(df, 0x7f800000u)), nan, out);
  return hn::Or(out, sign);
}

// FloatToBf16 with the result in the upper 16 bits of each 32-bit lane (the
// lower 16 are garbage): add 0x7fff plus the lowest kept bit (ties to even);
// NaNs get the quiet bit instead, so the add cannot turn them into Inf.
template <class DF>
HWY_INLINE hn::Vec<hn::RebindToUnsigned<DF>> FloatToBf16High(DF df, hn::Vec<DF> f) {
  const hn::RebindToUnsigned<DF> du;
  const auto u = hn::BitCast(du, f);
  const auto lsb = hn::And(hn::ShiftRight<16>(u), U32(df, 1u));
  const auto rounded = hn::Add(hn::Add(u, U32(df, 0x7fffu)), lsb);
  const auto nan = hn::Or(u, U32(df, 0x00400000u));
  const auto is_nan = GreaterBits(df, hn::And(u, U32(df, 0x7fffffffu)), U32(df, 0x7f800000u));
  return hn::IfThenElse(is_nan, nan, rounded);
}

// Fp8E4m3ToFloat on codes held in 32-bit lanes.
template <class DF, class VU>
HWY_INLINE hn::Vec<DF> E4m3ToFloat(DF df, VU x) {
  const hn::RebindToUnsigned<DF> du;
  const auto sign = hn::ShiftLeft<24>(hn::And(x, U32(df, 0x80u)));
  const auto em = hn::And(x, U32(df, 0x7fu));
  const auto shifted = hn::ShiftLeft<20>(em);
  const auto normal = hn::Add(shifted, U32(df, (127u - 7u) << 23));
  // Subnormal: exactly (2^-6 + m * 2^-9) - 2^-6.
  const auto magic = hn::Set(df, BitsFloat((127u - 6u) << 23));
  const auto subnormal = hn::BitCast(
      du, hn::Sub(hn::BitCast(df, hn::Add(shifted, U32(df, (127u - 6u) << 23))), magic));
  auto out = hn::IfThenElse(GreaterBits(df, U32(df, 8u), em), subnormal, normal);
  out = hn::IfThenElse(hn::Eq(em, U32(df, 0x7fu)), U32(df, 0x7fc00000u), out);
  return hn::BitCast(df, hn::Or(out, sign));
}

// FloatToFp8<T>: the code in the low byte of each 32-bit lane.
template <typename T, class DF>
HWY_INLINE hn::Vec<hn::RebindToUnsigned<DF>> FloatToFp8Codes(DF df, hn::Vec<DF> f) {
  using F = Fp8Format<T>;
  constexpr int kShift = 23 - static_cast<int>(F::kMantBits);
  const hn::RebindToUnsigned<DF> du;
  const auto u = hn::BitCast(du, f);
  const auto sign = hn::And(hn::ShiftRight<24>(u), U32(df, 0x80u));
  const auto a = hn::And(u, U32(df, 0x7fffffffu));
  // Normal results: rebias, add half an ulp minus one plus the lowest kept
  // bit (ties to even), shift; unsigned wrap-around as in the core.
  const auto lsb = hn::And(hn::ShiftRight<kShift>(a), U32(df, 1u));
  const uint32_t bias = ((1u << (kShift - 1)) - 1u) - ((127u - F::kBias) << 23);
  const auto normal = hn::ShiftRight<kShift>(hn::Add(hn::Add(a, U32(df, bias)), lsb));
  // Subnormal or zero results: the FPU rounds after adding the magic value.
  const float magic = BitsFloat((127u + 1u - F::kBias + kShift) << 23);
  const auto subnormal = hn::Sub(hn::BitCast(du, hn::Add(hn::BitCast(df, a), hn::Set(df, magic))),
                                 U32(df, FloatBits(magic)));
  auto nan = U32(df, 0x7fu);
  if constexpr (F::kMantBits == 2) {
    nan = hn::Or(U32(df, 0x7eu), hn::And(hn::ShiftRight<21>(a), U32(df, 1u)));
  }
  auto out =
      hn::IfThenElse(GreaterBits(df, U32(df, (128u - F::kBias) << 23), a), subnormal, normal);
  out = hn::IfThenElse(GreaterBits(df, a, U32(df, F::kMaxFloatBits)), U32(df, F::kMaxCode), out);
  out = hn::IfThenElse(GreaterBits(df, a, U32(df, 0x7f800000u)), nan, out);
  return hn::Or(out, sign);
}

// fp16: the accumulators are fp32 lanes; a stored vector is the same number
// of 16-bit lanes (half as many bytes).
struct HalfLanes {
  using D = hn::ScalableTag<float>;
  using V = hn::Vec<D>;
#if BATON_HWY_NATIVE_F16
  using Stored = hwy::float16_t;
#else
  using Stored = uint16_t;
#endif
  using DS = hn::Rebind<Stored, D>;
  static constexpr int kParts = 1;
  static HWY_INLINE V Load(D d, const half_t* p) {
    const DS ds;
#if BATON_HWY_NATIVE_F16
    return hn::PromoteTo(d, hn::LoadU(ds, reinterpret_cast<const Stored*>(p)));
#else
    const hn::RebindToUnsigned<D> du;
    return HalfBitsToFloat(d, hn::PromoteTo(du, hn::LoadU(ds, reinterpret_cast<const Stored*>(p))));
#endif
  }
  static HWY_INLINE hn::Vec<DS> Pack(D d, V v) {
    const DS ds;
#if BATON_HWY_NATIVE_F16
    (void)d;
    return hn::DemoteTo(ds, v);
#else
    const hn::RebindToSigned<D> di;
    return hn::DemoteTo(ds, hn::BitCast(di, FloatToHalfBits(d, v)));
#endif
  }
};

// bf16 without any lane shuffle: a whole vector of 16-bit elements is read
// as 32-bit words; the even elements (low halves) shifted up and the odd
// ones (high halves) masked are each exact fp32 values, two accumulators
// per stored vector (kParts 2). Element order within a vector does not
// matter to elementwise arithmetic, and Pack puts every result back in the
// half it came from.
struct Bf16Lanes {
  using D = hn::ScalableTag<float>;
  using V = hn::Vec<D>;
  using Stored = uint16_t;
  using DS = hn::Repartition<uint16_t, D>;
  static constexpr int kParts = 2;
  // One load for both accumulators (two would cost Zen 4, which loads one
  // 64-byte vector per cycle, a fifth of its bf16 max/min throughput).
  static HWY_INLINE void LoadPair(D d, const bfloat16_t* p, V& even, V& odd) {
    const hn::RebindToUnsigned<D> du;
    const auto raw = hn::BitCast(du, hn::LoadU(DS(), reinterpret_cast<const uint16_t*>(p)));
    even = hn::BitCast(d, hn::ShiftLeft<16>(raw));
    odd = hn::BitCast(d, hn::And(raw, U32(d, 0xffff0000u)));
  }
  static HWY_INLINE hn::Vec<DS> Pack(D d, V even, V odd) {
    return hn::BitCast(DS(), hn::Or(hn::ShiftRight<16>(FloatToBf16High(d, even)),
                                    hn::And(FloatToBf16High(d, odd), U32(d, 0xffff0000u))));
  }
};

// fp8: one byte per fp32 accumulator lane.
template <typename T>
struct Fp8Lanes {
  using D = hn::ScalableTag<float>;
  using V = hn::Vec<D>;
  using Stored = uint8_t;
  using DS = hn::Rebind<uint8_t, D>;
  static constexpr int kParts = 1;
  static HWY_INLINE V Load(D d, const T* p) {
    const auto bytes = hn::LoadU(DS(), reinterpret_cast<const uint8_t*>(p));
    if constexpr (std::is_same_v<T, fp8_e4m3_t>) {
      return E4m3ToFloat(d, hn::PromoteTo(hn::RebindToUnsigned<D>(), bytes));
    } else {
      // E5M2 is the upper byte of an fp16.
#if BATON_HWY_NATIVE_F16
      const hn::Rebind<uint16_t, D> du16;
      const hn::Rebind<hwy::float16_t, D> df16;
      return hn::PromoteTo(d, hn::BitCast(df16, hn::ShiftLeft<8>(hn::PromoteTo(du16, bytes))));
#else
      return HalfBitsToFloat(d, hn::ShiftLeft<8>(hn::PromoteTo(hn::RebindToUnsigned<D>(), bytes)));
#endif
    }
  }
  static HWY_INLINE hn::Vec<DS> Pack(D d, V v) {
    const auto codes = FloatToFp8Codes<T>(d, v);
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
    // VPMOVDB: one instruction, where Highway 1.0.3's U8FromU32 and
    // DemoteTo take two to four (docs/design.md has the difference).
    return hn::Vec<DS>{_mm512_cvtepi32_epi8(codes.raw)};
#else
    return hn::U8FromU32(codes);  // codes are 0..255
#endif
  }
};

#endif  // BATON_KERNELS_CPU_HWY_CONVERT_INL_H_ toggle
