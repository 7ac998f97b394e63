/*
 * AVX2 + F16C back end of the CPU reduce-copy (32-byte vectors). The loop is
 * cpu_simd_impl.h; this file supplies the instruction-set adapter (Simd<T>).
 * Every function after the target pragma may use AVX2/F16C, and is reached
 * only through ReduceCopyAvx2, which cpu_reduce.cc calls only when
 * CpuSupportsAvx2() holds. FMA is deliberately not enabled: contracting a
 * multiply and an add would change results against the portable core.
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
#include <cpuid.h>
#include <immintrin.h>

namespace baton::old_kernels {

bool CpuSupportsAvx2() {
  // __builtin_cpu_supports also checks that the OS saves the YMM state; F16C
  // from CPUID directly (clang's builtin does not know it).
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
  return __builtin_cpu_supports("avx2") && f16c;
}

}  // namespace baton::old_kernels

#pragma GCC push_options
#pragma GCC target("avx2,f16c")

namespace baton {
namespace {

// No vector path unless specialized below.
template <typename T>
struct Simd {
  static constexpr bool kAvailable = false;
};

// Arithmetic on 8 fp32 accumulators, shared by float, fp16, bf16 and fp8.
struct F32x8 {
  using V = __m256;
  static constexpr size_t kLanes = 8;
  static constexpr bool kAvailable = true;
  static constexpr bool kHasProd = true;
  static constexpr bool kHasDiv = true;
  static V Sum(V a, V b) { return _mm256_add_ps(a, b); }
  static V Prod(V a, V b) { return _mm256_mul_ps(a, b); }
  // FuncMax: b when b > a or a is NaN, else a.
  static V Max(V a, V b) {
    const V take_b =
        _mm256_or_ps(_mm256_cmp_ps(b, a, _CMP_GT_OQ), _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
    return _mm256_blendv_ps(a, b, take_b);
  }
  static V Min(V a, V b) {
    const V take_b =
        _mm256_or_ps(_mm256_cmp_ps(b, a, _CMP_LT_OQ), _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
    return _mm256_blendv_ps(a, b, take_b);
  }
  static V Divisor(uint32_t d) { return _mm256_set1_ps(static_cast<float>(d)); }
  static V Div(V a, V d) { return _mm256_div_ps(a, d); }
};

template <>
struct Simd<float> : F32x8 {
  static V Load(const float* p) { return _mm256_loadu_ps(p); }
  static void Store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static void StoreNonTemporal(float* p, V v) { _mm256_stream_ps(p, v); }
};

template <>
struct Simd<half_t> : F32x8 {
  static V Load(const half_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static __m128i Round(V v) { return _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT); }
  static void Store(half_t* p, V v) { _mm_storeu_si128(reinterpret_cast<__m128i*>(p), Round(v)); }
  static void StoreNonTemporal(half_t* p, V v) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(p), Round(v));
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

// bf16 without any lane shuffle: 16 elements are loaded as 8 32-bit words;
// the even elements (low halves) shifted up and the odd ones (high halves)
// masked are each exact fp32 values. Element order within the step does not
// matter to elementwise arithmetic, and the store puts every result back in
// the half it came from.
template <>
struct Simd<bfloat16_t> : PairOf<F32x8> {
  static constexpr size_t kLanes = 16;
  static V Load(const bfloat16_t* p) {
    const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return {_mm256_castsi256_ps(_mm256_slli_epi32(raw, 16)),
            _mm256_castsi256_ps(_mm256_and_si256(raw, _mm256_set1_epi32(int32_t(0xffff0000u))))};
  }
  // FloatToBf16 with the result left in the upper 16 bits of each word: add
  // 0x7fff plus the lowest kept bit (ties to even); NaNs get the quiet bit.
  static __m256i RoundHigh(__m256 v) {
    const __m256i u = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb);
    const __m256i nan = _mm256_or_si256(u, _mm256_set1_epi32(0x00400000));
    const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                              _mm256_set1_epi32(0x7f800000));
    return _mm256_blendv_epi8(rounded, nan, is_nan);
  }
  static __m256i Round(V v) {
    return _mm256_or_si256(
        _mm256_srli_epi32(RoundHigh(v.even), 16),
        _mm256_and_si256(RoundHigh(v.odd), _mm256_set1_epi32(int32_t(0xffff0000u))));
  }
  static void Store(bfloat16_t* p, V v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), Round(v));
  }
  static void StoreNonTemporal(bfloat16_t* p, V v) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(p), Round(v));
  }
};

// fp8: 8 elements (8 bytes) per vector of 8 fp32 accumulators, converted
// lane for lane as Fp8E4m3ToFloat / Fp8E5m2ToFloat / FloatToFp8 in
// reduce_copy.h do it, so results match the portable core bit for bit.
template <typename T>
struct Fp8x8 : F32x8 {
  static __m256i Set(uint32_t v) { return _mm256_set1_epi32(static_cast<int32_t>(v)); }
  // FloatToFp8<T>: the codes in the low byte of each 32-bit lane.
  static __m256i Codes(V v) {
    using F = Fp8Format<T>;
    constexpr uint32_t kShift = 23u - F::kMantBits;
    const __m256i u = _mm256_castps_si256(v);
    const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(u, 24), Set(0x80));
    const __m256i a = _mm256_and_si256(u, Set(0x7fffffffu));
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(a, kShift), Set(1));
    const __m256i normal = _mm256_srli_epi32(
        _mm256_add_epi32(
            _mm256_add_epi32(a, Set(((1u << (kShift - 1)) - 1u) - ((127u - F::kBias) << 23))), lsb),
        kShift);
    const __m256 magic = _mm256_set1_ps(BitsFloat((127u + 1u - F::kBias + kShift) << 23));
    const __m256i subnormal =
        _mm256_sub_epi32(_mm256_castps_si256(_mm256_add_ps(_mm256_castsi256_ps(a), magic)),
                         _mm256_castps_si256(magic));
    __m256i nan = Set(0x7f);
    if constexpr (F::kMantBits == 2)
      nan = _mm256_or_si256(Set(0x7e), _mm256_and_si256(_mm256_srli_epi32(a, 21), Set(1)));
    const __m256i is_nan = _mm256_cmpgt_epi32(a, Set(0x7f800000u));
    const __m256i is_sat = _mm256_cmpgt_epi32(a, Set(F::kMaxFloatBits));
    const __m256i is_subnormal = _mm256_cmpgt_epi32(Set((128u - F::kBias) << 23), a);
    __m256i out = _mm256_blendv_epi8(normal, subnormal, is_subnormal);
    out = _mm256_blendv_epi8(out, Set(F::kMaxCode), is_sat);
    out = _mm256_blendv_epi8(out, nan, is_nan);
    return _mm256_or_si256(out, sign);
  }
  // The 8 codes packed into the low 8 bytes.
  static int64_t Round(V v) {
    const __m256i bytes = _mm256_shuffle_epi8(
        Codes(v), _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0,
                                   4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1));
    const __m256i packed =
        _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 1, 1, 1, 1, 1));
    return _mm_cvtsi128_si64(_mm256_castsi256_si128(packed));
  }
  static void Store(T* p, V v) {
    _mm_storel_epi64(reinterpret_cast<__m128i*>(p), _mm_cvtsi64_si128(Round(v)));
  }
  static void StoreNonTemporal(T* p, V v) {
    _mm_stream_si64(reinterpret_cast<long long*>(p), Round(v));
  }
  static __m128i LoadBytes(const T* p) {
    return _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  }
};

template <>
struct Simd<fp8_e4m3_t> : Fp8x8<fp8_e4m3_t> {
  static V Load(const fp8_e4m3_t* p) {
    const __m256i x = _mm256_cvtepu8_epi32(LoadBytes(p));
    const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(x, Set(0x80)), 24);
    const __m256i em = _mm256_and_si256(x, Set(0x7f));
    const __m256i shifted = _mm256_slli_epi32(em, 20);
    const __m256i normal = _mm256_add_epi32(shifted, Set((127u - 7u) << 23));
    const __m256 magic = _mm256_castsi256_ps(Set((127u - 6u) << 23));
    const __m256i subnormal = _mm256_castps_si256(_mm256_sub_ps(
        _mm256_castsi256_ps(_mm256_add_epi32(shifted, Set((127u - 6u) << 23))), magic));
    __m256i out = _mm256_blendv_epi8(normal, subnormal, _mm256_cmpgt_epi32(Set(8), em));
    out = _mm256_blendv_epi8(out, Set(0x7fc00000u), _mm256_cmpeq_epi32(em, Set(0x7f)));
    return _mm256_castsi256_ps(_mm256_or_si256(out, sign));
  }
};

// E5M2 is the upper byte of an fp16: widen to 16 bits and let F16C convert.
template <>
struct Simd<fp8_e5m2_t> : Fp8x8<fp8_e5m2_t> {
  static V Load(const fp8_e5m2_t* p) {
    return _mm256_cvtph_ps(_mm_slli_epi16(_mm_cvtepu8_epi16(LoadBytes(p)), 8));
  }
};

template <>
struct Simd<double> {
  using V = __m256d;
  static constexpr size_t kLanes = 4;
  static constexpr bool kAvailable = true;
  static constexpr bool kHasProd = true;
  static constexpr bool kHasDiv = true;
  static V Load(const double* p) { return _mm256_loadu_pd(p); }
  static void Store(double* p, V v) { _mm256_storeu_pd(p, v); }
  static void StoreNonTemporal(double* p, V v) { _mm256_stream_pd(p, v); }
  static V Sum(V a, V b) { return _mm256_add_pd(a, b); }
  static V Prod(V a, V b) { return _mm256_mul_pd(a, b); }
  static V Max(V a, V b) {
    const V take_b =
        _mm256_or_pd(_mm256_cmp_pd(b, a, _CMP_GT_OQ), _mm256_cmp_pd(a, a, _CMP_UNORD_Q));
    return _mm256_blendv_pd(a, b, take_b);
  }
  static V Min(V a, V b) {
    const V take_b =
        _mm256_or_pd(_mm256_cmp_pd(b, a, _CMP_LT_OQ), _mm256_cmp_pd(a, a, _CMP_UNORD_Q));
    return _mm256_blendv_pd(a, b, take_b);
  }
  static V Divisor(uint32_t d) { return _mm256_set1_pd(static_cast<double>(d)); }
  static V Div(V a, V d) { return _mm256_div_pd(a, d); }
};

// Integer lanes: loads and stores common to every width. Integer arithmetic
// wraps in the vector units exactly as the core's unsigned arithmetic does.
// No integer divide instruction exists, so integer avg stays portable.
template <typename T>
struct IntYmm {
  using V = __m256i;
  static constexpr size_t kLanes = 32 / sizeof(T);
  static constexpr bool kAvailable = true;
  static constexpr bool kHasDiv = false;
  static V Load(const T* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static void Store(T* p, V v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }
  static void StoreNonTemporal(T* p, V v) { _mm256_stream_si256(reinterpret_cast<__m256i*>(p), v); }
};

template <>
struct Simd<int8_t> : IntYmm<int8_t> {
  static constexpr bool kHasProd = false;  // no 8-bit multiply
  static V Sum(V a, V b) { return _mm256_add_epi8(a, b); }
  static V Max(V a, V b) { return _mm256_max_epi8(a, b); }
  static V Min(V a, V b) { return _mm256_min_epi8(a, b); }
};
template <>
struct Simd<uint8_t> : IntYmm<uint8_t> {
  static constexpr bool kHasProd = false;
  static V Sum(V a, V b) { return _mm256_add_epi8(a, b); }
  static V Max(V a, V b) { return _mm256_max_epu8(a, b); }
  static V Min(V a, V b) { return _mm256_min_epu8(a, b); }
};
template <>
struct Simd<int32_t> : IntYmm<int32_t> {
  static constexpr bool kHasProd = true;
  static V Sum(V a, V b) { return _mm256_add_epi32(a, b); }
  static V Prod(V a, V b) { return _mm256_mullo_epi32(a, b); }
  static V Max(V a, V b) { return _mm256_max_epi32(a, b); }
  static V Min(V a, V b) { return _mm256_min_epi32(a, b); }
};
template <>
struct Simd<uint32_t> : IntYmm<uint32_t> {
  static constexpr bool kHasProd = true;
  static V Sum(V a, V b) { return _mm256_add_epi32(a, b); }
  static V Prod(V a, V b) { return _mm256_mullo_epi32(a, b); }
  static V Max(V a, V b) { return _mm256_max_epu32(a, b); }
  static V Min(V a, V b) { return _mm256_min_epu32(a, b); }
};
// 64-bit: AVX2 has no 64-bit multiply (products stay portable) and only a
// signed compare; unsigned order is signed order after flipping the top bit.
template <>
struct Simd<int64_t> : IntYmm<int64_t> {
  static constexpr bool kHasProd = false;
  static V Sum(V a, V b) { return _mm256_add_epi64(a, b); }
  static V Max(V a, V b) { return _mm256_blendv_epi8(a, b, _mm256_cmpgt_epi64(b, a)); }
  static V Min(V a, V b) { return _mm256_blendv_epi8(a, b, _mm256_cmpgt_epi64(a, b)); }
};
template <>
struct Simd<uint64_t> : IntYmm<uint64_t> {
  static constexpr bool kHasProd = false;
  static V Flip(V v) { return _mm256_xor_si256(v, _mm256_set1_epi64x(INT64_MIN)); }
  static V Sum(V a, V b) { return _mm256_add_epi64(a, b); }
  static V Max(V a, V b) { return _mm256_blendv_epi8(a, b, _mm256_cmpgt_epi64(Flip(b), Flip(a))); }
  static V Min(V a, V b) { return _mm256_blendv_epi8(a, b, _mm256_cmpgt_epi64(Flip(a), Flip(b))); }
};

}  // namespace
}  // namespace baton

#include "old_simd_impl.h"

namespace baton::old_kernels {

bool ReduceCopyAvx2(const ReduceCopyArgs& args, const SimdOptions& options) {
  return SimdReduceCopy(args, options);
}

}  // namespace baton::old_kernels

#pragma GCC pop_options

#else  // not x86

namespace baton::old_kernels {
bool CpuSupportsAvx2() {
  return false;
}
bool ReduceCopyAvx2(const ReduceCopyArgs&, const SimdOptions&) {
  return false;
}
}  // namespace baton::old_kernels

#endif
