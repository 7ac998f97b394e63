/*
 * AVX-512 back end of the CPU reduce-copy (F, BW, DQ; 64-byte vectors). The
 * loop is cpu_simd_impl.h; this file supplies the instruction-set adapter
 * (Simd<T>). Every function after the target pragma may use AVX-512, and is
 * reached only through ReduceCopyAvx512, which cpu_reduce.cc calls only when
 * CpuSupportsAvx512() holds. fp16 converts with VCVTPH2PS / VCVTPS2PH (exact,
 * resp. round to nearest even, NaNs quieted with their top payload bits, as
 * the core does); bf16 rounds with integer arithmetic, never with AVX512_BF16,
 * whose conversion flushes denormals.
 *
 * Kept for perf/kernels_bench only (old_simd.h says why).
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <stdint.h>
#include <string.h>

#include <type_traits>

#include "kernels/reduce_copy.h"
#include "old_simd.h"

#if defined(__x86_64__) || defined(__i386__)
// GCC 12 reports its own _mm512_undefined_*() (a deliberate self-initialized
// value inside the intrinsics) as maybe-uninitialized once inlined here.
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

namespace baton::old_kernels {

bool CpuSupportsAvx512() {
  // __builtin_cpu_supports also checks that the OS saves the ZMM state.
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq");
}

}  // namespace baton::old_kernels

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx2,f16c")

namespace baton {
namespace {

// No vector path unless specialized below.
template <typename T>
struct Simd {
  static constexpr bool kAvailable = false;
};

// Arithmetic on 16 fp32 accumulators, shared by float, fp16, bf16 and fp8.
struct F32x16 {
  using V = __m512;
  static constexpr size_t kLanes = 16;
  static constexpr bool kAvailable = true;
  static constexpr bool kHasProd = true;
  static constexpr bool kHasDiv = true;
  static V Sum(V a, V b) { return _mm512_add_ps(a, b); }
  static V Prod(V a, V b) { return _mm512_mul_ps(a, b); }
  // FuncMax: b when b > a or a is NaN, else a.
  static V Max(V a, V b) {
    const __mmask16 take_b =
        _mm512_cmp_ps_mask(b, a, _CMP_GT_OQ) | _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q);
    return _mm512_mask_blend_ps(take_b, a, b);
  }
  static V Min(V a, V b) {
    const __mmask16 take_b =
        _mm512_cmp_ps_mask(b, a, _CMP_LT_OQ) | _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q);
    return _mm512_mask_blend_ps(take_b, a, b);
  }
  static V Divisor(uint32_t d) { return _mm512_set1_ps(static_cast<float>(d)); }
  static V Div(V a, V d) { return _mm512_div_ps(a, d); }
};

template <>
struct Simd<float> : F32x16 {
  static V Load(const float* p) { return _mm512_loadu_ps(p); }
  static void Store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static void StoreNonTemporal(float* p, V v) { _mm512_stream_ps(p, v); }
};

template <>
struct Simd<half_t> : F32x16 {
  static V Load(const half_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static __m256i Round(V v) { return _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT); }
  static void Store(half_t* p, V v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), Round(v));
  }
  static void StoreNonTemporal(half_t* p, V v) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(p), Round(v));
  }
};

// Two fp32 vectors per step, for types whose load splits one register of
// raw elements into two of accumulators (bf16): every operation applies to
// both halves.
template <typename Base>
struct PairOf {
  struct V {
    typename Base::V even;
    typename Base::V odd;
  };
  static constexpr bool kAvailable = true;
  static constexpr bool kHasProd = true;
  static constexpr bool kHasDiv = true;
  static V Sum(V a, V b) { return {Base::Sum(a.even, b.even), Base::Sum(a.odd, b.odd)}; }
  static V Prod(V a, V b) { return {Base::Prod(a.even, b.even), Base::Prod(a.odd, b.odd)}; }
  static V Max(V a, V b) { return {Base::Max(a.even, b.even), Base::Max(a.odd, b.odd)}; }
  static V Min(V a, V b) { return {Base::Min(a.even, b.even), Base::Min(a.odd, b.odd)}; }
  static V Divisor(uint32_t d) { return {Base::Divisor(d), Base::Divisor(d)}; }
  static V Div(V a, V d) { return {Base::Div(a.even, d.even), Base::Div(a.odd, d.odd)}; }
};

// bf16 without any lane shuffle: 32 elements are loaded as 16 32-bit words;
// the even elements (low halves) shifted up and the odd ones (high halves)
// masked are each exact fp32 values. Element order within the step does not
// matter to elementwise arithmetic, and the store puts every result back in
// the half it came from.
template <>
struct Simd<bfloat16_t> : PairOf<F32x16> {
  static constexpr size_t kLanes = 32;
  static V Load(const bfloat16_t* p) {
    const __m512i raw = _mm512_loadu_si512(p);
    return {_mm512_castsi512_ps(_mm512_slli_epi32(raw, 16)),
            _mm512_castsi512_ps(_mm512_and_si512(raw, _mm512_set1_epi32(int32_t(0xffff0000u))))};
  }
  // FloatToBf16 with the result left in the upper 16 bits of each word: add
  // 0x7fff plus the lowest kept bit (ties to even); NaNs get the quiet bit.
  static __m512i RoundHigh(__m512 v) {
    const __m512i u = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i rounded = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb);
    const __m512i nan = _mm512_or_si512(u, _mm512_set1_epi32(0x00400000));
    const __mmask16 is_nan = _mm512_cmpgt_epi32_mask(
        _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    return _mm512_mask_blend_epi32(is_nan, rounded, nan);
  }
  static __m512i Round(V v) {
    return _mm512_or_si512(
        _mm512_srli_epi32(RoundHigh(v.even), 16),
        _mm512_and_si512(RoundHigh(v.odd), _mm512_set1_epi32(int32_t(0xffff0000u))));
  }
  static void Store(bfloat16_t* p, V v) { _mm512_storeu_si512(p, Round(v)); }
  static void StoreNonTemporal(bfloat16_t* p, V v) {
    _mm512_stream_si512(reinterpret_cast<__m512i*>(p), Round(v));
  }
};

// fp8: 16 elements (16 bytes) per vector of 16 fp32 accumulators, converted
// lane for lane as Fp8E4m3ToFloat / Fp8E5m2ToFloat / FloatToFp8 in
// reduce_copy.h do it, so results match the portable core bit for bit.
template <typename T>
struct Fp8x16 : F32x16 {
  static __m512i Set(uint32_t v) { return _mm512_set1_epi32(static_cast<int32_t>(v)); }
  // FloatToFp8<T>, one code per 32-bit lane, narrowed to 16 bytes.
  static __m128i Round(V v) {
    using F = Fp8Format<T>;
    constexpr uint32_t kShift = 23u - F::kMantBits;
    const __m512i u = _mm512_castps_si512(v);
    const __m512i sign = _mm512_and_si512(_mm512_srli_epi32(u, 24), Set(0x80));
    const __m512i a = _mm512_and_si512(u, Set(0x7fffffffu));
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(a, kShift), Set(1));
    const __m512i normal = _mm512_srli_epi32(
        _mm512_add_epi32(
            _mm512_add_epi32(a, Set(((1u << (kShift - 1)) - 1u) - ((127u - F::kBias) << 23))), lsb),
        kShift);
    const __m512 magic = _mm512_set1_ps(BitsFloat((127u + 1u - F::kBias + kShift) << 23));
    const __m512i subnormal =
        _mm512_sub_epi32(_mm512_castps_si512(_mm512_add_ps(_mm512_castsi512_ps(a), magic)),
                         _mm512_castps_si512(magic));
    __m512i nan = Set(0x7f);
    if constexpr (F::kMantBits == 2)
      nan = _mm512_or_si512(Set(0x7e), _mm512_and_si512(_mm512_srli_epi32(a, 21), Set(1)));
    const __mmask16 is_nan = _mm512_cmpgt_epi32_mask(a, Set(0x7f800000u));
    const __mmask16 is_sat = _mm512_cmpgt_epi32_mask(a, Set(F::kMaxFloatBits));
    const __mmask16 is_subnormal = _mm512_cmpgt_epi32_mask(Set((128u - F::kBias) << 23), a);
    __m512i out = _mm512_mask_blend_epi32(is_subnormal, normal, subnormal);
    out = _mm512_mask_blend_epi32(is_sat, out, Set(F::kMaxCode));
    out = _mm512_mask_blend_epi32(is_nan, out, nan);
    return _mm512_cvtepi32_epi8(_mm512_or_si512(out, sign));
  }
  static void Store(T* p, V v) { _mm_storeu_si128(reinterpret_cast<__m128i*>(p), Round(v)); }
  static void StoreNonTemporal(T* p, V v) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(p), Round(v));
  }
  static __m128i LoadBytes(const T* p) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  }
};

template <>
struct Simd<fp8_e4m3_t> : Fp8x16<fp8_e4m3_t> {
  static V Load(const fp8_e4m3_t* p) {
    const __m512i x = _mm512_cvtepu8_epi32(LoadBytes(p));
    const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(x, Set(0x80)), 24);
    const __m512i em = _mm512_and_si512(x, Set(0x7f));
    const __m512i shifted = _mm512_slli_epi32(em, 20);
    const __m512i normal = _mm512_add_epi32(shifted, Set((127u - 7u) << 23));
    const __m512 magic = _mm512_castsi512_ps(Set((127u - 6u) << 23));
    const __m512i subnormal = _mm512_castps_si512(_mm512_sub_ps(
        _mm512_castsi512_ps(_mm512_add_epi32(shifted, Set((127u - 6u) << 23))), magic));
    __m512i out = _mm512_mask_blend_epi32(_mm512_cmpgt_epi32_mask(Set(8), em), normal, subnormal);
    out = _mm512_mask_blend_epi32(_mm512_cmpeq_epi32_mask(em, Set(0x7f)), out, Set(0x7fc00000u));
    return _mm512_castsi512_ps(_mm512_or_si512(out, sign));
  }
};

// E5M2 is the upper byte of an fp16: widen to 16 bits and let F16C convert.
template <>
struct Simd<fp8_e5m2_t> : Fp8x16<fp8_e5m2_t> {
  static V Load(const fp8_e5m2_t* p) {
    return _mm512_cvtph_ps(_mm256_slli_epi16(_mm256_cvtepu8_epi16(LoadBytes(p)), 8));
  }
};

template <>
struct Simd<double> {
  using V = __m512d;
  static constexpr size_t kLanes = 8;
  static constexpr bool kAvailable = true;
  static constexpr bool kHasProd = true;
  static constexpr bool kHasDiv = true;
  static V Load(const double* p) { return _mm512_loadu_pd(p); }
  static void Store(double* p, V v) { _mm512_storeu_pd(p, v); }
  static void StoreNonTemporal(double* p, V v) { _mm512_stream_pd(p, v); }
  static V Sum(V a, V b) { return _mm512_add_pd(a, b); }
  static V Prod(V a, V b) { return _mm512_mul_pd(a, b); }
  static V Max(V a, V b) {
    const __mmask8 take_b =
        _mm512_cmp_pd_mask(b, a, _CMP_GT_OQ) | _mm512_cmp_pd_mask(a, a, _CMP_UNORD_Q);
    return _mm512_mask_blend_pd(take_b, a, b);
  }
  static V Min(V a, V b) {
    const __mmask8 take_b =
        _mm512_cmp_pd_mask(b, a, _CMP_LT_OQ) | _mm512_cmp_pd_mask(a, a, _CMP_UNORD_Q);
    return _mm512_mask_blend_pd(take_b, a, b);
  }
  static V Divisor(uint32_t d) { return _mm512_set1_pd(static_cast<double>(d)); }
  static V Div(V a, V d) { return _mm512_div_pd(a, d); }
};

// Integer lanes: loads and stores common to every width. Integer arithmetic
// wraps in the vector units exactly as the core's unsigned arithmetic does.
// No integer divide instruction exists, so integer avg stays portable.
template <typename T>
struct IntZmm {
  using V = __m512i;
  static constexpr size_t kLanes = 64 / sizeof(T);
  static constexpr bool kAvailable = true;
  static constexpr bool kHasDiv = false;
  static V Load(const T* p) { return _mm512_loadu_si512(p); }
  static void Store(T* p, V v) { _mm512_storeu_si512(p, v); }
  static void StoreNonTemporal(T* p, V v) { _mm512_stream_si512(reinterpret_cast<__m512i*>(p), v); }
};

template <>
struct Simd<int8_t> : IntZmm<int8_t> {
  static constexpr bool kHasProd = false;  // no 8-bit multiply
  static V Sum(V a, V b) { return _mm512_add_epi8(a, b); }
  static V Max(V a, V b) { return _mm512_max_epi8(a, b); }
  static V Min(V a, V b) { return _mm512_min_epi8(a, b); }
};
template <>
struct Simd<uint8_t> : IntZmm<uint8_t> {
  static constexpr bool kHasProd = false;
  static V Sum(V a, V b) { return _mm512_add_epi8(a, b); }
  static V Max(V a, V b) { return _mm512_max_epu8(a, b); }
  static V Min(V a, V b) { return _mm512_min_epu8(a, b); }
};
template <>
struct Simd<int32_t> : IntZmm<int32_t> {
  static constexpr bool kHasProd = true;
  static V Sum(V a, V b) { return _mm512_add_epi32(a, b); }
  static V Prod(V a, V b) { return _mm512_mullo_epi32(a, b); }
  static V Max(V a, V b) { return _mm512_max_epi32(a, b); }
  static V Min(V a, V b) { return _mm512_min_epi32(a, b); }
};
template <>
struct Simd<uint32_t> : IntZmm<uint32_t> {
  static constexpr bool kHasProd = true;
  static V Sum(V a, V b) { return _mm512_add_epi32(a, b); }
  static V Prod(V a, V b) { return _mm512_mullo_epi32(a, b); }
  static V Max(V a, V b) { return _mm512_max_epu32(a, b); }
  static V Min(V a, V b) { return _mm512_min_epu32(a, b); }
};
template <>
struct Simd<int64_t> : IntZmm<int64_t> {
  static constexpr bool kHasProd = true;  // AVX512DQ VPMULLQ
  static V Sum(V a, V b) { return _mm512_add_epi64(a, b); }
  static V Prod(V a, V b) { return _mm512_mullo_epi64(a, b); }
  static V Max(V a, V b) { return _mm512_max_epi64(a, b); }
  static V Min(V a, V b) { return _mm512_min_epi64(a, b); }
};
template <>
struct Simd<uint64_t> : IntZmm<uint64_t> {
  static constexpr bool kHasProd = true;
  static V Sum(V a, V b) { return _mm512_add_epi64(a, b); }
  static V Prod(V a, V b) { return _mm512_mullo_epi64(a, b); }
  static V Max(V a, V b) { return _mm512_max_epu64(a, b); }
  static V Min(V a, V b) { return _mm512_min_epu64(a, b); }
};

}  // namespace
}  // namespace baton

#include "old_simd_impl.h"

namespace baton::old_kernels {

bool ReduceCopyAvx512(const ReduceCopyArgs& args, const SimdOptions& options) {
  return SimdReduceCopy(args, options);
}

}  // namespace baton::old_kernels

#pragma GCC pop_options

#else  // not x86

namespace baton::old_kernels {
bool CpuSupportsAvx512() {
  return false;
}
bool ReduceCopyAvx512(const ReduceCopyArgs&, const SimdOptions&) {
  return false;
}
}  // namespace baton::old_kernels

#endif
