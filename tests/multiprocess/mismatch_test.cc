// Ranks that call different things: another collective, count, datatype,
// op or root on one rank. Every rank must fail well before BATON_TIMEOUT
// with batonInvalidUsage and a message that says "mismatch" (the ranks that
// saw it name both calls; the others learn it from the rank that saw it),
// never a hang, a "rank left", an internal error or wrong numbers. With
// BATON_CHECK=1 the mismatched call itself fails on every rank. And a rank
// that is late, or stopped, is named in the timeout's message of the others.
#include <baton.h>

#include <chrono>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "common/mp_harness.h"
#include "multiprocess/failure_common.h"

namespace {

using baton_test::Options;
using baton_test::RankContext;
using baton_test::ResultName;
using baton_test::RunRanks;
using baton_test::SecondsSince;

constexpr int kTimeoutSeconds = 20;  // BATON_TIMEOUT: a mismatch must be reported long before
constexpr double kMaxReportSeconds = 5;
constexpr int kOddRank = 2;  // the rank that calls something else

enum class Mismatch { kCount, kDatatype, kOp, kPreMulSum, kRoot, kCollective, kCollectiveLarge };

const char* MismatchName(Mismatch m) {
  switch (m) {
    case Mismatch::kCount:
      return "count";
    case Mismatch::kDatatype:
      return "datatype";
    case Mismatch::kOp:
      return "op";
    case Mismatch::kPreMulSum:
      return "premulsum";
    case Mismatch::kRoot:
      return "root";
    case Mismatch::kCollective:
      return "collective";
    case Mismatch::kCollectiveLarge:
      return "collective_large";
  }
  return "?";
}

// What the calls differ in, as it must appear in the detecting ranks' messages.
const char* WhatDiffers(Mismatch m) {
  switch (m) {
    case Mismatch::kCount:
      return "32768 x";
    case Mismatch::kDatatype:
      return "double";
    case Mismatch::kOp:
      return "max";
    case Mismatch::kPreMulSum:
      return "premulsum";
    case Mismatch::kRoot:
      return "root 1";
    case Mismatch::kCollective:
    case Mismatch::kCollectiveLarge:
      return "broadcast";
  }
  return "?";
}

// One call: the same on every rank but kOddRank, which changes one thing.
batonResult_t Call(RankContext& ctx, Mismatch m, std::vector<double>& buf) {
  const bool odd = ctx.rank() == kOddRank;
  // 64 KiB: past the lines (comm/lines.cc), which take small allreduces and
  // word a peer that ran another collective more briefly (lines_test.cc).
  size_t count = m == Mismatch::kCollectiveLarge ? size_t{1} << 20 : 16384;
  if (m == Mismatch::kCount && odd) count = 32768;
  const batonDataType_t dt = m == Mismatch::kDatatype && odd ? batonFloat64 : batonFloat32;
  batonRedOp_t op = m == Mismatch::kOp && odd ? batonMax : batonSum;
  if (m == Mismatch::kPreMulSum && odd) {
    // A PreMulSum op against the others' sum: the descriptors say so.
    float two = 2.0f;
    const batonResult_t r =
        batonRedOpCreatePreMulSum(&op, &two, batonFloat32, batonScalarHostImmediate, ctx.comm());
    if (r != batonSuccess) return r;
  }
  const int root = m == Mismatch::kRoot && odd ? 1 : 0;
  if (m == Mismatch::kRoot)
    return batonBroadcast(buf.data(), buf.data(), count, dt, root, ctx.comm(), nullptr);
  if ((m == Mismatch::kCollective || m == Mismatch::kCollectiveLarge) && odd)
    return batonBroadcast(buf.data(), buf.data(), count, dt, 0, ctx.comm(), nullptr);
  return batonAllReduce(buf.data(), buf.data(), count, dt, op, ctx.comm(), nullptr);
}

class MismatchTest : public ::testing::TestWithParam<std::tuple<const char*, int, Mismatch, bool>> {
};

TEST_P(MismatchTest, EveryRankReportsIt) {
  const auto [transport, nranks, mismatch, check] = GetParam();
  Options options;
  options.env = {{"BATON_TRANSPORT", transport},
                 {"BATON_TIMEOUT", std::to_string(kTimeoutSeconds)},
                 {"BATON_CHECK", check ? "1" : "0"}};
  options.deadline = std::chrono::seconds(60);
  RunRanks(
      nranks,
      [mismatch = mismatch, check = check](RankContext& ctx) {
        std::vector<double> buf(size_t{2} << 20, 1.0);
        // A matching call first: the mismatch is call #2, after a success.
        MP_ASSERT_OK(ctx, batonAllReduce(buf.data(), buf.data(), 64, batonFloat32, batonSum,
                                         ctx.comm(), nullptr));
        ctx.SetStep(std::string("the call with a ") + MismatchName(mismatch) + " mismatch");
        const auto start = std::chrono::steady_clock::now();
        batonResult_t r = Call(ctx, mismatch, buf);
        if (check) {
          // The agreement check runs before any data moves.
          MP_EXPECT_EQ(ctx, r, batonInvalidUsage) << " with BATON_CHECK=1: " << ctx.LastError();
        }
        if (r == batonSuccess) {
          // A rank whose part of the call needs nothing from the ranks that
          // differ (a broadcast's root) may finish it; its next call must
          // then report the mismatch.
          ctx.SetStep("the call after the mismatch");
          r = batonAllReduce(buf.data(), buf.data(), 64, batonFloat32, batonSum, ctx.comm(),
                             nullptr);
        }
        const double elapsed = SecondsSince(start);
        const std::string message = ctx.LastError();
        MP_EXPECT_EQ(ctx, r, batonInvalidUsage)
            << " (" << ResultName(r) << ") after " << elapsed << " s: " << message;
        MP_EXPECT_LT(ctx, elapsed, kMaxReportSeconds) << " s to report: " << message;
        MP_EXPECT_NE(ctx, message.find("mismatch"), std::string::npos) << message;
        // The call is numbered: the first allreduce was #1.
        MP_EXPECT_NE(ctx, message.find("#2"), std::string::npos) << message;
        // Reported by the rank that saw it, or seen here: either way both
        // calls (or the sizes that differ) are named.
        if (message.find("reported by") == std::string::npos &&
            message.find("bytes") == std::string::npos)
          MP_EXPECT_NE(ctx, message.find(WhatDiffers(mismatch)), std::string::npos) << message;
        if (ctx.rank() == 0) ctx.Log(message);
        // The communicator stays failed; abort returns.
        MP_EXPECT_NE(
            ctx,
            batonAllReduce(buf.data(), buf.data(), 64, batonFloat32, batonSum, ctx.comm(), nullptr),
            batonSuccess);
        MP_EXPECT_OK(ctx, batonCommAbort(ctx.TakeComm()));
      },
      options);
}

INSTANTIATE_TEST_SUITE_P(
    All, MismatchTest,
    ::testing::Combine(::testing::Values("shm", "tcp"), ::testing::Values(3, 4),
                       ::testing::Values(Mismatch::kCount, Mismatch::kDatatype, Mismatch::kOp,
                                         Mismatch::kPreMulSum, Mismatch::kRoot,
                                         Mismatch::kCollective, Mismatch::kCollectiveLarge),
                       ::testing::Bool()),
    [](const auto& info) {
      return std::string(std::get<0>(info.param)) + "_" + std::to_string(std::get<1>(info.param)) +
             "_" + MismatchName(std::get<2>(info.param)) +
             (std::get<3>(info.param) ? "_check" : "");
    });

class SelfRootTest : public ::testing::TestWithParam<const char*> {};

// Rank 1 takes itself for the root of a small broadcast whose root is 0
// everywhere else: as root it receives nothing, so no descriptor of the call
// is compared, and the small allreduce after it runs on the lines, which
// read no ring. What rank 0 and rank 1 sent each other and rank 2 waits
// unread; each rank's batonCommDestroy finds it and fails naming the call.
TEST_P(SelfRootTest, UnreadBroadcastIsReportedByDestroy) {
  Options options;
  options.env = {{"BATON_TRANSPORT", GetParam()},
                 {"BATON_TIMEOUT", std::to_string(kTimeoutSeconds)}};
  options.deadline = std::chrono::seconds(60);
  RunRanks(
      3,
      [](RankContext& ctx) {
        std::vector<double> buf(4, ctx.rank() + 10.0);
        const int root = ctx.rank() == 1 ? 1 : 0;
        batonResult_t r =
            batonBroadcast(buf.data(), buf.data(), 4, batonFloat64, root, ctx.comm(), nullptr);
        if (r == batonSuccess)
          r = batonAllReduce(buf.data(), buf.data(), 4, batonFloat64, batonSum, ctx.comm(),
                             nullptr);
        batonComm_t comm = ctx.TakeComm();
        if (r != batonSuccess) {
          // Caught in a call (a transport whose next read met the stray).
          MP_EXPECT_NE(ctx, ctx.LastError().find("mismatch"), std::string::npos) << ctx.LastError();
          MP_EXPECT_OK(ctx, batonCommAbort(comm));
          return;
        }
        r = batonCommDestroy(comm);
        const std::string message = batonGetLastError(nullptr);
        MP_EXPECT_EQ(ctx, r, batonInvalidUsage) << message;
        MP_EXPECT_NE(ctx, message.find("never received rank"), std::string::npos) << message;
        MP_EXPECT_NE(ctx, message.find("broadcast #1"), std::string::npos) << message;
      },
      options);
}

INSTANTIATE_TEST_SUITE_P(All, SelfRootTest, ::testing::Values("shm", "tcp"));

class LateRankTest : public ::testing::TestWithParam<const char*> {};

constexpr int kShortTimeout = 3;  // BATON_TIMEOUT for LateRankTest

// Rank 2 is busy elsewhere (sleeping in its own code) past BATON_TIMEOUT
// while the others wait for it in an allreduce: their timeout must name it
// as the rank that has not entered the call, with its last call.
TEST_P(LateRankTest, TimeoutNamesTheRankThatNeverCame) {
  Options options;
  options.env = {{"BATON_TRANSPORT", GetParam()}, {"BATON_TIMEOUT", std::to_string(kShortTimeout)}};
  options.deadline = std::chrono::seconds(60);
  RunRanks(
      4, [](RankContext& ctx) { baton_test::LateRankIsNamed(ctx, 4096, kShortTimeout, kOddRank); },
      options);
}

INSTANTIATE_TEST_SUITE_P(Transports, LateRankTest, ::testing::Values("shm", "tcp"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
