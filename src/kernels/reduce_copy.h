/*
 * Portable reduce-copy core shared by the CPU path (cpu_reduce.cc) and the
 * CUDA kernels. Everything here is header-only and BATON_HD, so the exact same
 * element arithmetic (accumulation type, operand order, rounding) runs on the
 * host and on the device: a collective gives bit-identical results (NaN
 * payloads aside) whichever side performs a step. This holds because no
 * expression mixes a multiply with an add (nothing for nvcc to fuse into an
 * FMA) and float division is IEEE-exact in both compilers' defaults; builds
 * with fast-math (-use_fast_math, -ffast-math) give that up.
 *
 * Semantics of one element i, for sources s0..s(n-1) and destinations d0..:
 *   acc = load(s0[i]); acc = op(acc, load(s1[i])); ...   (left to right)
 *   if (post_divisor > 1) acc = acc / post_divisor;
 *   d0[i] = d1[i] = store(acc);
 * where load/store convert to/from the accumulation type (float for fp16,
 * bf16 and the two fp8 formats, the type itself otherwise) and store rounds
 * to nearest even (fp8: saturating to the largest finite value, as NCCL's
 * conversions do; see FloatToFp8).
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <type_traits>

#include <baton.h>

#ifdef __CUDACC__
#define BATON_HD __host__ __device__
#define BATON_HD_INLINE __host__ __device__ __forceinline__
#else
#define BATON_HD
#define BATON_HD_INLINE inline __attribute__((always_inline))
#endif

namespace baton {

// IEEE 754 binary16 stored as raw bits. A plain struct (not __half or
// _Float16) so the core compiles identically with g++ and nvcc and the byte
// layout is the wire format.
struct half_t {
  uint16_t bits;
};

// bfloat16 (the upper 16 bits of a binary32) stored as raw bits; see half_t.
struct bfloat16_t {
  uint16_t bits;
};

// OCP 8-bit floats (the OFP8 formats of the OCP 8-bit Floating Point
// Specification, CUDA's __nv_fp8_e4m3 / __nv_fp8_e5m2) stored as raw bits.
// E4M3: bias 7, no infinities, S.1111.111 is NaN, largest finite 448.
// E5M2: bias 15, IEEE-like (S.11111.00 is Inf, other S.11111.xx NaN),
// largest finite 57344.
struct fp8_e4m3_t {
  uint8_t bits;
};
struct fp8_e5m2_t {
  uint8_t bits;
};

static_assert(sizeof(half_t) == 2 && sizeof(bfloat16_t) == 2, "16-bit float types must be packed");
static_assert(sizeof(fp8_e4m3_t) == 1 && sizeof(fp8_e5m2_t) == 1, "fp8 types must be one byte");

// ---- Bit casts -----------------------------------------------------------

BATON_HD_INLINE uint32_t FloatBits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  memcpy(&u, &f, sizeof(u));  // The well-defined way to type-pun; compiles to a move.
  return u;
#endif
}

BATON_HD_INLINE float BitsFloat(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
#endif
}

// ---- fp16 / bf16 conversions -------------------------------------------------
//
// Written without data-dependent control flow: every case is computed and the
// answer picked with bit masks. A conditional float operation would stop GCC
// from vectorizing the loop (under the default -ftrapping-math it may not be
// speculated), and on a GPU branches would diverge within a warp. They rely on
// float addition rounding to nearest even, the default on every target. No
// step feeds a float subnormal to the FPU where it matters, so the results
// stay right under flush-to-zero / denormals-are-zero modes (set by
// -ffast-math builds or host frameworks, and by nvcc -ftz=true).

// All ones when cond holds, else zero: a branch-free select.
BATON_HD_INLINE uint32_t MaskIf(bool cond) {
  return 0u - static_cast<uint32_t>(cond);
}

// Exact: every binary16 value is representable in binary32. NaNs keep their
// payload and come out quiet, as x86 F16C (and GCC's _Float16) does.
BATON_HD_INLINE float HalfToFloat(half_t h) {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  const uint32_t exp_mant = static_cast<uint32_t>(h.bits & 0x7fffu) << 13;
  const uint32_t exp = exp_mant & 0x0f800000u;
  // Normal numbers: rebias the exponent from 15 to 127.
  const uint32_t normal = exp_mant + ((127u - 15u) << 23);
  // Inf/NaN: exponent all ones. A NaN (nonzero mantissa) also gets the quiet
  // bit, so a signalling NaN does not stay signalling; Inf is left alone.
  const uint32_t quiet = static_cast<uint32_t>((exp_mant & 0x007fe000u) != 0) << 22;
  const uint32_t non_finite = exp_mant | 0x7f800000u | quiet;
  // Zero/subnormal: mantissa * 2^-24, computed exactly as (2^-14 + m*2^-24) - 2^-14.
  const float magic = BitsFloat(113u << 23);  // 2^-14
  const uint32_t subnormal = FloatBits(BitsFloat(exp_mant + (113u << 23)) - magic);
  const uint32_t is_non_finite = MaskIf(exp == 0x0f800000u);
  const uint32_t is_subnormal = MaskIf(exp == 0);
  const uint32_t out = (non_finite & is_non_finite) | (subnormal & is_subnormal) |
                       (normal & ~(is_non_finite | is_subnormal));
  return BitsFloat(out | sign);
}

// Round to nearest, ties to even. Overflow (|f| >= 65520) gives Inf, values
// up to half the smallest subnormal give signed zero, NaNs stay NaN (quiet,
// top payload bits kept).
BATON_HD_INLINE half_t FloatToHalf(float f) {
  const uint32_t u = FloatBits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7fffffffu;
  // Results that are subnormal or zero in fp16 (|f| < 2^-14): adding 0.5 moves
  // the 10 mantissa bits to the bottom of the float, and the FPU's own
  // round-to-nearest-even does the rounding.
  const float denorm_magic = BitsFloat(((127u - 15u) + (23u - 10u) + 1u) << 23);  // 0.5
  const uint32_t subnormal = FloatBits(BitsFloat(a) + denorm_magic) - FloatBits(denorm_magic);
  // Normal results: rebias, then add 0x0fff plus the lowest kept bit so that a
  // tie rounds up only when that bit is odd. A carry out of the mantissa bumps
  // the exponent, which is exactly right (and yields Inf from 65520 up).
  const uint32_t normal = (a + ((15u - 127u) << 23) + 0x0fffu + ((a >> 13) & 1u)) >> 13;
  // NaN: keep the top payload bits and set the quiet bit so it stays a NaN.
  const uint32_t nan = 0x7e00u | ((a >> 13) & 0x03ffu);
  const uint32_t is_nan = MaskIf(a > 0x7f800000u);
  // >= 2^16 or Inf: past any rounding to 65504.
  const uint32_t is_inf = MaskIf(a >= 0x47800000u) & ~is_nan;
  const uint32_t is_subnormal = MaskIf(a < 0x38800000u);  // < 2^-14
  const uint32_t is_normal = ~(is_nan | is_inf | is_subnormal);
  const uint32_t out =
      (nan & is_nan) | (0x7c00u & is_inf) | (subnormal & is_subnormal) | (normal & is_normal);
  return half_t{static_cast<uint16_t>(out | sign)};
}

// Exact: bf16 is a truncated binary32.
BATON_HD_INLINE float Bf16ToFloat(bfloat16_t b) {
  return BitsFloat(static_cast<uint32_t>(b.bits) << 16);
}

// Round to nearest, ties to even. The carry of the rounding add turns values
// past the largest bf16 into Inf and subnormals into the next binade, as
// required; NaNs are quieted instead so the add cannot turn them into Inf.
BATON_HD_INLINE bfloat16_t FloatToBf16(float f) {
  const uint32_t u = FloatBits(f);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t nan = (u >> 16) | 0x0040u;
  const bool is_nan = (u & 0x7fffffffu) > 0x7f800000u;
  return bfloat16_t{static_cast<uint16_t>(is_nan ? nan : rounded)};
}

// ---- fp8 conversions ----------------------------------------------------------
//
// Branch-free like the fp16 ones (same reasons: vectorizable loops, no warp
// divergence, right under flush-to-zero). The Highway back end
// (cpu_hwy_convert-inl.h) translates these steps lane for lane.

// The two formats' parameters: mantissa bits, exponent bias, the code of the
// largest finite magnitude and its value's float bits.
template <typename T>
struct Fp8Format;
template <>
struct Fp8Format<fp8_e4m3_t> {
  static constexpr uint32_t kMantBits = 3;
  static constexpr uint32_t kBias = 7;
  static constexpr uint32_t kMaxCode = 0x7e;              // 448
  static constexpr uint32_t kMaxFloatBits = 0x43e00000u;  // 448.0f
};
template <>
struct Fp8Format<fp8_e5m2_t> {
  static constexpr uint32_t kMantBits = 2;
  static constexpr uint32_t kBias = 15;
  static constexpr uint32_t kMaxCode = 0x7b;              // 57344
  static constexpr uint32_t kMaxFloatBits = 0x47600000u;  // 57344.0f
};

// Exact: every E4M3 value is a float. NaN (S.1111.111) becomes the quiet NaN
// 0x7fc00000 with the sign.
BATON_HD_INLINE float Fp8E4m3ToFloat(fp8_e4m3_t v) {
  const uint32_t sign = static_cast<uint32_t>(v.bits & 0x80u) << 24;
  const uint32_t em = v.bits & 0x7fu;  // exponent and mantissa
  // Normal: rebias the exponent from 7 to 127.
  const uint32_t normal = (em << 20) + ((127u - 7u) << 23);
  // Subnormal (exponent 0): m * 2^-9, exactly (2^-6 + m * 2^-9) - 2^-6; all
  // normal floats, so flush-to-zero modes cannot touch it.
  const float magic = BitsFloat((127u - 6u) << 23);  // 2^-6
  const uint32_t subnormal = FloatBits(BitsFloat((em << 20) + ((127u - 6u) << 23)) - magic);
  const uint32_t is_nan = MaskIf(em == 0x7fu);
  const uint32_t is_subnormal = MaskIf(em < 0x08u);
  const uint32_t out =
      (0x7fc00000u & is_nan) | (subnormal & is_subnormal) | (normal & ~(is_nan | is_subnormal));
  return BitsFloat(out | sign);
}

// Exact: E5M2 is the upper byte of an fp16 (NaNs come out quiet, as there).
BATON_HD_INLINE float Fp8E5m2ToFloat(fp8_e5m2_t v) {
  return HalfToFloat(half_t{static_cast<uint16_t>(static_cast<uint16_t>(v.bits) << 8)});
}

// Round to nearest, ties to even, saturating: every finite value beyond the
// largest finite fp8 and every infinity become the largest finite value with
// the sign (CUDA's __NV_SATFINITE, which NCCL's fp8 reductions use through
// the __nv_fp8_e4m3 / __nv_fp8_e5m2 constructors). Values up to half the
// smallest subnormal give signed zero. NaNs stay NaN: E4M3 S.1111.111, E5M2
// S.11111.1x (quiet, keeping the float's next payload bit), both as CUDA's
// __nv_cvt_float_to_fp8 writes them.
template <typename T>
BATON_HD_INLINE T FloatToFp8(float f) {
  using F = Fp8Format<T>;
  constexpr uint32_t kShift = 23u - F::kMantBits;
  const uint32_t u = FloatBits(f);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t a = u & 0x7fffffffu;
  // Normal results: rebias, then add half an ulp minus one plus the lowest
  // kept bit (ties to even); a carry into the exponent is exactly right.
  const uint32_t normal =
      (a - ((127u - F::kBias) << 23) + ((1u << (kShift - 1)) - 1u) + ((a >> kShift) & 1u)) >>
      kShift;
  // Subnormal or zero results (|f| < 2^(1 - bias)): adding 2^(1 - bias + 23 -
  // mantissa bits), whose float ulp is the fp8 subnormal step, lets the FPU
  // round to nearest even; the difference of the bits is the fp8 code (2^M
  // is the smallest normal, also right). A float subnormal flushed to zero
  // gives 0, its right answer anyway.
  const float denorm_magic = BitsFloat((127u + 1u - F::kBias + kShift) << 23);
  const uint32_t subnormal = FloatBits(BitsFloat(a) + denorm_magic) - FloatBits(denorm_magic);
  uint32_t nan = 0x7fu;  // E4M3's only NaN
  if constexpr (F::kMantBits == 2) nan = 0x7eu | ((a >> 21) & 1u);
  const uint32_t is_nan = MaskIf(a > 0x7f800000u);
  // Past the largest finite value, infinities included: saturate. Rounding
  // could only ever reach the largest value or beyond, so no tie is lost.
  const uint32_t is_sat = MaskIf(a > F::kMaxFloatBits) & ~is_nan;
  const uint32_t is_subnormal = MaskIf(a < ((128u - F::kBias) << 23));
  const uint32_t is_normal = ~(is_nan | is_sat | is_subnormal);
  const uint32_t out =
      (nan & is_nan) | (F::kMaxCode & is_sat) | (subnormal & is_subnormal) | (normal & is_normal);
  return T{static_cast<uint8_t>(out | sign)};
}

// ---- Accumulation type and load/store -------------------------------------

// The type a reduction accumulates in: float for the 16- and 8-bit floats (so
// a multi-source reduction rounds once, at the end), the type itself
// otherwise.
template <typename T>
struct AccumType {
  using type = T;
};
template <>
struct AccumType<half_t> {
  using type = float;
};
template <>
struct AccumType<bfloat16_t> {
  using type = float;
};
template <>
struct AccumType<fp8_e4m3_t> {
  using type = float;
};
template <>
struct AccumType<fp8_e5m2_t> {
  using type = float;
};
template <typename T>
using Accum = typename AccumType<T>::type;

template <typename T>
BATON_HD_INLINE Accum<T> LoadAcc(T v) {
  if constexpr (std::is_same_v<T, half_t>) {
    return HalfToFloat(v);
  } else if constexpr (std::is_same_v<T, bfloat16_t>) {
    return Bf16ToFloat(v);
  } else if constexpr (std::is_same_v<T, fp8_e4m3_t>) {
    return Fp8E4m3ToFloat(v);
  } else if constexpr (std::is_same_v<T, fp8_e5m2_t>) {
    return Fp8E5m2ToFloat(v);
  } else {
    return v;
  }
}

template <typename T>
BATON_HD_INLINE T StoreAcc(Accum<T> v) {
  if constexpr (std::is_same_v<T, half_t>) {
    return FloatToHalf(v);
  } else if constexpr (std::is_same_v<T, bfloat16_t>) {
    return FloatToBf16(v);
  } else if constexpr (std::is_same_v<T, fp8_e4m3_t> || std::is_same_v<T, fp8_e5m2_t>) {
    return FloatToFp8<T>(v);
  } else {
    return v;
  }
}

// ---- Reduction operators -------------------------------------------------
//
// Each functor combines two accumulator values; the left operand is the
// running result, the right the next source. All are deterministic and
// identical on host and device.

// Integer arithmetic is done in the unsigned type (at least unsigned int, so
// that uint8 * uint8 cannot overflow a promoted int) so that signed overflow
// wraps like two's complement instead of being undefined behaviour.
template <typename T>
using WrapType = std::common_type_t<std::make_unsigned_t<T>, unsigned int>;

// a + b; integers wrap modulo 2^bits.
template <typename T>
struct FuncSum {
  using Acc = Accum<T>;
  BATON_HD_INLINE Acc operator()(Acc a, Acc b) const {
    if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(static_cast<WrapType<T>>(a) + static_cast<WrapType<T>>(b));
    } else {
      return a + b;
    }
  }
};

// a * b; integers wrap modulo 2^bits.
template <typename T>
struct FuncProd {
  using Acc = Accum<T>;
  BATON_HD_INLINE Acc operator()(Acc a, Acc b) const {
    if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(static_cast<WrapType<T>>(a) * static_cast<WrapType<T>>(b));
    } else {
      return a * b;
    }
  }
};

// Floating max/min follow C fmax/fmin (as NCCL does): a NaN operand is
// ignored unless both are NaN. That keeps one rank's NaN from being "lost"
// only partially: the result never depends on which rank held the NaN.
// Where fmax leaves the choice open (+0 vs -0) we return the left operand,
// which makes the result a pure function of the operand order. Written as
// comparisons (no libm) so host and device agree and loops vectorize.
template <typename T>
struct FuncMax {
  using Acc = Accum<T>;
  BATON_HD_INLINE Acc operator()(Acc a, Acc b) const {
    if constexpr (std::is_integral_v<T>) {
      return b > a ? b : a;
    } else {
      // Take b only when it is strictly greater, or when a is NaN.
      return (b > a || a != a) ? b : a;
    }
  }
};

// See FuncMax: fmin semantics, left operand on ties.
template <typename T>
struct FuncMin {
  using Acc = Accum<T>;
  BATON_HD_INLINE Acc operator()(Acc a, Acc b) const {
    if constexpr (std::is_integral_v<T>) {
      return b < a ? b : a;
    } else {
      return (b < a || a != a) ? b : a;
    }
  }
};

// Divides the reduced value by a rank count (the last step of batonAvg).
// Integers: C division (truncation toward zero) of the wrapped sum, done in 64
// bits so the divisor is never converted to a narrower or unsigned type of the
// dividend. Floats: division in the accumulation type.
template <typename T>
BATON_HD_INLINE Accum<T> PostDivide(Accum<T> v, uint32_t divisor) {
  if constexpr (std::is_integral_v<T>) {
    if constexpr (std::is_signed_v<T>) {
      return static_cast<T>(static_cast<int64_t>(v) / static_cast<int64_t>(divisor));
    } else {
      return static_cast<T>(static_cast<uint64_t>(v) / static_cast<uint64_t>(divisor));
    }
  } else {
    return v / static_cast<Accum<T>>(divisor);
  }
}

// ---- Element loop ----------------------------------------------------------

// Reduces nsrcs (1..8) sources into ndsts (1..2) destinations for the
// indices begin, begin + stride, ... < end. A CUDA kernel calls it as a
// grid-stride loop (begin = blockIdx.x * blockDim.x + threadIdx.x, stride =
// gridDim.x * blockDim.x); the host calls it with stride 1.
//
// A destination may be the same buffer as a source (in place): each element
// is read from every source before it is written. Partially overlapping
// buffers are not supported.
//
// nsrcs == 1 without a divisor is a bit-exact copy (no round trip through
// float, so even signalling NaN payloads survive), matching the CPU memcpy
// path. When a reduction meets NaNs the result is a NaN, but which payload it
// carries is unspecified (compilers may commute the operands of a float add).
template <typename T, typename Op>
BATON_HD void ReduceCopyRange(const T* const* srcs, int nsrcs, T* const* dsts, int ndsts,
                              size_t begin, size_t end, size_t stride, uint32_t post_divisor) {
  if (nsrcs == 1 && post_divisor <= 1) {
    const T* src = srcs[0];
    for (size_t i = begin; i < end; i += stride) {
      const T v = src[i];
      for (int d = 0; d < ndsts; ++d) dsts[d][i] = v;
    }
    return;
  }
  const Op op;
  for (size_t i = begin; i < end; i += stride) {
    Accum<T> acc = LoadAcc<T>(srcs[0][i]);
    for (int s = 1; s < nsrcs; ++s) acc = op(acc, LoadAcc<T>(srcs[s][i]));
    if (post_divisor > 1) acc = PostDivide<T>(acc, post_divisor);
    const T out = StoreAcc<T>(acc);
    for (int d = 0; d < ndsts; ++d) dsts[d][i] = out;
  }
}

// The pre-multiplication of batonRedOpCreatePreMulSum for the indices
// begin, begin + stride, ... < end: dst[i] = src[i] * scalar, multiplied in
// the accumulation type and stored (rounded once) in T, as NCCL's PreOp
// stores its product in the element type before the sum; integers wrap.
// dst may be src.
template <typename T>
BATON_HD void ScaleCopyRange(const T* src, T* dst, size_t begin, size_t end, size_t stride,
                             T scalar) {
  const FuncProd<T> mul;
  const Accum<T> s = LoadAcc<T>(scalar);
  for (size_t i = begin; i < end; i += stride) dst[i] = StoreAcc<T>(mul(LoadAcc<T>(src[i]), s));
}

// A PreMulSum reduction step with this rank's own input as one operand:
// dst[i] = own[i] * scalar + other[i] (own_first) or other[i] + own[i] *
// scalar, for the indices begin, begin + stride, ... < end. The product
// stays in the accumulation type and the sum rounds once into T, so fp16,
// bf16 and fp8 round once per step instead of once for the product and
// again for the sum; for the other types (accumulated in T) it is exactly
// ScaleCopyRange followed by a FuncSum step. Multiply and add are separate
// expressions (no FMA contraction: see the top of this file). dst may be
// own or other.
template <typename T>
BATON_HD void ScaleReduceRange(const T* own, const T* other, T* dst, size_t begin, size_t end,
                               size_t stride, T scalar, bool own_first) {
  const FuncProd<T> mul;
  const FuncSum<T> add;
  const Accum<T> s = LoadAcc<T>(scalar);
  if (own_first) {
    for (size_t i = begin; i < end; i += stride) {
      const Accum<T> scaled = mul(LoadAcc<T>(own[i]), s);
      dst[i] = StoreAcc<T>(add(scaled, LoadAcc<T>(other[i])));
    }
  } else {
    for (size_t i = begin; i < end; i += stride) {
      const Accum<T> scaled = mul(LoadAcc<T>(own[i]), s);
      dst[i] = StoreAcc<T>(add(LoadAcc<T>(other[i]), scaled));
    }
  }
}

// ---- Host-side dispatch ----------------------------------------------------

// Carries a type through a generic lambda: fn(TypeTag<float>{}).
template <typename T>
struct TypeTag {
  using type = T;
};

// Calls fn(TypeTag<T>{}) with the element type of dt. Returns false (without
// calling fn) for an invalid datatype. Host-only: it picks which template
// instantiation (CPU loop or CUDA kernel) to run.
template <typename Fn>
inline bool DispatchDatatype(batonDataType_t dt, Fn&& fn) {
  switch (dt) {
    case batonInt8:
      fn(TypeTag<int8_t>{});
      return true;
    case batonUint8:
      fn(TypeTag<uint8_t>{});
      return true;
    case batonInt32:
      fn(TypeTag<int32_t>{});
      return true;
    case batonUint32:
      fn(TypeTag<uint32_t>{});
      return true;
    case batonInt64:
      fn(TypeTag<int64_t>{});
      return true;
    case batonUint64:
      fn(TypeTag<uint64_t>{});
      return true;
    case batonFloat16:
      fn(TypeTag<half_t>{});
      return true;
    case batonFloat32:
      fn(TypeTag<float>{});
      return true;
    case batonFloat64:
      fn(TypeTag<double>{});
      return true;
    case batonBfloat16:
      fn(TypeTag<bfloat16_t>{});
      return true;
    case batonFloat8e4m3:
      fn(TypeTag<fp8_e4m3_t>{});
      return true;
    case batonFloat8e5m2:
      fn(TypeTag<fp8_e5m2_t>{});
      return true;
    default:
      return false;
  }
}

// Calls fn(TypeTag<T>{}, TypeTag<Op>{}) for (dt, op); batonAvg maps to
// FuncSum (the caller applies the divisor). Returns false for invalid input.
template <typename Fn>
inline bool DispatchReduce(batonDataType_t dt, batonRedOp_t op, Fn&& fn) {
  if (static_cast<int>(op) < 0 || op >= batonNumOps) return false;
  return DispatchDatatype(dt, [&](auto type_tag) {
    using T = typename decltype(type_tag)::type;
    switch (op) {
      case batonProd:
        fn(type_tag, TypeTag<FuncProd<T>>{});
        break;
      case batonMax:
        fn(type_tag, TypeTag<FuncMax<T>>{});
        break;
      case batonMin:
        fn(type_tag, TypeTag<FuncMin<T>>{});
        break;
      default:
        fn(type_tag, TypeTag<FuncSum<T>>{});
        break;  // batonSum, batonAvg
    }
  });
}

}  // namespace baton
