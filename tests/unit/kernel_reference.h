// The kernels tests' scalar reference, written independently of the core
// (kernels/reduce_copy.h): fp16 through the compiler's binary16, bf16 through a
// nearest-neighbour search in double, fp8 from the formats' definitions
// (common/fp8_reference.h), integers in 64-bit wrapping
// arithmetic, floats in double rounded to the accumulation type after every
// step (exact for + * / because double has more than twice float's
// precision).
//
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <vector>

#include <baton.h>

#include "base/datatype.h"
#include "common/fp8_reference.h"
#include "common/half_reference.h"

namespace baton {

inline uint32_t BitsOf(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
}
inline float FloatOf(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

// ---- Reference conversions ---------------------------------------------------

// fp16 through the compiler's own binary16 (common/half_reference.h: _Float16, Arm's __fp16).
inline float RefHalfToFloat(uint16_t bits) {
  baton_test::Half h;
  memcpy(&h, &bits, sizeof(h));
  return static_cast<float>(h);
}
inline uint16_t RefFloatToHalf(float f) {
  const baton_test::Half h = static_cast<baton_test::Half>(f);
  uint16_t bits;
  memcpy(&bits, &h, sizeof(bits));
  return bits;
}

// bf16 decoded field by field with ldexp rather than by shifting.
inline double RefBf16ToDoubleSlow(uint16_t bits) {
  const int exp = (bits >> 7) & 0xff;
  const int mant = bits & 0x7f;
  double v;
  if (exp == 0xff) {
    v = mant != 0 ? NAN : INFINITY;
  } else if (exp == 0) {
    v = ldexp(mant, -126 - 7);
  } else {
    v = ldexp(128 + mant, exp - 127 - 7);
  }
  return (bits & 0x8000) ? -v : v;
}

// The same, tabulated: the large-count tests decode millions of elements.
inline double RefBf16ToDouble(uint16_t bits) {
  static const std::vector<double> table = [] {
    std::vector<double> t(65536);
    for (uint32_t b = 0; b < 65536; ++b) t[b] = RefBf16ToDoubleSlow(static_cast<uint16_t>(b));
    return t;
  }();
  return table[bits];
}

// bf16 rounding as a search: of the two bf16 values bracketing |f|, take the
// nearer one in exact double arithmetic; on a tie, the one with an even
// mantissa. Past the largest finite value the upper neighbour is 2^128, which
// makes overflow round to Inf exactly as IEEE's unbounded-exponent rule says.
inline uint16_t RefFloatToBf16(float f) {
  const uint32_t u = BitsOf(f);
  const uint16_t sign = (u >> 16) & 0x8000;
  if (isnan(f)) return static_cast<uint16_t>(sign | 0x7fc0 | ((u >> 16) & 0x7f));
  if (isinf(f)) return static_cast<uint16_t>(sign | 0x7f80);
  const double x = fabs(static_cast<double>(f));
  const uint16_t lo = (u >> 16) & 0x7fff;  // largest bf16 magnitude <= |f|
  const uint16_t hi = lo + 1;
  const double vlo = RefBf16ToDouble(lo);
  const double vhi = hi == 0x7f80 ? ldexp(1.0, 128) : RefBf16ToDouble(hi);
  uint16_t mag;
  if (x - vlo < vhi - x) {
    mag = lo;
  } else if (x - vlo > vhi - x) {
    mag = hi;
  } else {
    mag = (lo & 1) ? hi : lo;
  }
  return static_cast<uint16_t>(sign | mag);
}

// ---- Reference reduction -------------------------------------------------------

enum class Kind { kSigned, kUnsigned, kFloat, kDouble, kHalf, kBf16, kE4m3, kE5m2 };

inline Kind KindOf(batonDataType_t dt) {
  switch (dt) {
    case batonInt8:
    case batonInt32:
    case batonInt64:
      return Kind::kSigned;
    case batonUint8:
    case batonUint32:
    case batonUint64:
      return Kind::kUnsigned;
    case batonFloat16:
      return Kind::kHalf;
    case batonBfloat16:
      return Kind::kBf16;
    case batonFloat8e4m3:
      return Kind::kE4m3;
    case batonFloat8e5m2:
      return Kind::kE5m2;
    case batonFloat32:
      return Kind::kFloat;
    default:
      return Kind::kDouble;
  }
}

inline bool IsFloatKind(Kind k) {
  return k != Kind::kSigned && k != Kind::kUnsigned;
}

// Raw element i of a buffer, zero-extended to 64 bits (little endian).
inline uint64_t LoadRaw(const uint8_t* p, size_t size, size_t i) {
  uint64_t v = 0;
  memcpy(&v, p + i * size, size);
  return v;
}
inline void StoreRaw(uint8_t* p, size_t size, size_t i, uint64_t v) {
  memcpy(p + i * size, &v, size);
}

inline int64_t SignExtend(uint64_t v, size_t size) {
  if (size == 8) return static_cast<int64_t>(v);
  const int shift = 64 - static_cast<int>(size) * 8;
  return static_cast<int64_t>(v << shift) >> shift;
}
inline uint64_t TruncateTo(uint64_t v, size_t size) {
  return size == 8 ? v : v & ((uint64_t{1} << (size * 8)) - 1);
}

inline double DecodeFloat(Kind k, uint64_t raw) {
  switch (k) {
    case Kind::kHalf:
      return RefHalfToFloat(static_cast<uint16_t>(raw));
    case Kind::kBf16:
      return RefBf16ToDouble(static_cast<uint16_t>(raw));
    case Kind::kE4m3:
      return baton_test::Fp8Value(static_cast<uint8_t>(raw), baton_test::kE4m3Mant,
                                  baton_test::kE4m3Bias);
    case Kind::kE5m2:
      return baton_test::Fp8Value(static_cast<uint8_t>(raw), baton_test::kE5m2Mant,
                                  baton_test::kE5m2Bias);
    case Kind::kFloat:
      return FloatOf(static_cast<uint32_t>(raw));
    default: {
      double d;
      memcpy(&d, &raw, sizeof(d));
      return d;
    }
  }
}

inline uint64_t EncodeFloat(Kind k, double v) {
  switch (k) {
    case Kind::kHalf:
      return RefFloatToHalf(static_cast<float>(v));
    case Kind::kBf16:
      return RefFloatToBf16(static_cast<float>(v));
    // From the float the core would hold (rounding float to fp8 directly).
    case Kind::kE4m3:
      return baton_test::NearestFp8(static_cast<float>(v), baton_test::kE4m3Mant,
                                    baton_test::kE4m3Bias);
    case Kind::kE5m2:
      return baton_test::NearestFp8(static_cast<float>(v), baton_test::kE5m2Mant,
                                    baton_test::kE5m2Bias);
    case Kind::kFloat:
      return BitsOf(static_cast<float>(v));
    default: {
      uint64_t raw;
      memcpy(&raw, &v, sizeof(raw));
      return raw;
    }
  }
}

// Rounds an exact-in-double intermediate to the accumulation type.
inline double RoundAcc(Kind k, double v) {
  return k == Kind::kDouble ? v : static_cast<double>(static_cast<float>(v));
}

// The documented float max/min: a NaN operand is ignored unless both are;
// the running (left) value wins ties, so +0/-0 keep the earlier source's sign.
inline double RefFloatMax(double acc, double x) {
  if (isnan(x)) return acc;
  if (isnan(acc)) return x;
  return x > acc ? x : acc;
}
inline double RefFloatMin(double acc, double x) {
  if (isnan(x)) return acc;
  if (isnan(acc)) return x;
  return x < acc ? x : acc;
}

inline uint64_t RefElement(batonDataType_t dt, batonRedOp_t op, const std::vector<const uint8_t*>& srcs,
                    size_t i, uint32_t divisor) {
  const size_t size = DatatypeSize(dt);
  const Kind kind = KindOf(dt);
  const int n = static_cast<int>(srcs.size());
  if (n == 1 && divisor <= 1) return LoadRaw(srcs[0], size, i);  // copies move bits
  if (!IsFloatKind(kind)) {
    const bool is_signed = kind == Kind::kSigned;
    // Sum and product modulo 2^64 reduce to the right value modulo 2^bits.
    uint64_t acc = LoadRaw(srcs[0], size, i);
    if (is_signed) acc = static_cast<uint64_t>(SignExtend(acc, size));
    for (int s = 1; s < n; ++s) {
      uint64_t x = LoadRaw(srcs[s], size, i);
      if (is_signed) x = static_cast<uint64_t>(SignExtend(x, size));
      switch (op) {
        case batonProd:
          acc *= x;
          break;
        case batonMax:
          if (is_signed ? static_cast<int64_t>(x) > static_cast<int64_t>(acc) : x > acc) acc = x;
          break;
        case batonMin:
          if (is_signed ? static_cast<int64_t>(x) < static_cast<int64_t>(acc) : x < acc) acc = x;
          break;
        default:
          acc += x;
          break;
      }
    }
    acc = TruncateTo(acc, size);
    if (divisor > 1) {
      if (is_signed) {
        acc = static_cast<uint64_t>(SignExtend(acc, size) / static_cast<int64_t>(divisor));
      } else {
        acc /= divisor;
      }
      acc = TruncateTo(acc, size);
    }
    return acc;
  }
  double acc = DecodeFloat(kind, LoadRaw(srcs[0], size, i));
  for (int s = 1; s < n; ++s) {
    const double x = DecodeFloat(kind, LoadRaw(srcs[s], size, i));
    switch (op) {
      case batonProd:
        acc = RoundAcc(kind, acc * x);
        break;
      case batonMax:
        acc = RefFloatMax(acc, x);
        break;
      case batonMin:
        acc = RefFloatMin(acc, x);
        break;
      default:
        acc = RoundAcc(kind, acc + x);
        break;
    }
  }
  if (divisor > 1) acc = RoundAcc(kind, acc / divisor);
  return EncodeFloat(kind, acc);
}

// Equal bits, or both NaN for float types (NaN payloads are not specified).
inline bool SameElement(Kind kind, uint64_t a, uint64_t b) {
  if (a == b) return true;
  return IsFloatKind(kind) && isnan(DecodeFloat(kind, a)) && isnan(DecodeFloat(kind, b));
}

}  // namespace baton
