// Tests of the CPU entry point ReduceCopy (src/kernels) over every datatype
// x op x shape at every kernel level the CPU has (portable, AVX2, AVX-512:
// each forced in turn), special values, agreement with the portable core,
// and the device-style grid-stride use of the core. Expected values come
// from the independent scalar reference of unit/kernel_reference.h; the
// conversions and operators themselves are tested in conversions_test.cc.
//
// SPDX-License-Identifier: BSD-3-Clause

#include <gtest/gtest.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <cfloat>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <baton.h>

#include "base/datatype.h"
#include "common/reference.h"
#include "kernels/cpu_reduce.h"
#include "kernels/cpu_simd.h"
#include "kernels/reduce_copy.h"
#include "unit/kernel_reference.h"

namespace baton {
namespace {

constexpr CpuKernelLevel kAllLevels[] = {CpuKernelLevel::kPortable, CpuKernelLevel::kAvx2,
                                         CpuKernelLevel::kAvx512};

// ---- Test data -------------------------------------------------------------------

// SplitMix64: a small, fast generator; test data needs speed, not quality
// beyond "every bit pattern is likely".
class FastRng {
 public:
  explicit FastRng(uint64_t seed) : state_(seed) {}
  uint64_t operator()() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }

 private:
  uint64_t state_;
};

// Random element bits: mostly moderate values, with a share of arbitrary bit
// patterns (wrapping, huge, subnormal, NaN) and of small values (ties for
// max/min, negative sums for avg).
uint64_t RandomElement(batonDataType_t dt, FastRng& rng) {
  const uint64_t r = rng();
  const int pick = static_cast<int>(r % 100);
  const Kind kind = KindOf(dt);
  if (!IsFloatKind(kind)) {
    if (pick < 30) return static_cast<uint64_t>(static_cast<int64_t>(rng() % 7) - 3);
    return rng();
  }
  if (pick < 4) {
    static const double kSpecials[] = {NAN,  -NAN,        INFINITY, -INFINITY, 0.0,
                                       -0.0, FLT_MIN / 4, -DBL_MIN, 65504.0,   1e30};
    return EncodeFloat(kind, kSpecials[rng() % (sizeof(kSpecials) / sizeof(kSpecials[0]))]);
  }
  if (pick < 12) return rng();  // any bits (the caller truncates to the element size)
  // Uniform in [-10, 10) from the top 53 bits.
  return EncodeFloat(kind, static_cast<double>(rng() >> 11) * 0x1p-53 * 20.0 - 10.0);
}

// Byte storage with canaries around an element range that starts `offset`
// bytes past a 64-byte boundary; CheckCanaries() catches stray writes.
class GuardedBuffer {
 public:
  static constexpr uint8_t kCanary = 0xa5;
  static constexpr size_t kGuard = 64;

  GuardedBuffer(size_t bytes, size_t offset)
      : bytes_(bytes), storage_(bytes + 3 * kGuard, kCanary) {
    const uintptr_t base = reinterpret_cast<uintptr_t>(storage_.data());
    const uintptr_t aligned = (base + kGuard + 63) & ~uintptr_t{63};
    begin_ = static_cast<size_t>(aligned - base) + offset;
  }
  uint8_t* data() { return storage_.data() + begin_; }
  bool CheckCanaries() const {
    for (size_t i = 0; i < begin_; ++i) {
      if (storage_[i] != kCanary) return false;
    }
    for (size_t i = begin_ + bytes_; i < storage_.size(); ++i) {
      if (storage_[i] != kCanary) return false;
    }
    return true;
  }

 private:
  size_t bytes_;
  std::vector<uint8_t> storage_;
  size_t begin_;
};

// How a case places its destinations relative to its sources.
enum class Placement { kSeparate, kDstIsFirstSrc, kDstIsLastSrc, kSecondDstIsFirstSrc };

struct Case {
  batonDataType_t dt;
  batonRedOp_t op;
  int nsrcs;
  int ndsts;
  size_t count;
  bool misaligned;
  Placement placement;
  uint32_t divisor;

  std::string Describe() const {
    static const char* kPlacement[] = {"separate", "dst0=src0", "dst0=srcLast", "dst1=src0"};
    return std::string(DatatypeName(dt)) + " " + RedOpName(op) + " nsrcs=" + std::to_string(nsrcs) +
           " ndsts=" + std::to_string(ndsts) + " count=" + std::to_string(count) +
           (misaligned ? " misaligned" : " aligned") + " " +
           kPlacement[static_cast<int>(placement)] + " div=" + std::to_string(divisor);
  }
};

// Misaligned cases place every operand independently 1..63 bytes past a
// 64-byte boundary (a multiple of the element size, as the API requires), so
// sources and destinations are misaligned relative to each other as well.
size_t OperandOffset(const Case& c, size_t size, FastRng& rng) {
  if (!c.misaligned) return 0;
  return size * (1 + rng() % (63 / size));
}

// Source element bits for a case (truncated to the element size by StoreRaw).
using ElementGenerator = uint64_t (*)(batonDataType_t, FastRng&);

// Runs one ReduceCopy case against the reference; reports the first mismatch.
::testing::AssertionResult RunCase(const Case& c, FastRng& rng,
                                   ElementGenerator generate = RandomElement) {
  const size_t size = DatatypeSize(c.dt);
  const size_t bytes = c.count * size;
  std::vector<GuardedBuffer> src_bufs;
  std::vector<GuardedBuffer> dst_bufs;
  src_bufs.reserve(c.nsrcs);
  dst_bufs.reserve(c.ndsts);
  for (int s = 0; s < c.nsrcs; ++s) {
    src_bufs.emplace_back(bytes, OperandOffset(c, size, rng));
    for (size_t i = 0; i < c.count; ++i) {
      StoreRaw(src_bufs[s].data(), size, i, generate(c.dt, rng));
    }
  }
  for (int d = 0; d < c.ndsts; ++d) dst_bufs.emplace_back(bytes, OperandOffset(c, size, rng));

  // Expected values from the untouched inputs, before any in-place call.
  std::vector<const uint8_t*> inputs;
  for (auto& b : src_bufs) inputs.push_back(b.data());
  std::vector<uint64_t> expected(c.count);
  for (size_t i = 0; i < c.count; ++i) expected[i] = RefElement(c.dt, c.op, inputs, i, c.divisor);

  ReduceCopyArgs args;
  for (int s = 0; s < c.nsrcs; ++s) args.srcs[s] = src_bufs[s].data();
  args.nsrcs = c.nsrcs;
  for (int d = 0; d < c.ndsts; ++d) args.dsts[d] = dst_bufs[d].data();
  switch (c.placement) {
    case Placement::kDstIsFirstSrc:
      args.dsts[0] = src_bufs[0].data();
      break;
    case Placement::kDstIsLastSrc:
      args.dsts[0] = src_bufs[c.nsrcs - 1].data();
      break;
    case Placement::kSecondDstIsFirstSrc:
      if (c.ndsts == 2) args.dsts[1] = src_bufs[0].data();
      break;
    default:
      break;
  }
  args.ndsts = c.ndsts;
  args.count = c.count;
  args.datatype = c.dt;
  args.op = c.op;
  args.post_divisor = c.divisor;
  ReduceCopy(args);

  const Kind kind = KindOf(c.dt);
  for (int d = 0; d < c.ndsts; ++d) {
    const uint8_t* out = static_cast<const uint8_t*>(args.dsts[d]);
    for (size_t i = 0; i < c.count; ++i) {
      const uint64_t got = LoadRaw(out, size, i);
      if (!SameElement(kind, got, expected[i])) {
        char msg[128];
        snprintf(msg, sizeof(msg), ": dst %d element %zu got 0x%llx want 0x%llx", d, i,
                 static_cast<unsigned long long>(got),
                 static_cast<unsigned long long>(expected[i]));
        return ::testing::AssertionFailure() << c.Describe() << msg;
      }
    }
  }
  for (auto& b : src_bufs) {
    if (!b.CheckCanaries()) return ::testing::AssertionFailure() << c.Describe() << ": src overrun";
  }
  for (auto& b : dst_bufs) {
    if (!b.CheckCanaries()) return ::testing::AssertionFailure() << c.Describe() << ": dst overrun";
  }
  return ::testing::AssertionSuccess();
}

// Stops a sweep after a few failures so one bug does not print thousands.
class FailureBudget {
 public:
  bool Check(const ::testing::AssertionResult& r) {
    if (!r) {
      ADD_FAILURE() << r.message();
      ++failures_;
    }
    return failures_ < 5;
  }

 private:
  int failures_ = 0;
};

// ---- ReduceCopy sweep -------------------------------------------------------------

// Parameterized by datatype and kernel level: each test runs with that level
// forced (SetCpuKernelLevel), or skips when the CPU lacks it.
class ReduceCopyTest
    : public ::testing::TestWithParam<std::tuple<batonDataType_t, CpuKernelLevel>> {
 protected:
  void SetUp() override {
    saved_ = CurrentCpuKernelLevel();
    const CpuKernelLevel level = std::get<1>(GetParam());
    if (!CpuKernelLevelAvailable(level)) {
      GTEST_SKIP() << "this CPU lacks " << CpuKernelLevelName(level);
    }
    ASSERT_TRUE(SetCpuKernelLevel(level));
  }
  void TearDown() override { SetCpuKernelLevel(saved_); }
  static batonDataType_t datatype() { return std::get<0>(GetParam()); }

 private:
  CpuKernelLevel saved_ = CpuKernelLevel::kPortable;
};

// Every op x nsrcs x ndsts x length 0..257. Alignment, placement and divisor
// rotate with the length so that every combination of them occurs for many
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

// Streaming (non-temporal) stores normally start at 16 MiB; forcing them on
// for every size checks that path, its cache-line alignment head and the
// second destination's phase check, with aligned (streaming) and misaligned
// (declined) operands, in place and out of place.
TEST_P(ReduceCopyTest, StreamingStores) {
  const batonDataType_t dt = datatype();
  FastRng rng(7000 + dt);
  const size_t saved_nt = SimdNonTemporalMinBytes();
  SetSimdNonTemporalMinBytes(0);
  FailureBudget budget;
  for (batonRedOp_t op : kAllOps) {
    for (auto [nsrcs, ndsts] : {std::pair{2, 1}, std::pair{3, 2}}) {
      for (size_t count : {size_t{1000}, size_t{65536 + 5}}) {
        for (bool misaligned : {false, true}) {
          const Placement placement =
              count % 2 == 0 ? Placement::kSeparate : Placement::kSecondDstIsFirstSrc;
          const uint32_t divisor = op == batonAvg ? static_cast<uint32_t>(nsrcs) : 0;
          Case c{dt, op, nsrcs, ndsts, count, misaligned, placement, divisor};
          if (!budget.Check(RunCase(c, rng))) break;
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

// ---- Special values and agreement with the portable core ------------------------------

// Raw bit patterns at the edges of each type: signed zeros, infinities,
// quiet and signalling NaNs with payloads and both signs, the smallest and
// largest subnormals, the smallest normal, the largest finite value, one and
// its neighbour (for rounding ties); for integers the extremes and small
// values. Entries wider than the element are truncated, so only each type's
// own row matters.
uint64_t SpecialElement(batonDataType_t dt, FastRng& rng) {
  static const std::vector<uint64_t> kHalf = {
      0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0xfe01, 0x7c01, 0xfd55, 0x0001, 0x8001,
      0x03ff, 0x83ff, 0x0400, 0x7bff, 0xfbff, 0x3c00, 0xbc00, 0x3c01, 0x1400, 0x6800};
  static const std::vector<uint64_t> kBf16 = {
      0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0xffc1, 0x7f81, 0xff95, 0x0001, 0x8001,
      0x007f, 0x807f, 0x0080, 0x7f7f, 0xff7f, 0x3f80, 0xbf80, 0x3f81, 0x3b80, 0x4b80};
  static const std::vector<uint64_t> kFloat = {
      0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00001, 0x7f800001,
      0xff812345, 0x00000001, 0x80000001, 0x007fffff, 0x807fffff, 0x00800000, 0x7f7fffff,
      0xff7fffff, 0x3f800000, 0xbf800000, 0x3f800001, 0x33800000, 0x4b800000};
  static const std::vector<uint64_t> kDouble = {
      0x0000000000000000, 0x8000000000000000, 0x7ff0000000000000, 0xfff0000000000000,
      0x7ff8000000000000, 0xfff8000000000001, 0x7ff0000000000001, 0xfff0123456789abc,
      0x0000000000000001, 0x8000000000000001, 0x000fffffffffffff, 0x800fffffffffffff,
      0x0010000000000000, 0x7fefffffffffffff, 0xffefffffffffffff, 0x3ff0000000000000,
      0xbff0000000000000, 0x3ff0000000000001, 0x3ca0000000000000, 0x4340000000000000};
  static const std::vector<uint64_t> kInt = {0,
                                             1,
                                             2,
                                             ~uint64_t{0},
                                             0x7f,
                                             0x80,
                                             0xff,
                                             0x7fffffff,
                                             0x80000000,
                                             0xffffffff,
                                             0x7fffffffffffffff,
                                             0x8000000000000000,
                                             0xfffffffffffffffe,
                                             0x100000001};
  const std::vector<uint64_t>* pool = &kInt;
  switch (KindOf(dt)) {
    case Kind::kE4m3:
    case Kind::kE5m2:
      // 256 patterns in all: any byte is special enough.
      if (rng() % 8 == 0) return RandomElement(dt, rng);
      return rng() & 0xff;
    case Kind::kHalf:
      pool = &kHalf;
      break;
    case Kind::kBf16:
      pool = &kBf16;
      break;
    case Kind::kFloat:
      pool = &kFloat;
      break;
    case Kind::kDouble:
      pool = &kDouble;
      break;
    default:
      break;
  }
  // A few ordinary values too, so specials meet finite operands.
  if (rng() % 8 == 0) return RandomElement(dt, rng);
  return (*pool)[rng() % pool->size()];
}

// Every op x nsrcs x ndsts over operands drawn mostly from SpecialElement.
TEST_P(ReduceCopyTest, SpecialValues) {
  const batonDataType_t dt = datatype();
  FastRng rng(5000 + dt);
  FailureBudget budget;
  for (batonRedOp_t op : kAllOps) {
    for (int nsrcs : {1, 2, 3, 8}) {
      for (int ndsts : {1, 2}) {
        for (uint32_t divisor : {0u, 3u}) {
          for (size_t count : {size_t{200}, size_t{301}}) {
            Case c{dt, op, nsrcs, ndsts, count, count % 2 == 1, Placement::kSeparate, divisor};
            if (!budget.Check(RunCase(c, rng, SpecialElement))) return;
          }
        }
      }
    }
  }
}

// The selected level against the portable core itself (ReduceCopyRange run
// as a plain loop), bit for bit. For max/min and for copies even NaN payloads
// must agree: the core's choice of operand is fully specified there. Sums and
// products of two NaNs may carry either payload (the core leaves it open), so
// there both only need to be NaN. For fp16, bf16 and fp8 the first run feeds
// every bit pattern through the conversions (x + -0 and x max -0 are exact
// in fp32, so the store must reproduce the core's rounding of every input).
TEST_P(ReduceCopyTest, MatchesPortableCoreBitwise) {
  const batonDataType_t dt = datatype();
  const size_t size = DatatypeSize(dt);
  const Kind kind = KindOf(dt);
  FastRng rng(6000 + dt);
  const bool is16 = kind == Kind::kHalf || kind == Kind::kBf16;
  const bool is8 = kind == Kind::kE4m3 || kind == Kind::kE5m2;
  constexpr size_t kCount = 65536 + 37;
  for (batonRedOp_t op : kAllOps) {
    for (int nsrcs : {2, 3}) {
      for (uint32_t divisor : {0u, 3u}) {
        for (int run = 0; run < 2; ++run) {
          const bool exhaustive = (is16 || is8) && run == 0;
          const uint64_t neg_zero = is8 ? 0x80 : 0x8000;
          std::vector<std::vector<uint8_t>> srcs(nsrcs, std::vector<uint8_t>(kCount * size));
          for (int s = 0; s < nsrcs; ++s) {
            for (size_t i = 0; i < kCount; ++i) {
              uint64_t v = run == 0 ? rng() : SpecialElement(dt, rng);
              if (exhaustive) v = s == 0 ? (i & 0xffff) : neg_zero;  // x op -0
              StoreRaw(srcs[s].data(), size, i, v);
            }
          }
          std::vector<uint8_t> got(kCount * size), want(kCount * size);
          ReduceCopyArgs args;
          for (int s = 0; s < nsrcs; ++s) args.srcs[s] = srcs[s].data();
          args.nsrcs = nsrcs;
          args.dsts[0] = got.data();
          args.ndsts = 1;
          args.count = kCount;
          args.datatype = dt;
          args.op = op;
          args.post_divisor = divisor;
          ReduceCopy(args);
          ASSERT_TRUE(DispatchReduce(dt, op, [&](auto type_tag, auto op_tag) {
            using T = typename decltype(type_tag)::type;
            using Op = typename decltype(op_tag)::type;
            const T* typed_srcs[kMaxReduceSrcs];
            for (int s = 0; s < nsrcs; ++s)
              typed_srcs[s] = reinterpret_cast<const T*>(srcs[s].data());
            T* typed_dst = reinterpret_cast<T*>(want.data());
            ReduceCopyRange<T, Op>(typed_srcs, nsrcs, &typed_dst, 1, 0, kCount, 1, divisor);
          }));
          const bool payloads_free = op == batonSum || op == batonProd || op == batonAvg;
          for (size_t i = 0; i < kCount; ++i) {
            const uint64_t g = LoadRaw(got.data(), size, i);
            const uint64_t w = LoadRaw(want.data(), size, i);
            const bool ok = g == w || (payloads_free && SameElement(kind, g, w));
            ASSERT_TRUE(ok) << DatatypeName(dt) << " " << RedOpName(op) << " nsrcs=" << nsrcs
                            << " div=" << divisor << " run=" << run << " element " << i << std::hex
                            << ": got 0x" << g << " want 0x" << w;
          }
        }
      }
    }
  }
}

// ---- Kernel levels -------------------------------------------------------------------

TEST(KernelLevel, SelectionApi) {
  const CpuKernelLevel saved = CurrentCpuKernelLevel();
  EXPECT_TRUE(CpuKernelLevelAvailable(CpuKernelLevel::kPortable));
  EXPECT_TRUE(CpuKernelLevelAvailable(BestCpuKernelLevel()));
  EXPECT_FALSE(CpuKernelLevelAvailable(static_cast<CpuKernelLevel>(7)));
  EXPECT_FALSE(SetCpuKernelLevel(static_cast<CpuKernelLevel>(7)));
  EXPECT_EQ(CurrentCpuKernelLevel(), saved);  // a refused request changes nothing
  EXPECT_STREQ(CpuKernelLevelName(CpuKernelLevel::kPortable), "portable");
  EXPECT_STREQ(CpuKernelLevelName(CpuKernelLevel::kAvx2), "avx2");
  EXPECT_STREQ(CpuKernelLevelName(CpuKernelLevel::kAvx512), "avx512");
  EXPECT_STREQ(CpuKernelLevelName(static_cast<CpuKernelLevel>(-1)), "invalid");
  for (CpuKernelLevel level : kAllLevels) {
    if (!CpuKernelLevelAvailable(level)) continue;
    EXPECT_TRUE(SetCpuKernelLevel(level));
    EXPECT_EQ(CurrentCpuKernelLevel(), level);
  }
  // Without BATON_KERNELS (as meson test runs it) the default is the best.
  if (getenv("BATON_KERNELS") == nullptr) {
    EXPECT_EQ(saved, BestCpuKernelLevel());
  }
  SetCpuKernelLevel(saved);
}

// ---- Grid emulation ----------------------------------------------------------------

// Runs ReduceCopyRange the way a CUDA kernel's grid-stride loop does: one
// call per (block, thread) with begin = block * blockDim + thread and
// stride = grid * blockDim. The calls are sequential here, but as on a GPU
// each covers a disjoint set of indices, so their order does not matter.
template <typename T, typename Op>
void EmulateGrid(const ReduceCopyArgs& args, int grid, int block) {
  const T* srcs[kMaxReduceSrcs];
  T* dsts[kMaxReduceDsts];
  for (int s = 0; s < args.nsrcs; ++s) srcs[s] = static_cast<const T*>(args.srcs[s]);
  for (int d = 0; d < args.ndsts; ++d) dsts[d] = static_cast<T*>(args.dsts[d]);
  const size_t stride = static_cast<size_t>(grid) * block;
  for (int b = 0; b < grid; ++b) {
    for (int t = 0; t < block; ++t) {
      ReduceCopyRange<T, Op>(srcs, args.nsrcs, dsts, args.ndsts, static_cast<size_t>(b) * block + t,
                             args.count, stride, args.post_divisor);
    }
  }
}

TEST_P(ReduceCopyTest, GridEmulationMatchesCpu) {
  const batonDataType_t dt = datatype();
  const size_t size = DatatypeSize(dt);
  const Kind kind = KindOf(dt);
  FastRng rng(4000 + dt);
  const std::pair<int, int> kShapes[] = {{1, 1}, {3, 7}, {13, 32}, {64, 256}};
  const std::pair<int, int> kFanout[] = {{1, 1}, {2, 1}, {3, 2}, {8, 2}};
  for (batonRedOp_t op : kAllOps) {
    for (auto [nsrcs, ndsts] : kFanout) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{1000}, size_t{4099}}) {
        for (auto [grid, block] : kShapes) {
          const bool in_place = (count + grid) % 2 == 0;
          std::vector<std::vector<uint8_t>> srcs(nsrcs, std::vector<uint8_t>(count * size));
          for (auto& s : srcs) {
            for (size_t i = 0; i < count; ++i) StoreRaw(s.data(), size, i, RandomElement(dt, rng));
          }
          // Two copies of everything: one for the CPU path, one for the grid,
          // so in-place runs start from the same inputs.
          std::vector<std::vector<uint8_t>> grid_srcs = srcs;
          std::vector<std::vector<uint8_t>> cpu_dsts(ndsts, std::vector<uint8_t>(count * size));
          std::vector<std::vector<uint8_t>> grid_dsts = cpu_dsts;
          ReduceCopyArgs cpu;
          ReduceCopyArgs dev;
          for (int s = 0; s < nsrcs; ++s) {
            cpu.srcs[s] = srcs[s].data();
            dev.srcs[s] = grid_srcs[s].data();
          }
          for (int d = 0; d < ndsts; ++d) {
            cpu.dsts[d] = cpu_dsts[d].data();
            dev.dsts[d] = grid_dsts[d].data();
          }
          if (in_place) {
            cpu.dsts[0] = srcs[0].data();
            dev.dsts[0] = grid_srcs[0].data();
          }
          cpu.nsrcs = dev.nsrcs = nsrcs;
          cpu.ndsts = dev.ndsts = ndsts;
          cpu.count = dev.count = count;
          cpu.datatype = dev.datatype = dt;
          cpu.op = dev.op = op;
          cpu.post_divisor = dev.post_divisor = op == batonAvg ? static_cast<uint32_t>(nsrcs) : 0;
          ReduceCopy(cpu);
          ASSERT_TRUE(DispatchReduce(dt, op, [&](auto type_tag, auto op_tag) {
            EmulateGrid<typename decltype(type_tag)::type, typename decltype(op_tag)::type>(
                dev, grid, block);
          }));
          // Bit-exact except for NaN payloads: both run the same core functors,
          // but the compiler may commute the operands of a vectorized float add,
          // and which NaN's payload survives is not specified.
          for (int d = 0; d < ndsts; ++d) {
            const uint8_t* want = static_cast<const uint8_t*>(cpu.dsts[d]);
            const uint8_t* got = static_cast<const uint8_t*>(dev.dsts[d]);
            for (size_t i = 0; i < count; ++i) {
              ASSERT_TRUE(SameElement(kind, LoadRaw(got, size, i), LoadRaw(want, size, i)))
                  << DatatypeName(dt) << " " << RedOpName(op) << " nsrcs=" << nsrcs
                  << " ndsts=" << ndsts << " count=" << count << " grid=" << grid
                  << " block=" << block << (in_place ? " in place" : "") << " dst " << d
                  << " element " << i;
            }
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllTypes, ReduceCopyTest,
    ::testing::Combine(::testing::ValuesIn(kAllTypes), ::testing::ValuesIn(kAllLevels)),
    [](const ::testing::TestParamInfo<std::tuple<batonDataType_t, CpuKernelLevel>>& info) {
      return std::string(DatatypeName(std::get<0>(info.param))) + "_" +
             CpuKernelLevelName(std::get<1>(info.param));
    });

}  // namespace
}  // namespace baton
