// batonCommShrink: the survivors of a SIGKILL shrink the communicator and go
// on; a healthy communicator shrinks by choice; bad arguments are refused.
#include <baton.h>
#include <signal.h>

#include <chrono>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/mp_harness.h"
#include "multiprocess/failure_common.h"

namespace {

using baton_test::AllReduceUntilError;
using baton_test::FailureOptions;
using baton_test::kLargeCount;
using baton_test::Options;
using baton_test::RaiseSoon;
using baton_test::RankContext;
using baton_test::RunRanks;
using baton_test::SecondsSince;

class ShrinkTest : public ::testing::TestWithParam<const char*> {};

// Rank 2 dies mid-allreduce; the three survivors see the error, shrink the
// communicator without it (BATON_SHRINK_ABORT) and go on: a correct
// allreduce among them, ranks renumbered in their old order.
TEST_P(ShrinkTest, SurvivorsShrinkAfterAKillAndGoOn) {
  Options options = FailureOptions(GetParam());
  options.expected_signal = {{2, SIGKILL}};
  RunRanks(
      4,
      [](RankContext& ctx) {
        std::vector<float> buf(kLargeCount, 1.0f);
        if (ctx.rank() == 2) {
          RaiseSoon(SIGKILL);
        }
        int iterations = 0;
        const batonResult_t r = AllReduceUntilError(ctx.comm(), nullptr, buf, 60, &iterations);
        MP_ASSERT_TRUE(ctx, r != batonSuccess) << " no error although rank 2 died";
        ctx.SetStep("batonCommShrink without rank 2");
        const auto start = std::chrono::steady_clock::now();
        int excluded[] = {2};
        batonComm_t shrunk = nullptr;
        MP_ASSERT_OK(
            ctx, batonCommShrink(ctx.comm(), excluded, 1, &shrunk, nullptr, BATON_SHRINK_ABORT));
        const double shrink_s = SecondsSince(start);
        int count = 0, rank = -1;
        MP_EXPECT_OK(ctx, batonCommCount(shrunk, &count));
        MP_EXPECT_OK(ctx, batonCommUserRank(shrunk, &rank));
        MP_EXPECT_EQ(ctx, count, 3);
        MP_EXPECT_EQ(ctx, rank, ctx.rank() < 2 ? ctx.rank() : ctx.rank() - 1);
        // The survivors add their old ranks: 0 + 1 + 3, at every size class.
        for (size_t n : {size_t(1), size_t(4097), size_t(1) << 20}) {
          std::vector<int32_t> v(n, ctx.rank());
          MP_ASSERT_OK(
              ctx, batonAllReduce(v.data(), v.data(), n, batonInt32, batonSum, shrunk, nullptr));
          MP_EXPECT_EQ(ctx, v[0], 4);
          MP_EXPECT_EQ(ctx, v[n - 1], 4);
        }
        if (ctx.rank() == 0) ctx.Log("shrunk in " + std::to_string(shrink_s) + " s");
        MP_EXPECT_OK(ctx, batonCommDestroy(shrunk));
        MP_EXPECT_OK(ctx, batonCommAbort(ctx.TakeComm()));
      },
      options);
}

// A healthy communicator shrinks too (BATON_SHRINK_DEFAULT): rank 3 takes
// no part; the others go on without it, and the parent stays usable.
TEST_P(ShrinkTest, HealthyCommunicatorShrinksByChoice) {
  RunRanks(
      4,
      [](RankContext& ctx) {
        if (ctx.rank() == 3) return;  // the harness destroys its communicator
        int excluded[] = {3};
        batonComm_t shrunk = nullptr;
        MP_ASSERT_OK(
            ctx, batonCommShrink(ctx.comm(), excluded, 1, &shrunk, nullptr, BATON_SHRINK_DEFAULT));
        std::vector<float> v(1000, float(ctx.rank()));
        MP_ASSERT_OK(ctx, batonAllReduce(v.data(), v.data(), v.size(), batonFloat, batonSum, shrunk,
                                         nullptr));
        MP_EXPECT_EQ(ctx, v[999], 3.0f);
        MP_EXPECT_OK(ctx, batonCommDestroy(shrunk));
      },
      FailureOptions(GetParam()));
}

// Bad arguments are errors with a message, and leave the communicator as it was.
TEST(ShrinkArgumentsTest, BadArgumentsAreRefused) {
  RunRanks(
      2,
      [](RankContext& ctx) {
        batonComm_t out = nullptr;
        int other[] = {1 - ctx.rank()};
        int self[] = {ctx.rank()};
        int outside[] = {7};
        int twice[] = {1 - ctx.rank(), 1 - ctx.rank()};
        MP_EXPECT_RESULT(ctx, batonCommShrink(ctx.comm(), other, 1, nullptr, nullptr, 0),
                         batonInvalidArgument);
        MP_EXPECT_RESULT(ctx, batonCommShrink(ctx.comm(), other, -1, &out, nullptr, 0),
                         batonInvalidArgument);
        MP_EXPECT_RESULT(ctx, batonCommShrink(ctx.comm(), nullptr, 1, &out, nullptr, 0),
                         batonInvalidArgument);
        MP_EXPECT_RESULT(ctx, batonCommShrink(ctx.comm(), outside, 1, &out, nullptr, 0),
                         batonInvalidArgument);
        MP_EXPECT_NE(ctx, std::string(ctx.LastError()).find("rank 7"), std::string::npos)
            << ctx.LastError();
        MP_EXPECT_RESULT(ctx, batonCommShrink(ctx.comm(), twice, 2, &out, nullptr, 0),
                         batonInvalidArgument);
        MP_EXPECT_RESULT(ctx, batonCommShrink(ctx.comm(), self, 1, &out, nullptr, 0),
                         batonInvalidUsage);
        MP_EXPECT_RESULT(ctx, batonCommShrink(ctx.comm(), other, 1, &out, nullptr, 5),
                         batonInvalidArgument);
        MP_EXPECT_RESULT(ctx, batonCommShrink(nullptr, other, 1, &out, nullptr, 0),
                         batonInvalidArgument);
        MP_EXPECT_TRUE(ctx, out == nullptr);
        std::vector<float> v(10, 1.0f);
        MP_EXPECT_OK(ctx, batonAllReduce(v.data(), v.data(), v.size(), batonFloat, batonSum,
                                         ctx.comm(), nullptr));
        MP_EXPECT_EQ(ctx, v[9], 2.0f);
      },
      FailureOptions("shm"));
}

INSTANTIATE_TEST_SUITE_P(Transports, ShrinkTest, ::testing::Values("shm", "tcp"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
