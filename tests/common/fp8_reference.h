// fp8 (OCP E4M3 and E5M2) for the tests' references, written from the
// formats' definitions (OCP 8-bit Floating Point Specification) rather than
// from the library's converters: a code's value field by field with ldexp,
// and rounding as a search for the nearest finite value.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>

namespace baton_test {

// The value of an fp8 code with `mant` mantissa bits and exponent bias
// `bias`; E4M3's S.1111.111 and E5M2's S.11111.xx are NaN (Inf for xx = 00).
inline double Fp8ValueSlow(uint8_t code, int mant, int bias) {
  const int e = (code & 0x7f) >> mant;
  const int m = code & ((1 << mant) - 1);
  double v;
  if (mant == 3 && (code & 0x7f) == 0x7f) {
    v = NAN;
  } else if (mant == 2 && e == 31) {
    v = m == 0 ? INFINITY : NAN;
  } else if (e == 0) {
    v = std::ldexp(static_cast<double>(m), 1 - bias - mant);
  } else {
    v = std::ldexp(static_cast<double>(m + (1 << mant)), e - bias - mant);
  }
  return (code & 0x80) ? -v : v;
}

inline constexpr int kE4m3Mant = 3, kE4m3Bias = 7;
inline constexpr int kE5m2Mant = 2, kE5m2Bias = 15;

// The same, tabulated for the two formats: references decode millions.
inline double Fp8Value(uint8_t code, int mant, int bias) {
  static const auto tables = [] {
    std::array<std::array<double, 256>, 2> t;
    for (int c = 0; c < 256; ++c) {
      t[0][c] = Fp8ValueSlow(static_cast<uint8_t>(c), kE4m3Mant, kE4m3Bias);
      t[1][c] = Fp8ValueSlow(static_cast<uint8_t>(c), kE5m2Mant, kE5m2Bias);
    }
    return t;
  }();
  if (mant == kE4m3Mant && bias == kE4m3Bias) return tables[0][code];
  if (mant == kE5m2Mant && bias == kE5m2Bias) return tables[1][code];
  return Fp8ValueSlow(code, mant, bias);
}

// Nearest code to f among the finite codes (whose magnitudes grow with the
// code), ties to the even code; beyond the largest finite value, infinities
// included, the largest finite value with the sign: the saturating rounding
// the library documents.
inline uint8_t NearestFp8(double f, int mant, int bias) {
  if (std::isnan(f)) return 0x7f;
  const int max_code = mant == 3 ? 0x7e : 0x7b;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  const double a = std::fabs(f);
  // The first code whose magnitude is >= |f|, by bisection over [0, max_code].
  int lo = 0, hi = max_code;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (Fp8Value(static_cast<uint8_t>(mid), mant, bias) < a) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  int best = lo;
  if (lo > 0) {
    const double above = Fp8Value(static_cast<uint8_t>(lo), mant, bias) - a;
    const double below = a - Fp8Value(static_cast<uint8_t>(lo - 1), mant, bias);
    // above < 0: |f| is beyond the largest finite value, which it keeps.
    if (above >= 0 && (below < above || (below == above && ((lo - 1) & 1) == 0))) best = lo - 1;
  }
  return static_cast<uint8_t>(sign | best);
}

}  // namespace baton_test
