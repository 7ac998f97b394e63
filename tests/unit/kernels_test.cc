// Tests of the CPU entry point ReduceCopy (src/kernels) over every datatype
// x op x shape at every kernel level the CPU has (portable and each Highway
// target of the build: SSE4, AVX2, AVX-512, AVX3_DL on x86, NEON, SVE, SVE2
// on aarch64, each forced in turn) and the kernel-level selection. Expected values come
// from the independent scalar reference of unit/kernel_reference.h; special
// values, agreement with the portable core and the grid-stride use are in
// kernels_special_test.cc, the conversions and operators themselves in
// conversions_test.cc.
//
// SPDX-License-Identifier: BSD-3-Clause

#include <set>
#include <string>
#include <vector>

#include "unit/kernels_harness.h"

namespace baton::kernel_test {
namespace {

// lengths, on both sides of each vector-width and block boundary.
TEST_P(ReduceCopyTest, AllShapes) {
  const batonDataType_t dt = datatype();
  FastRng rng(1000 + dt);
  FailureBudget budget;
  for (batonRedOp_t op : kAllOps) {
    for (int nsrcs : {1, 2, 3, 8}) {
      for (int ndsts : {1, 2}) {
        for (size_t count = 0; count <= 257; ++count) {
          Case c{dt, op, nsrcs, ndsts, count, (count & 1) != 0, Placement::kSeparate, 0};
          c.placement = static_cast<Placement>((count >> 1) % 4);
          if (op == batonAvg) {
            // The natural divisor is the rank count; also 0/1 (none) and 7.
            static const uint32_t kAvgDivisors[] = {0, 1, 2, 3, 7, 8};
            c.divisor =
                (count % 3 == 0) ? static_cast<uint32_t>(nsrcs) : kAvgDivisors[(count / 3) % 6];
          } else if ((count >> 3) % 3 == 0) {
            c.divisor = 3;  // the divisor applies after any op
          }
          if (!budget.Check(RunCase(c, rng))) return;
        }
      }
    }
  }
}

// One long length per op, so the multi-block and vector main loops run many
// iterations: each op takes a different path (fast two-source out of place
// and in place, blocked general path with 2 destinations or 8 sources, copy).
TEST_P(ReduceCopyTest, LargeCount) {
  const batonDataType_t dt = datatype();
  FastRng rng(2000 + dt);
  constexpr size_t kCount = (size_t{1} << 20) + 3;
  const Case cases[] = {
      {dt, batonSum, 2, 1, kCount, false, Placement::kSeparate, 0},
      {dt, batonProd, 2, 1, kCount, true, Placement::kDstIsLastSrc, 0},
      {dt, batonMax, 3, 2, kCount, true, Placement::kDstIsFirstSrc, 0},
      {dt, batonMin, 8, 1, kCount, false, Placement::kSeparate, 0},
      {dt, batonAvg, 3, 2, kCount, true, Placement::kSecondDstIsFirstSrc, 3},
      {dt, batonAvg, 2, 1, kCount, true, Placement::kDstIsFirstSrc, 2},
      {dt, batonSum, 1, 2, kCount, true, Placement::kSeparate, 0},
  };
  FailureBudget budget;
  for (const Case& c : cases) {
    if (!budget.Check(RunCase(c, rng))) return;
  }
}

// Streaming (non-temporal) stores are off by default; forcing them on for
// every size, process-wide or per call (ReduceCopyArgs::non_temporal),
// checks that path, its cache-line alignment head and the second
// destination's cached stores (at any offset from the first), with
// aligned (streaming) and misaligned (declined) operands, in place and out
// of place.
TEST_P(ReduceCopyTest, StreamingStores) {
  const batonDataType_t dt = datatype();
  FastRng rng(7000 + dt);
  const size_t saved_nt = SimdNonTemporalMinBytes();
  FailureBudget budget;
  for (bool per_call : {false, true}) {
    SetSimdNonTemporalMinBytes(per_call ? saved_nt : 0);
    for (batonRedOp_t op : kAllOps) {
      for (auto [nsrcs, ndsts] : {std::pair{2, 1}, std::pair{3, 2}}) {
        for (size_t count : {size_t{1000}, size_t{65536 + 5}}) {
          for (bool misaligned : {false, true}) {
            const Placement placement =
                count % 2 == 0 ? Placement::kSeparate : Placement::kSecondDstIsFirstSrc;
            const uint32_t divisor = op == batonAvg ? static_cast<uint32_t>(nsrcs) : 0;
            Case c{dt, op, nsrcs, ndsts, count, misaligned, placement, divisor, per_call};
            if (!budget.Check(RunCase(c, rng))) break;
          }
        }
      }
    }
  }
  SetSimdNonTemporalMinBytes(saved_nt);
}

// ReduceInto with every aliasing of dst to its operands; values are drawn
// from a tiny set so NaN, +-0 and ties are frequent, which exposes any swap of
// the operand order in the in-place paths.
TEST_P(ReduceCopyTest, ReduceIntoAliasing) {
  const batonDataType_t dt = datatype();
  const size_t size = DatatypeSize(dt);
  const Kind kind = KindOf(dt);
  constexpr size_t kCount = 1031;
  FastRng rng(3000 + dt);
  for (batonRedOp_t op : kAllOps) {
    std::vector<uint8_t> a(kCount * size), b(kCount * size);
    for (size_t i = 0; i < kCount; ++i) {
      static const double kSmall[] = {NAN, -NAN, 0.0, -0.0, 1.0, -1.0, 2.0};
      const uint64_t va = IsFloatKind(kind) ? EncodeFloat(kind, kSmall[rng() % 7]) : rng() % 4;
      const uint64_t vb = IsFloatKind(kind) ? EncodeFloat(kind, kSmall[rng() % 7]) : rng() % 4;
      StoreRaw(a.data(), size, i, va);
      StoreRaw(b.data(), size, i, vb);
    }
    const uint32_t divisor = op == batonAvg ? 2 : 0;
    const std::vector<const uint8_t*> ab = {a.data(), b.data()};
    const std::vector<const uint8_t*> aa = {a.data(), a.data()};
    std::vector<uint64_t> want_ab(kCount), want_aa(kCount);
    for (size_t i = 0; i < kCount; ++i) {
      want_ab[i] = RefElement(dt, op, ab, i, divisor);
      want_aa[i] = RefElement(dt, op, aa, i, divisor);
    }
    auto expect_out = [&](const std::vector<uint8_t>& out, const std::vector<uint64_t>& want,
                          const char* what) {
      for (size_t i = 0; i < kCount; ++i) {
        ASSERT_TRUE(SameElement(kind, LoadRaw(out.data(), size, i), want[i]))
            << DatatypeName(dt) << " " << RedOpName(op) << " " << what << " element " << i;
      }
    };
    std::vector<uint8_t> out(kCount * size);
    ReduceInto(out.data(), a.data(), b.data(), kCount, dt, op, divisor);
    expect_out(out, want_ab, "dst separate");
    std::vector<uint8_t> io = a;
    ReduceInto(io.data(), io.data(), b.data(), kCount, dt, op, divisor);
    expect_out(io, want_ab, "dst == a");
    io = b;
    ReduceInto(io.data(), a.data(), io.data(), kCount, dt, op, divisor);
    expect_out(io, want_ab, "dst == b");
    ReduceInto(out.data(), a.data(), a.data(), kCount, dt, op, divisor);
    expect_out(out, want_aa, "a == b");
    io = a;
    ReduceInto(io.data(), io.data(), io.data(), kCount, dt, op, divisor);
    expect_out(io, want_aa, "dst == a == b");
  }
}

// ---- Kernel levels -------------------------------------------------------------------

TEST(KernelLevel, SelectionApi) {
  const CpuKernelLevel saved = CurrentCpuKernelLevel();
  EXPECT_TRUE(CpuKernelLevelAvailable(CpuKernelLevel::kPortable));
  EXPECT_TRUE(CpuKernelLevelAvailable(BestCpuKernelLevel()));
  EXPECT_FALSE(CpuKernelLevelAvailable(static_cast<CpuKernelLevel>(7)));
  EXPECT_FALSE(CpuKernelLevelAvailable(static_cast<CpuKernelLevel>(-1)));
  EXPECT_FALSE(SetCpuKernelLevel(static_cast<CpuKernelLevel>(7)));
  EXPECT_EQ(CurrentCpuKernelLevel(), saved);  // a refused request changes nothing
  EXPECT_STREQ(CpuKernelLevelName(CpuKernelLevel::kPortable), "portable");
  EXPECT_STREQ(CpuKernelLevelName(static_cast<CpuKernelLevel>(-1)), "invalid");
  EXPECT_STREQ(CpuKernelLevelName(static_cast<CpuKernelLevel>(7)), "invalid");

  // Every compiled level has its own name, which parses back to it; the
  // best is the last available one.
  const std::vector<CpuKernelLevel> levels = AllLevels();
  ASSERT_FALSE(levels.empty());
  EXPECT_EQ(levels.front(), CpuKernelLevel::kPortable);
  std::set<std::string> names;
  CpuKernelLevel last_available = CpuKernelLevel::kPortable;
  for (CpuKernelLevel level : levels) {
    const std::string name = CpuKernelLevelName(level);
    EXPECT_NE(name, "invalid");
    EXPECT_TRUE(names.insert(name).second) << name;
    CpuKernelLevel parsed;
    ASSERT_TRUE(ParseCpuKernelLevel(name, &parsed)) << name;
    EXPECT_EQ(parsed, level) << name;
    if (!CpuKernelLevelAvailable(level)) continue;
    last_available = level;
    EXPECT_TRUE(SetCpuKernelLevel(level));
    EXPECT_EQ(CurrentCpuKernelLevel(), level);
  }
  EXPECT_EQ(BestCpuKernelLevel(), last_available);

  // The names of the hand-written back ends Highway replaced still work,
  // and the other targets are known whether or not this build has them.
  CpuKernelLevel avx512, avx3, avx2, zen4, dl;
  ASSERT_TRUE(ParseCpuKernelLevel("avx512", &avx512));
  ASSERT_TRUE(ParseCpuKernelLevel("avx3", &avx3));
  ASSERT_TRUE(ParseCpuKernelLevel("avx2", &avx2));
  EXPECT_EQ(avx512, avx3);
  EXPECT_STREQ(CpuKernelLevelName(avx512), "avx512");
  EXPECT_STREQ(CpuKernelLevelName(avx2), "avx2");
  ASSERT_TRUE(ParseCpuKernelLevel("avx3_zen4", &zen4));
  ASSERT_TRUE(ParseCpuKernelLevel("avx3_dl", &dl));
  EXPECT_STREQ(CpuKernelLevelName(dl), "avx3_dl");
  EXPECT_NE(zen4, CpuKernelLevel::kPortable);
  for (const char* name : {"sse4", "neon", "sve", "sve2"}) {
    CpuKernelLevel level;
    ASSERT_TRUE(ParseCpuKernelLevel(name, &level)) << name;
    EXPECT_STREQ(CpuKernelLevelName(level), name);
  }
  CpuKernelLevel ignored;
  EXPECT_FALSE(ParseCpuKernelLevel("auto", &ignored));
  EXPECT_FALSE(ParseCpuKernelLevel("avx1024", &ignored));
  EXPECT_FALSE(ParseCpuKernelLevel("", &ignored));

  // Without BATON_KERNELS (as meson test runs it) the default is the best.
  if (getenv("BATON_KERNELS") == nullptr) {
    EXPECT_EQ(saved, BestCpuKernelLevel());
  }
  SetCpuKernelLevel(saved);
}

// On x86-64 the build has SSE4, AVX2, AVX-512 and AVX3_DL (unless its
// baseline already exceeds some of them); aarch64 has NEON, SVE and SVE2.
TEST(KernelLevel, CompiledTargets) {
  std::set<std::string> names;
  for (CpuKernelLevel level : AllLevels()) names.insert(CpuKernelLevelName(level));
#if defined(__x86_64__) && !defined(__AVX2__)
  for (const char* name : {"sse4", "avx2", "avx512", "avx3_dl"})
    EXPECT_EQ(names.count(name), 1u) << name;
#elif defined(__aarch64__)
  for (const char* name : {"neon", "sve", "sve2"}) EXPECT_EQ(names.count(name), 1u) << name;
#endif
}

INSTANTIATE_TEST_SUITE_P(AllTypes, ReduceCopyTest,
                         ::testing::Combine(::testing::ValuesIn(kAllTypes),
                                            ::testing::ValuesIn(AllLevels())),
                         LevelParamName);

}  // namespace
}  // namespace baton::kernel_test
