// The harness of the ReduceCopy tests (kernels_test.cc and
// kernels_special_test.cc): random and guarded test data, one case run
// against the independent reference of unit/kernel_reference.h, and the
// fixture parameterized by datatype and kernel level (the portable loops and
// every Highway target compiled into the build, each forced in turn).
//
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <gtest/gtest.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <cfloat>
#include <ostream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <baton.h>

#include "base/datatype.h"
#include "common/reference.h"
#include "kernels/cpu_hwy.h"
#include "kernels/cpu_reduce.h"
#include "kernels/reduce_copy.h"
#include "unit/kernel_reference.h"

namespace baton {

// gtest prints a level by its name ("avx2") rather than its bytes.
inline void PrintTo(CpuKernelLevel level, std::ostream* os) {
  *os << CpuKernelLevelName(level);
}

}  // namespace baton

namespace baton::kernel_test {

// kPortable and every Highway target of the build; the tests of a target
// this CPU cannot run skip.
inline std::vector<CpuKernelLevel> AllLevels() {
  return CompiledCpuKernelLevels();
}

// Test names: datatype and level ("float32_avx2").
inline std::string LevelParamName(
    const ::testing::TestParamInfo<std::tuple<batonDataType_t, CpuKernelLevel>>& info) {
  return std::string(DatatypeName(std::get<0>(info.param))) + "_" +
         CpuKernelLevelName(std::get<1>(info.param));
}

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
inline uint64_t RandomElement(batonDataType_t dt, FastRng& rng) {
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
  bool non_temporal = false;  // ReduceCopyArgs::non_temporal

  std::string Describe() const {
    static const char* kPlacement[] = {"separate", "dst0=src0", "dst0=srcLast", "dst1=src0"};
    return std::string(DatatypeName(dt)) + " " + RedOpName(op) + " nsrcs=" + std::to_string(nsrcs) +
           " ndsts=" + std::to_string(ndsts) + " count=" + std::to_string(count) +
           (misaligned ? " misaligned" : " aligned") + " " +
           kPlacement[static_cast<int>(placement)] + " div=" + std::to_string(divisor) +
           (non_temporal ? " non_temporal" : "");
  }
};

// Misaligned cases place every operand independently 1..63 bytes past a
// 64-byte boundary (a multiple of the element size, as the API requires), so
// sources and destinations are misaligned relative to each other as well.
inline size_t OperandOffset(const Case& c, size_t size, FastRng& rng) {
  if (!c.misaligned) return 0;
  return size * (1 + rng() % (63 / size));
}

// Source element bits for a case (truncated to the element size by StoreRaw).
using ElementGenerator = uint64_t (*)(batonDataType_t, FastRng&);

// Runs one ReduceCopy case against the reference; reports the first mismatch.
inline ::testing::AssertionResult RunCase(const Case& c, FastRng& rng,
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
  args.non_temporal = c.non_temporal;
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
// forced (SetCpuKernelLevel), or skips when the CPU lacks it. Also the base
// of conversions_test.cc's fp8 fixture.
class KernelLevelTest
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

class ReduceCopyTest : public KernelLevelTest {};

// Every op x nsrcs x ndsts x length 0..257. Alignment, placement and divisor
// rotate with the length so that every combination of them occurs for many

}  // namespace baton::kernel_test
