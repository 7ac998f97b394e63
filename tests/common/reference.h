// Shared by the tests' independent references: element sizes and
// signedness written out from the API's enum (not taken from the library),
// and what one reduction op does to two values in double. Every test input
// is chosen so that partial results are exact in double; avg accumulates as
// a sum and the caller divides.
#pragma once

#include <baton.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "common/fp8_reference.h"
#include "common/half_reference.h"

// Every datatype and reduction op of the API, for tests that sweep them.
inline constexpr batonDataType_t kAllTypes[] = {
    batonInt8,    batonUint8,   batonInt32,   batonUint32,   batonInt64,      batonUint64,
    batonFloat16, batonFloat32, batonFloat64, batonBfloat16, batonFloat8e4m3, batonFloat8e5m2};
inline constexpr batonRedOp_t kAllOps[] = {batonSum, batonProd, batonMax, batonMin, batonAvg};

inline size_t SizeOf(batonDataType_t dt) {
  switch (dt) {
    case batonInt8:
    case batonUint8:
    case batonFloat8e4m3:
    case batonFloat8e5m2:
      return 1;
    case batonFloat16:
    case batonBfloat16:
      return 2;
    case batonInt32:
    case batonUint32:
    case batonFloat32:
      return 4;
    default:
      return 8;
  }
}

inline bool IsUnsigned(batonDataType_t dt) {
  return dt == batonUint8 || dt == batonUint32 || dt == batonUint64;
}

inline bool IsFloat(batonDataType_t dt) {
  return dt == batonFloat16 || dt == batonFloat32 || dt == batonFloat64 || dt == batonBfloat16 ||
         dt == batonFloat8e4m3 || dt == batonFloat8e5m2;
}

inline double CombineReference(batonRedOp_t op, double acc, double v) {
  switch (op) {
    case batonProd:
      return acc * v;
    case batonMax:
      return std::max(acc, v);
    case batonMin:
      return std::min(acc, v);
    default:
      return acc + v;
  }
}

// Writes v as element i of dt: small integers exactly, other values rounded
// to nearest even (the floating types).
inline void Store(batonDataType_t dt, uint8_t* p, size_t i, double v) {
  switch (dt) {
    case batonInt8:
      reinterpret_cast<int8_t*>(p)[i] = static_cast<int8_t>(v);
      break;
    case batonUint8:
      p[i] = static_cast<uint8_t>(v);
      break;
    case batonInt32:
      reinterpret_cast<int32_t*>(p)[i] = static_cast<int32_t>(v);
      break;
    case batonUint32:
      reinterpret_cast<uint32_t*>(p)[i] = static_cast<uint32_t>(v);
      break;
    case batonInt64:
      reinterpret_cast<int64_t*>(p)[i] = static_cast<int64_t>(v);
      break;
    case batonUint64:
      reinterpret_cast<uint64_t*>(p)[i] = static_cast<uint64_t>(v);
      break;
    case batonFloat16: {
      const baton_test::Half h = static_cast<baton_test::Half>(v);
      std::memcpy(p + 2 * i, &h, 2);
      break;
    }
    case batonFloat32:
      reinterpret_cast<float*>(p)[i] = static_cast<float>(v);
      break;
    case batonFloat64:
      reinterpret_cast<double*>(p)[i] = v;
      break;
    case batonBfloat16: {
      // Round to nearest even (no NaNs here): exact for small integers, and
      // the rounding the library applies to quotients (avg).
      const float f = static_cast<float>(v);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      bits += 0x7fffu + ((bits >> 16) & 1u);
      const uint16_t top = static_cast<uint16_t>(bits >> 16);
      std::memcpy(p + 2 * i, &top, 2);
      break;
    }
    case batonFloat8e4m3:
      p[i] = baton_test::NearestFp8(v, baton_test::kE4m3Mant, baton_test::kE4m3Bias);
      break;
    case batonFloat8e5m2:
      p[i] = baton_test::NearestFp8(v, baton_test::kE5m2Mant, baton_test::kE5m2Bias);
      break;
    default:
      break;
  }
}

inline double Load(batonDataType_t dt, const uint8_t* p, size_t i) {
  switch (dt) {
    case batonInt8:
      return reinterpret_cast<const int8_t*>(p)[i];
    case batonUint8:
      return p[i];
    case batonInt32:
      return reinterpret_cast<const int32_t*>(p)[i];
    case batonUint32:
      return reinterpret_cast<const uint32_t*>(p)[i];
    case batonInt64:
      return static_cast<double>(reinterpret_cast<const int64_t*>(p)[i]);
    case batonUint64:
      return static_cast<double>(reinterpret_cast<const uint64_t*>(p)[i]);
    case batonFloat16: {
      baton_test::Half h;
      std::memcpy(&h, p + 2 * i, 2);
      return static_cast<double>(h);
    }
    case batonFloat32:
      return reinterpret_cast<const float*>(p)[i];
    case batonFloat64:
      return reinterpret_cast<const double*>(p)[i];
    case batonBfloat16: {
      uint16_t top;
      std::memcpy(&top, p + 2 * i, 2);
      const uint32_t bits = static_cast<uint32_t>(top) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    case batonFloat8e4m3:
      return baton_test::Fp8Value(p[i], baton_test::kE4m3Mant, baton_test::kE4m3Bias);
    case batonFloat8e5m2:
      return baton_test::Fp8Value(p[i], baton_test::kE5m2Mant, baton_test::kE5m2Bias);
    default:
      return 0;
  }
}

// Element i of rank r where the input need not depend on the op (copies,
// and reductions checked with CloseInType): small integers in [-2, 2]
// ([0, 4] unsigned), exact in every type.
inline double SmallInput(batonDataType_t t, int r, size_t i) {
  const double v = static_cast<double>((r * 5 + i * 3 + 1) % 5);
  return IsUnsigned(t) ? v : v - 2;
}

// SmallInput reduced over n ranks in double (avg: the sum divided by n).
inline double SmallReduced(batonDataType_t t, batonRedOp_t op, int n, size_t i) {
  double acc = SmallInput(t, 0, i);
  for (int r = 1; r < n; ++r) acc = CombineReference(op, acc, SmallInput(t, r, i));
  return op == batonAvg ? acc / n : acc;
}

// Integers exactly; floating types within their rounding (1e-2 relative for
// the 16-bit types, 1e-6 for the others).
inline bool CloseInType(batonDataType_t t, double got, double want) {
  if (!IsFloat(t)) return got == want;
  const double tol = t == batonFloat16 || t == batonBfloat16 ? 1e-2 : 1e-6;
  return std::fabs(got - want) <= tol * std::max(1.0, std::fabs(want));
}

// Input element i of rank r for op: small integers (prod: one 2 and one
// -1 per element across ranks, so products stay tiny and exact). fp8 has
// too few significant bits for sums over many ranks (E5M2 counts exactly to
// 8 only), so there the sum inputs are sparse: two ranks per element
// contribute a value in [-2, 2], every other rank 0, and every partial sum
// stays within [-4, 4].
inline double ExactInput(batonDataType_t t, batonRedOp_t op, int r, int n, size_t i) {
  const bool is_unsigned = IsUnsigned(t);
  if (op == batonProd) {
    if (static_cast<int>(i % n) == r) return 2;
    if (!is_unsigned && static_cast<int>((i + 1) % n) == r && n > 1) return -1;
    return 1;
  }
  double v = static_cast<double>((r * 7 + i * 13) % 5);
  if (t == batonFloat8e4m3 || t == batonFloat8e5m2) {
    const bool contributes = static_cast<int>(i % n) == r || static_cast<int>((i + 3) % n) == r;
    if (!contributes && op != batonMax && op != batonMin) return 0;
  }
  return is_unsigned ? v : v - 2;
}

// The reference result of element i: a plain loop over all ranks' inputs.
inline double ExactExpected(batonDataType_t t, batonRedOp_t op, int n, size_t i) {
  double acc = ExactInput(t, op, 0, n, i);
  for (int r = 1; r < n; ++r) {
    double v = ExactInput(t, op, r, n, i);
    acc = CombineReference(op, acc, v);
  }
  if (op != batonAvg) return acc;
  if (t == batonFloat32)
    return static_cast<double>(static_cast<float>(acc) / static_cast<float>(n));
  if (t == batonFloat16 || t == batonBfloat16 || t == batonFloat8e4m3 || t == batonFloat8e5m2)
    return static_cast<float>(acc) / static_cast<float>(n);
  if (t == batonFloat64) return acc / n;
  return std::trunc(acc / n);  // C integer division of an exact (small) sum
}
