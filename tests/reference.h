// Shared by the tests' reference loops: what one reduction op does to two
// values, in double. Every test input is chosen so that partial results are
// exact in double; avg accumulates as a sum and the caller divides.
#pragma once

#include <baton.h>

#include <algorithm>

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
