// batonCommSetCallTimeout: a call issued with its own timeout fails after
// that long without progress (batonTimeout), whatever the communicator's own
// timeout; a call issued before or after keeps the timeout it was issued
// with; a negative value restores the communicator's; bad arguments are
// refused. The ranks that call wait for one that never does.
#include <baton.h>
#include <math.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/mp_harness.h"

namespace {

using baton_test::Options;
using baton_test::RankContext;
using baton_test::ResultName;
using baton_test::RunRanks;

constexpr int kCommTimeout = 60;      // BATON_TIMEOUT: far longer than any wait here
constexpr double kCallTimeout = 1.0;  // the calls' own

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The rank that never calls: waits (bounded) until the `callers` others
// are done with their failed call, then leaves without a call of its own.
void StayOut(RankContext& ctx, int callers) {
  auto* done = static_cast<std::atomic<int>*>(ctx.shared());
  const auto start = std::chrono::steady_clock::now();
  while (done->load() < callers && SecondsSince(start) < 60)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  MP_EXPECT_EQ(ctx, done->load(), callers);
  MP_EXPECT_OK(ctx, batonCommAbort(ctx.TakeComm()));
}

void Done(RankContext& ctx) {
  static_cast<std::atomic<int>*>(ctx.shared())->fetch_add(1);
}

Options LongCommTimeout(const char* transport) {
  Options options;
  options.env = {{"BATON_TIMEOUT", std::to_string(kCommTimeout)},
                 {"BATON_TRANSPORT", transport},
                 {"BATON_SOCKET_IFNAME", "lo"}};
  options.deadline = std::chrono::seconds(90);
  return options;
}

class CallTimeout : public ::testing::TestWithParam<const char*> {};

// Ranks 0 and 1 allreduce with a 1 s call timeout while rank 2 never calls:
// both fail with batonTimeout within a few seconds (not the communicator's
// 60) and say whose timeout it was; the communicator is then failed, as
// after any timeout.
TEST_P(CallTimeout, ExpiresLongBeforeTheCommunicators) {
  RunRanks(
      3,
      [](RankContext& ctx) {
        std::vector<float> buf(1001, 1.0f);
        if (ctx.rank() == 2) return StayOut(ctx, 2);
        MP_ASSERT_OK(ctx, batonCommSetCallTimeout(ctx.comm(), kCallTimeout));
        const auto start = std::chrono::steady_clock::now();
        const batonResult_t r = batonAllReduce(buf.data(), buf.data(), buf.size(), batonFloat32,
                                               batonSum, ctx.comm(), nullptr);
        const double elapsed = SecondsSince(start);
        MP_EXPECT_TRUE(ctx, r == batonTimeout || r == batonRemoteError)
            << ResultName(r) << ": " << ctx.LastError();
        MP_EXPECT_LT(ctx, kCallTimeout * 0.9, elapsed);
        MP_EXPECT_LT(ctx, elapsed, kCallTimeout + 8.0) << "s: the communicator's timeout ran";
        // The rank that timed out first names the call's timeout; the other
        // may fail with its note instead.
        if (r == batonTimeout)
          MP_EXPECT_NE(ctx, ctx.LastError().find("the call's timeout"), std::string::npos)
              << ctx.LastError();
        batonResult_t async = batonSuccess;
        MP_EXPECT_OK(ctx, batonCommGetAsyncError(ctx.comm(), &async));
        MP_EXPECT_NE(ctx, async, batonSuccess);
        MP_EXPECT_OK(ctx, batonCommAbort(ctx.TakeComm()));
        Done(ctx);
      },
      LongCommTimeout(GetParam()));
}

// A call queued on a stream keeps the timeout it was issued with: rank 0
// queues an allreduce with a 1 s timeout, restores the communicator's
// (negative) at once, and the queued call still fails after about 1 s.
TEST_P(CallTimeout, QueuedCallKeepsItsTimeout) {
  RunRanks(
      2,
      [](RankContext& ctx) {
        if (ctx.rank() == 1) return StayOut(ctx, 1);
        std::vector<float> buf(7, 1.0f);
        batonStream_t stream = nullptr;
        MP_ASSERT_OK(ctx, batonStreamCreate(&stream));
        MP_ASSERT_OK(ctx, batonCommSetCallTimeout(ctx.comm(), kCallTimeout));
        const auto start = std::chrono::steady_clock::now();
        const batonResult_t queued = batonAllReduce(buf.data(), buf.data(), buf.size(),
                                                    batonFloat32, batonSum, ctx.comm(), stream);
        MP_EXPECT_OK(ctx, batonCommSetCallTimeout(ctx.comm(), -1));
        const batonResult_t r = queued != batonSuccess ? queued : batonStreamSynchronize(stream);
        const double elapsed = SecondsSince(start);
        MP_EXPECT_NE(ctx, r, batonSuccess);
        MP_EXPECT_LT(ctx, elapsed, kCallTimeout + 8.0) << "s: the queued call lost its timeout";
        MP_EXPECT_OK(ctx, batonCommAbort(ctx.TakeComm()));
        batonStreamDestroy(stream);
        Done(ctx);
      },
      LongCommTimeout(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Transports, CallTimeout, ::testing::Values("shm", "tcp"),
                         [](const auto& info) { return std::string(info.param); });

// With every rank calling, a short call timeout changes nothing (the calls
// make progress); negative restores the communicator's, 0 means forever;
// point-to-point calls and barriers take it too. Right results throughout.
TEST(CallTimeoutSettings, CallsThatProgressSucceed) {
  RunRanks(4, [](RankContext& ctx) {
    const int n = ctx.nranks(), me = ctx.rank();
    // 5 s: long enough for 4 ranks sharing 2 cores to keep making progress.
    for (double seconds : {5.0, 0.0, -1.0}) {
      MP_ASSERT_OK(ctx, batonCommSetCallTimeout(ctx.comm(), seconds));
      std::vector<double> buf(4099, me + 1.0);
      MP_ASSERT_OK(ctx, batonAllReduce(buf.data(), buf.data(), buf.size(), batonFloat64, batonSum,
                                       ctx.comm(), nullptr))
          << seconds << ": " << ctx.LastError();
      for (double v : buf) MP_ASSERT_EQ(ctx, v, n * (n + 1) / 2.0);
      double got = -1, mine = me;
      MP_ASSERT_OK(ctx, batonGroupStart());
      MP_ASSERT_OK(ctx, batonSend(&mine, 1, batonFloat64, (me + 1) % n, ctx.comm(), nullptr));
      MP_ASSERT_OK(ctx, batonRecv(&got, 1, batonFloat64, (me + n - 1) % n, ctx.comm(), nullptr));
      MP_ASSERT_OK(ctx, batonGroupEnd()) << ctx.LastError();
      MP_EXPECT_EQ(ctx, got, static_cast<double>((me + n - 1) % n));
      MP_ASSERT_OK(ctx, batonBarrier(ctx.comm(), nullptr));
    }
  });
}

TEST(CallTimeoutSettings, BadArguments) {
  RunRanks(1, [](RankContext& ctx) {
    MP_EXPECT_EQ(ctx, batonCommSetCallTimeout(ctx.comm(), NAN), batonInvalidArgument);
    MP_EXPECT_EQ(ctx, batonCommSetCallTimeout(nullptr, 1.0), batonInvalidArgument);
    MP_EXPECT_OK(ctx, batonCommSetCallTimeout(ctx.comm(), INFINITY));
    float x = 2;
    MP_EXPECT_OK(ctx, batonAllReduce(&x, &x, 1, batonFloat32, batonSum, ctx.comm(), nullptr));
    MP_EXPECT_EQ(ctx, x, 2.0f);
  });
}

}  // namespace
