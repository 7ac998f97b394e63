// PreMulSum's fused step (ScaleReduce, kernels/cpu_reduce.h): every datatype,
// both operand orders, out of place and in place on either operand, lengths
// around the vector widths and one long one, against a reference written
// here: integers wrap modulo 2^64 and truncate; floats multiply and add in
// double (exact for float operands) and round to the accumulation type
// after each, then once to the element type. For float, double and the
// integers that is also ScaleCopy followed by a plain sum, bit for bit;
// fp16, bf16 and fp8 round once instead of twice (a case below shows it).
// Each test runs at every kernel level (the portable loops and each Highway
// target of the build, forced in turn; those this CPU lacks skip).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "base/datatype.h"
#include "common/reference.h"
#include "kernels/cpu_reduce.h"
#include "unit/kernel_reference.h"
#include "unit/kernels_harness.h"

namespace baton {
namespace {

uint64_t Mix(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Mostly values in [-10, 10), some arbitrary bit patterns (NaN, Inf, huge).
uint64_t Element(batonDataType_t dt, uint64_t* state) {
  const Kind kind = KindOf(dt);
  const uint64_t r = Mix(state);
  if (!IsFloatKind(kind) || r % 100 < 10) return Mix(state);
  return EncodeFloat(kind, static_cast<double>(Mix(state) >> 11) * 0x1p-53 * 20.0 - 10.0);
}

uint64_t Reference(batonDataType_t dt, uint64_t own, uint64_t other, uint64_t scalar,
                   bool own_first) {
  const size_t size = DatatypeSize(dt);
  const Kind kind = KindOf(dt);
  if (!IsFloatKind(kind)) {
    auto widen = [&](uint64_t v) {
      return kind == Kind::kSigned ? static_cast<uint64_t>(SignExtend(v, size)) : v;
    };
    return TruncateTo(TruncateTo(widen(own) * widen(scalar), size) + widen(other), size);
  }
  const double scaled = RoundAcc(kind, DecodeFloat(kind, own) * DecodeFloat(kind, scalar));
  const double y = DecodeFloat(kind, other);
  return EncodeFloat(kind, RoundAcc(kind, own_first ? scaled + y : y + scaled));
}

enum class Place { kApart, kIntoOwn, kIntoOther };

// Parameterized by kernel level, forced for the test.
class ScaleReduceLevel : public ::testing::TestWithParam<CpuKernelLevel> {
 protected:
  void SetUp() override {
    saved_ = CurrentCpuKernelLevel();
    if (!CpuKernelLevelAvailable(GetParam())) {
      GTEST_SKIP() << "this CPU lacks " << CpuKernelLevelName(GetParam());
    }
    ASSERT_TRUE(SetCpuKernelLevel(GetParam()));
  }
  void TearDown() override { SetCpuKernelLevel(saved_); }

 private:
  CpuKernelLevel saved_ = CpuKernelLevel::kPortable;
};

TEST_P(ScaleReduceLevel, MatchesReferenceEveryTypeAndPlacement) {
  uint64_t state = 42;
  for (batonDataType_t dt : kAllTypes) {
    const size_t size = DatatypeSize(dt);
    const Kind kind = KindOf(dt);
    for (size_t count : {size_t{0}, size_t{1}, size_t{3}, size_t{15}, size_t{16}, size_t{17},
                         size_t{63}, size_t{65}, size_t{257}, size_t{100003}}) {
      for (Place place : {Place::kApart, Place::kIntoOwn, Place::kIntoOther}) {
        for (bool own_first : {true, false}) {
          std::vector<uint8_t> own(count * size + 1), other(count * size + 1),
              out(count * size + 1, 0xee);
          for (size_t i = 0; i < count; ++i) {
            StoreRaw(own.data(), size, i, Element(dt, &state));
            StoreRaw(other.data(), size, i, Element(dt, &state));
          }
          const uint64_t scalar = TruncateTo(Element(dt, &state), size);
          const std::vector<uint8_t> own0 = own, other0 = other;
          uint8_t* dst = place == Place::kApart     ? out.data()
                         : place == Place::kIntoOwn ? own.data()
                                                    : other.data();
          ScaleReduce(dst, own.data(), other.data(), count, dt, &scalar, own_first);
          for (size_t i = 0; i < count; ++i) {
            const uint64_t want = Reference(dt, LoadRaw(own0.data(), size, i),
                                            LoadRaw(other0.data(), size, i), scalar, own_first);
            ASSERT_TRUE(SameElement(kind, LoadRaw(dst, size, i), want))
                << DatatypeName(dt) << " count " << count << " place " << static_cast<int>(place)
                << (own_first ? " own first" : "") << " element " << i;
          }
          if (place != Place::kIntoOwn) {
            ASSERT_EQ(own, own0) << DatatypeName(dt);
          }
          if (place != Place::kIntoOther) {
            ASSERT_EQ(other, other0) << DatatypeName(dt);
          }
          ASSERT_EQ(out.back(), 0xee) << DatatypeName(dt) << ": wrote past the end";
        }
      }
    }
  }
}

// Where the unfused path rounds the product to fp16 first, the fused step
// does not: (1 + 2^-10) * (1 + 3 * 2^-10) - 1 is 2^-8 + 3 * 2^-20, which
// rounds to 2^-8 + 2^-18 (0x1c01); rounding the product to fp16 first
// gives 1 + 2^-8, then exactly 2^-8 (0x1c00).
TEST_P(ScaleReduceLevel, Fp16RoundsOnce) {
  const uint16_t x = 0x3c01, s = 0x3c03, minus_one = 0xbc00;
  uint16_t fused = 0, unfused = 0;
  ScaleReduce(&fused, &x, &minus_one, 1, batonFloat16, &s, true);
  ScaleCopy(&unfused, &x, 1, batonFloat16, &s);
  ReduceInto(&unfused, &unfused, &minus_one, 1, batonFloat16, batonSum);
  EXPECT_EQ(fused, 0x1c01);
  EXPECT_EQ(unfused, 0x1c00);
}

// float, double and the integers: the fused step equals ScaleCopy then a
// sum, bit for bit (the accumulation type is the element type).
TEST_P(ScaleReduceLevel, SameBitsAsUnfusedWhereAccumulatingInTheType) {
  uint64_t state = 7;
  for (batonDataType_t dt : {batonFloat32, batonFloat64, batonInt8, batonUint8, batonInt32,
                             batonUint32, batonInt64, batonUint64}) {
    const size_t size = DatatypeSize(dt), count = 4099;
    std::vector<uint8_t> own(count * size), other(count * size), fused(count * size),
        unfused(count * size);
    for (size_t i = 0; i < count; ++i) {
      StoreRaw(own.data(), size, i, Element(dt, &state));
      StoreRaw(other.data(), size, i, Element(dt, &state));
    }
    const uint64_t scalar = TruncateTo(Element(dt, &state), size);
    ScaleReduce(fused.data(), own.data(), other.data(), count, dt, &scalar, true);
    ScaleCopy(unfused.data(), own.data(), count, dt, &scalar);
    ReduceInto(unfused.data(), unfused.data(), other.data(), count, dt, batonSum);
    for (size_t i = 0; i < count; ++i)
      ASSERT_TRUE(
          SameElement(KindOf(dt), LoadRaw(fused.data(), size, i), LoadRaw(unfused.data(), size, i)))
          << DatatypeName(dt) << " element " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(AllLevels, ScaleReduceLevel, ::testing::ValuesIn(kernel_test::AllLevels()),
                         [](const ::testing::TestParamInfo<CpuKernelLevel>& info) {
                           return std::string(CpuKernelLevelName(info.param));
                         });

}  // namespace
}  // namespace baton
