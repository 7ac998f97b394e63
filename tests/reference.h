// Shared by the tests' independent references: element sizes and
// signedness written out from the API's enum (not taken from the library),
// and what one reduction op does to two values in double. Every test input
// is chosen so that partial results are exact in double; avg accumulates as
// a sum and the caller divides.
#pragma once

#include <baton.h>

#include <algorithm>
#include <cstddef>

inline size_t SizeOf(batonDataType_t dt) {
  switch (dt) {
    case batonInt8:
    case batonUint8:
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
