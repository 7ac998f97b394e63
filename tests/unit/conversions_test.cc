// The reduce-copy core's conversions and operators (kernels/reduce_copy.h)
// against the scalar reference of unit/kernel_reference.h: fp16, bf16 and
// fp8 both ways (exhaustively where it fits), integer wrap-around and C
// division, max/min with NaN and signed zeros, datatype names and sizes.
//
// SPDX-License-Identifier: BSD-3-Clause

#include <gtest/gtest.h>
#include <math.h>
#include <stdint.h>

#include <cfloat>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <baton.h>

#include "base/datatype.h"
#include "common/reference.h"
#include "kernels/cpu_reduce.h"
#include "kernels/reduce_copy.h"
#include "unit/kernel_reference.h"
#include "unit/kernels_harness.h"

namespace baton {
namespace {

// ---- Conversions -------------------------------------------------------------------

TEST(HalfConversion, ToFloatExhaustive) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const float got = HalfToFloat(half_t{static_cast<uint16_t>(b)});
    const float want = RefHalfToFloat(static_cast<uint16_t>(b));
    // Exact bits, NaNs included: both keep the payload and set the quiet bit.
    ASSERT_EQ(BitsOf(got), BitsOf(want)) << "half 0x" << std::hex << b;
  }
}

TEST(HalfConversion, RoundTripExhaustive) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const uint16_t h = static_cast<uint16_t>(b);
    const uint16_t back = FloatToHalf(HalfToFloat(half_t{h})).bits;
    const bool is_nan = (h & 0x7c00) == 0x7c00 && (h & 0x03ff) != 0;
    // A NaN comes back quiet with its sign and payload; everything else exactly.
    const uint16_t want = is_nan ? static_cast<uint16_t>(h | 0x0200) : h;
    ASSERT_EQ(back, want) << "half 0x" << std::hex << b;
  }
}

// Floats around every half boundary: each half value, the midpoints to its
// neighbours (the ties) and a few ulps either side, with both signs.
std::vector<float> HalfBoundaryFloats() {
  std::vector<float> out;
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    const float lo = RefHalfToFloat(static_cast<uint16_t>(h));
    const float hi = h + 1 == 0x7c00 ? 65536.0f : RefHalfToFloat(static_cast<uint16_t>(h + 1));
    const float mid = static_cast<float>((static_cast<double>(lo) + hi) / 2);  // exact in float
    for (float base : {lo, mid}) {
      uint32_t u = BitsOf(base);
      for (uint32_t k = u > 2 ? u - 2 : 0; k <= u + 2; ++k) {
        out.push_back(FloatOf(k));
        out.push_back(-FloatOf(k));
      }
    }
  }
  return out;
}

TEST(HalfConversion, FromFloatRoundsToNearestEven) {
  // Hand-checked landmarks, so a failure here reads without a reference.
  EXPECT_EQ(FloatToHalf(1.0f).bits, 0x3c00);
  EXPECT_EQ(FloatToHalf(1.0f + 0x1p-11f).bits, 0x3c00);      // tie, even below
  EXPECT_EQ(FloatToHalf(1.0f + 3 * 0x1p-11f).bits, 0x3c02);  // tie, even above
  EXPECT_EQ(FloatToHalf(1.0f + 0x1p-11f + 0x1p-23f).bits, 0x3c01);
  EXPECT_EQ(FloatToHalf(65504.0f).bits, 0x7bff);
  EXPECT_EQ(FloatToHalf(65519.996f).bits, 0x7bff);
  EXPECT_EQ(FloatToHalf(65520.0f).bits, 0x7c00);  // tie with 65536 rounds to Inf
  EXPECT_EQ(FloatToHalf(-1e10f).bits, 0xfc00);
  EXPECT_EQ(FloatToHalf(INFINITY).bits, 0x7c00);
  EXPECT_EQ(FloatToHalf(0x1p-24f).bits, 0x0001);    // smallest subnormal
  EXPECT_EQ(FloatToHalf(0x1p-25f).bits, 0x0000);    // tie with 0 rounds to even 0
  EXPECT_EQ(FloatToHalf(0x1.8p-24f).bits, 0x0002);  // tie 1.5 ulp rounds to even 2
  EXPECT_EQ(FloatToHalf(0x1.000002p-25f).bits, 0x0001);
  EXPECT_EQ(FloatToHalf(0x1.ffcp-15f).bits, 0x0400);  // subnormal tie rounding up to normal
  EXPECT_EQ(FloatToHalf(-0.0f).bits, 0x8000);
  EXPECT_EQ(FloatToHalf(FLT_MIN / 2).bits, 0x0000);  // float subnormal
  const uint16_t nan = FloatToHalf(NAN).bits;
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x0200, 0);                                         // quiet
  EXPECT_EQ(FloatToHalf(FloatOf(0x7f800001)).bits & 0x7e00, 0x7e00);  // sNaN stays NaN

  for (float f : HalfBoundaryFloats()) {
    ASSERT_EQ(FloatToHalf(f).bits, RefFloatToHalf(f)) << std::hexfloat << f;
  }
  // A stride through every exponent and sign, NaNs included, then random bits.
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 4099) {
    const float f = FloatOf(static_cast<uint32_t>(u));
    ASSERT_EQ(FloatToHalf(f).bits, RefFloatToHalf(f)) << "float bits 0x" << std::hex << u;
  }
  std::mt19937 rng(1);
  for (int i = 0; i < 2000000; ++i) {
    const float f = FloatOf(rng());
    ASSERT_EQ(FloatToHalf(f).bits, RefFloatToHalf(f)) << "float bits 0x" << std::hex << BitsOf(f);
  }
}

TEST(Bf16Conversion, ToFloatExhaustive) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const float got = Bf16ToFloat(bfloat16_t{static_cast<uint16_t>(b)});
    const double want = RefBf16ToDouble(static_cast<uint16_t>(b));
    if (isnan(want)) {
      // Widening is a plain shift: the NaN keeps its exact bits.
      ASSERT_EQ(BitsOf(got), b << 16) << "bf16 0x" << std::hex << b;
    } else {
      ASSERT_EQ(BitsOf(got), BitsOf(static_cast<float>(want))) << "bf16 0x" << std::hex << b;
    }
  }
}

TEST(Bf16Conversion, RoundTripExhaustive) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const uint16_t h = static_cast<uint16_t>(b);
    const uint16_t back = FloatToBf16(Bf16ToFloat(bfloat16_t{h})).bits;
    const bool is_nan = (h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0;
    ASSERT_EQ(back, is_nan ? static_cast<uint16_t>(h | 0x40) : h) << "bf16 0x" << std::hex << b;
  }
}

TEST(Bf16Conversion, FromFloatRoundsToNearestEven) {
  EXPECT_EQ(FloatToBf16(1.0f).bits, 0x3f80);
  EXPECT_EQ(FloatToBf16(1.0f + 0x1p-8f).bits, 0x3f80);      // tie, even below
  EXPECT_EQ(FloatToBf16(1.0f + 3 * 0x1p-8f).bits, 0x3f82);  // tie, even above
  EXPECT_EQ(FloatToBf16(FLT_MAX).bits, 0x7f80);             // rounds past the largest bf16
  EXPECT_EQ(FloatToBf16(FloatOf(0x7f7f7fff)).bits, 0x7f7f);
  EXPECT_EQ(FloatToBf16(FloatOf(0x00008000)).bits, 0x0000);  // subnormal tie to even 0
  EXPECT_EQ(FloatToBf16(FloatOf(0x00018000)).bits, 0x0002);  // subnormal tie to even 2
  EXPECT_EQ(FloatToBf16(FloatOf(0x007fffff)).bits, 0x0080);  // subnormal up to FLT_MIN
  EXPECT_EQ(FloatToBf16(-INFINITY).bits, 0xff80);
  EXPECT_EQ(FloatToBf16(FloatOf(0x7f800001)).bits, 0x7fc0);  // sNaN with low payload stays NaN
  EXPECT_EQ(FloatToBf16(FloatOf(0xffffffff)).bits, 0xffff);  // no carry out of a NaN

  auto check = [](float f) {
    const uint16_t got = FloatToBf16(f).bits;
    const uint16_t want = RefFloatToBf16(f);
    if (isnan(f)) {
      EXPECT_EQ(got & 0xffc0, want & 0xffc0) << std::hexfloat << f;  // sign, exponent, quiet
      return ::testing::Test::HasFailure();
    }
    EXPECT_EQ(got, want) << "float bits 0x" << std::hex << BitsOf(f);
    return ::testing::Test::HasFailure();
  };
  for (uint32_t h = 0; h < 0x7f80; ++h) {
    // Each bf16 value and the tie above it, a few ulps either side, both signs.
    for (uint32_t base : {h << 16, (h << 16) | 0x8000}) {
      for (uint32_t k = base > 2 ? base - 2 : 0; k <= base + 2; ++k) {
        if (check(FloatOf(k)) || check(-FloatOf(k))) return;
      }
    }
  }
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 4099) {
    if (check(FloatOf(static_cast<uint32_t>(u)))) return;
  }
  std::mt19937 rng(2);
  for (int i = 0; i < 2000000; ++i) {
    if (check(FloatOf(rng()))) return;
  }
}

// ---- fp8 -------------------------------------------------------------------------

// Both directions against the definitions in common/fp8_reference.h.
template <typename T>
void CheckFp8Conversions(int mant, int bias, float (*to_float)(T)) {
  for (uint32_t b = 0; b < 256; ++b) {
    const float got = to_float(T{static_cast<uint8_t>(b)});
    const double want = baton_test::Fp8Value(static_cast<uint8_t>(b), mant, bias);
    if (isnan(want)) {
      ASSERT_TRUE(isnan(got)) << "fp8 0x" << std::hex << b;
      ASSERT_EQ(signbit(got), (b & 0x80) != 0) << "fp8 0x" << std::hex << b;
    } else {
      ASSERT_EQ(BitsOf(got), BitsOf(static_cast<float>(want))) << "fp8 0x" << std::hex << b;
      // Every finite code comes back unchanged; E5M2's infinities saturate.
      const uint32_t back = isinf(want) ? (b & 0x80) | 0x7b : b;
      ASSERT_EQ(FloatToFp8<T>(got).bits, back) << "fp8 0x" << std::hex << b;
    }
  }
  auto check = [&](float f) {
    const uint8_t got = FloatToFp8<T>(f).bits;
    if (isnan(f)) {
      EXPECT_TRUE(isnan(to_float(T{got}))) << std::hexfloat << f;
      return ::testing::Test::HasFailure();
    }
    EXPECT_EQ(got, baton_test::NearestFp8(f, mant, bias))
        << "float bits 0x" << std::hex << BitsOf(f);
    return ::testing::Test::HasFailure();
  };
  // Each fp8 value, the midpoints to its neighbours and a few float ulps
  // either side, both signs; then a stride through all floats.
  for (uint32_t b = 0; b < 0x80; ++b) {
    const double v = baton_test::Fp8Value(static_cast<uint8_t>(b), mant, bias);
    const double next = baton_test::Fp8Value(static_cast<uint8_t>(b + 1), mant, bias);
    if (isnan(v)) continue;
    for (double base : {v, isnan(next) || isinf(next) ? v * 1.0625 : (v + next) / 2}) {
      const uint32_t u = BitsOf(static_cast<float>(base));
      for (uint32_t k = u > 2 ? u - 2 : 0; k <= u + 2; ++k) {
        if (check(FloatOf(k)) || check(-FloatOf(k))) return;
      }
    }
  }
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 4099) {
    if (check(FloatOf(static_cast<uint32_t>(u)))) return;
  }
}

TEST(Fp8Conversion, E4m3AgainstDefinition) {
  CheckFp8Conversions<fp8_e4m3_t>(baton_test::kE4m3Mant, baton_test::kE4m3Bias, Fp8E4m3ToFloat);
}

TEST(Fp8Conversion, E5m2AgainstDefinition) {
  CheckFp8Conversions<fp8_e5m2_t>(baton_test::kE5m2Mant, baton_test::kE5m2Bias, Fp8E5m2ToFloat);
}

// Hand-checked landmarks of the saturating round to nearest even.
TEST(Fp8Conversion, Landmarks) {
  auto e4 = [](float f) { return FloatToFp8<fp8_e4m3_t>(f).bits; };
  auto e5 = [](float f) { return FloatToFp8<fp8_e5m2_t>(f).bits; };
  EXPECT_EQ(e4(1.0f), 0x38);
  EXPECT_EQ(e4(448.0f), 0x7e);
  EXPECT_EQ(e4(464.0f), 0x7e);    // the tie above 448 rounds to even 448
  EXPECT_EQ(e4(1e6f), 0x7e);      // saturates...
  EXPECT_EQ(e4(INFINITY), 0x7e);  // ...infinities too (E4M3 has none)
  EXPECT_EQ(e4(-INFINITY), 0xfe);
  EXPECT_EQ(e4(0x1p-9f), 0x01);    // smallest subnormal
  EXPECT_EQ(e4(0x1p-10f), 0x00);   // tie with 0: even 0
  EXPECT_EQ(e4(0x1.8p-9f), 0x02);  // tie 1.5 steps: even 2
  EXPECT_EQ(e4(0x1.ep-7f), 0x08);  // subnormal rounding up to the smallest normal
  EXPECT_EQ(e4(1.0625f), 0x38);    // tie between 1 and 1.125: even
  EXPECT_EQ(e4(1.1875f), 0x3a);    // tie between 1.125 and 1.25: even
  EXPECT_EQ(e4(-0.0f), 0x80);
  EXPECT_EQ(e4(FLT_MIN / 2), 0x00);
  EXPECT_EQ(e4(NAN), 0x7f);
  EXPECT_EQ(e4(-NAN), 0xff);
  EXPECT_EQ(e5(1.0f), 0x3c);
  EXPECT_EQ(e5(57344.0f), 0x7b);
  EXPECT_EQ(e5(61440.0f), 0x7b);  // would round to Inf: saturates
  EXPECT_EQ(e5(INFINITY), 0x7b);
  EXPECT_EQ(e5(-INFINITY), 0xfb);
  EXPECT_EQ(e5(0x1p-16f), 0x01);
  EXPECT_EQ(e5(0x1p-17f), 0x00);
  EXPECT_EQ(e5(NAN) & 0x7e, 0x7e);  // quiet NaN
  EXPECT_TRUE(isnan(Fp8E4m3ToFloat(fp8_e4m3_t{0x7f})));
  EXPECT_EQ(Fp8E4m3ToFloat(fp8_e4m3_t{0x7e}), 448.0f);
  EXPECT_EQ(Fp8E4m3ToFloat(fp8_e4m3_t{0x01}), 0x1p-9f);
  EXPECT_EQ(Fp8E5m2ToFloat(fp8_e5m2_t{0x7c}), INFINITY);
  EXPECT_EQ(Fp8E5m2ToFloat(fp8_e5m2_t{0xfb}), -57344.0f);
}

// Parameterized by fp8 type and kernel level, forced as in kernels_test.cc.
class Fp8PairsTest : public kernel_test::KernelLevelTest {};

// fp8: every op on all 256 x 256 pairs of bit patterns, against the
// reference's decoding and saturating round to nearest even
// (common/fp8_reference.h), at each kernel level; avg divides by 2 and 3 so
// that quotients land between fp8 values and on ties. Out of place and in
// place (the in-place loops are separate code in the back ends).
TEST_P(Fp8PairsTest, AllPairs) {
  const batonDataType_t dt = datatype();
  const Kind kind = KindOf(dt);
  constexpr size_t kCount = 256 * 256;
  std::vector<uint8_t> a(kCount), b(kCount);
  for (size_t i = 0; i < kCount; ++i) {
    a[i] = static_cast<uint8_t>(i & 0xff);
    b[i] = static_cast<uint8_t>(i >> 8);
  }
  const std::vector<const uint8_t*> ab = {a.data(), b.data()};
  struct OpCase {
    batonRedOp_t op;
    uint32_t divisor;
  };
  for (OpCase oc : {OpCase{batonSum, 0}, OpCase{batonProd, 0}, OpCase{batonMax, 0},
                    OpCase{batonMin, 0}, OpCase{batonAvg, 2}, OpCase{batonAvg, 3}}) {
    std::vector<uint8_t> out(kCount), io = a;
    ReduceInto(out.data(), a.data(), b.data(), kCount, dt, oc.op, oc.divisor);
    ReduceInto(io.data(), io.data(), b.data(), kCount, dt, oc.op, oc.divisor);
    for (size_t i = 0; i < kCount; ++i) {
      const uint64_t want = RefElement(dt, oc.op, ab, i, oc.divisor);
      ASSERT_TRUE(SameElement(kind, out[i], want))
          << DatatypeName(dt) << " " << RedOpName(oc.op) << " div=" << oc.divisor << std::hex
          << " a=0x" << +a[i] << " b=0x" << +b[i] << ": got 0x" << +out[i] << " want 0x" << want;
      ASSERT_TRUE(SameElement(kind, io[i], out[i]))
          << DatatypeName(dt) << " " << RedOpName(oc.op) << " in place, " << std::hex << "a=0x"
          << +a[i] << " b=0x" << +b[i];
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fp8Types, Fp8PairsTest,
                         ::testing::Combine(::testing::Values(batonFloat8e4m3, batonFloat8e5m2),
                                            ::testing::ValuesIn(kernel_test::AllLevels())),
                         kernel_test::LevelParamName);

// PreMulSum's pre-multiplication of fp8 at each kernel level: one rounding
// of the fp32 product, saturating.
TEST_P(Fp8PairsTest, ScaleCopyRoundsOnce) {
  const batonDataType_t dt = datatype();
  const int mant = dt == batonFloat8e4m3 ? baton_test::kE4m3Mant : baton_test::kE5m2Mant;
  const int bias = dt == batonFloat8e4m3 ? baton_test::kE4m3Bias : baton_test::kE5m2Bias;
  std::vector<uint8_t> in(256), out(256);
  for (int i = 0; i < 256; ++i) in[i] = static_cast<uint8_t>(i);
  for (double s : {0.5, 3.0, -1.75, 300.0}) {
    const uint8_t scalar = baton_test::NearestFp8(s, mant, bias);
    ScaleCopy(out.data(), in.data(), 256, dt, &scalar);
    const double sv = baton_test::Fp8Value(scalar, mant, bias);
    for (int i = 0; i < 256; ++i) {
      const double x = baton_test::Fp8Value(in[i], mant, bias);
      if (isnan(x) || isinf(x)) continue;
      ASSERT_EQ(out[i], baton_test::NearestFp8(static_cast<float>(x * sv), mant, bias))
          << DatatypeName(dt) << " x=" << x << " s=" << sv;
    }
  }
}

// Integers wrap; in place allowed.
TEST(ScaleCopy, WrapsInPlace) {
  std::vector<int8_t> v = {100, -3, 64};
  const int8_t three = 3;
  ScaleCopy(v.data(), v.data(), v.size(), batonInt8, &three);  // in place
  EXPECT_EQ(v, (std::vector<int8_t>{44, -9, -64}));
}

// ---- Operators -----------------------------------------------------------------------

TEST(ReduceOps, IntegerWrapAndDivision) {
  EXPECT_EQ(FuncSum<int8_t>()(127, 1), -128);
  EXPECT_EQ(FuncProd<int8_t>()(-128, -1), -128);
  EXPECT_EQ(FuncProd<uint8_t>()(255, 255), 1);
  EXPECT_EQ(FuncSum<int32_t>()(INT32_MAX, 1), INT32_MIN);
  EXPECT_EQ(FuncProd<int32_t>()(65536, 65536), 0);
  EXPECT_EQ(FuncProd<int64_t>()(INT64_MIN, -1), INT64_MIN);
  EXPECT_EQ(FuncSum<uint64_t>()(UINT64_MAX, 2), 1u);
  // C division: truncation toward zero, never an unsigned conversion.
  EXPECT_EQ(PostDivide<int32_t>(-7, 2), -3);
  EXPECT_EQ(PostDivide<int8_t>(-128, 200), 0);
  EXPECT_EQ(PostDivide<int64_t>(INT64_MIN, 2), INT64_MIN / 2);
  EXPECT_EQ(PostDivide<uint8_t>(255, 2), 127);
}

TEST(ReduceOps, FloatMaxMinIgnoreNan) {
  const FuncMax<float> fmax_op;
  const FuncMin<float> fmin_op;
  EXPECT_EQ(fmax_op(NAN, 1.0f), 1.0f);
  EXPECT_EQ(fmax_op(1.0f, NAN), 1.0f);
  EXPECT_TRUE(isnan(fmax_op(NAN, NAN)));
  EXPECT_EQ(fmin_op(NAN, -1.0f), -1.0f);
  EXPECT_EQ(fmin_op(-INFINITY, NAN), -INFINITY);
  // Ties keep the left operand: the sign of zero follows the source order.
  EXPECT_FALSE(signbit(fmax_op(0.0f, -0.0f)));
  EXPECT_TRUE(signbit(fmax_op(-0.0f, 0.0f)));
  EXPECT_TRUE(signbit(fmin_op(-0.0f, 0.0f)));
  EXPECT_FALSE(signbit(fmin_op(0.0f, -0.0f)));
}

TEST(ReduceOps, Names) {
  EXPECT_STREQ(DatatypeName(batonInt8), "int8");
  EXPECT_STREQ(DatatypeName(batonFloat16), "half");
  EXPECT_STREQ(DatatypeName(batonBfloat16), "bfloat16");
  EXPECT_STREQ(DatatypeName(batonFloat64), "double");
  EXPECT_STREQ(DatatypeName(batonFloat8e4m3), "f8e4m3");
  EXPECT_STREQ(DatatypeName(batonFloat8e5m2), "f8e5m2");
  EXPECT_STREQ(DatatypeName(static_cast<batonDataType_t>(42)), "invalid");
  EXPECT_STREQ(RedOpName(batonSum), "sum");
  EXPECT_STREQ(RedOpName(batonAvg), "avg");
  EXPECT_STREQ(RedOpName(static_cast<batonRedOp_t>(-1)), "invalid");
  const size_t sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  for (batonDataType_t dt : kAllTypes) EXPECT_EQ(DatatypeSize(dt), sizes[dt]) << DatatypeName(dt);
  EXPECT_EQ(DatatypeSize(batonNumTypes), 0u);
}

}  // namespace
}  // namespace baton
