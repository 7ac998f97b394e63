// Host-stream events (batonEvent*): several collectives in flight on one
// host stream, each waited for through its own event and checked against
// the sum computed here; queries before and after; errors reported by the
// event recorded after the failing call only; destroy with work pending;
// batonStreamWaitEvent between two streams; bad arguments.
#include <baton.h>
#include <stdint.h>

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

// Rank r's input element i of call c, and the allreduce (sum) of it.
int64_t Input(int c, int r, size_t i) {
  return static_cast<int64_t>((i * 7 + c) % 1001) * (r + 1);
}
int64_t Expected(int c, int n, size_t i) {
  return static_cast<int64_t>((i * 7 + c) % 1001) * n * (n + 1) / 2;
}

size_t CountWrong(const std::vector<int64_t>& v, int c, int n) {
  size_t bad = 0;
  for (size_t i = 0; i < v.size(); ++i) bad += v[i] != Expected(c, n, i);
  return bad;
}

class EventsTest : public ::testing::TestWithParam<int> {};

// Calls of sizes 0, 1, odd and large queued on one stream with an event
// after each. Rank 1 joins late (a flag in harness memory), so rank 0 sees
// the events in progress; then each event, waited for in order, means its
// call (and the ones before) is complete and right.
TEST_P(EventsTest, OneEventPerCall) {
  RunRanks(GetParam(), [](RankContext& ctx) {
    auto* queried = static_cast<std::atomic<int>*>(ctx.shared());
    const int n = ctx.nranks();
    const std::vector<size_t> counts = {1, 0, 1001, size_t{1} << 20, 17};
    const int calls = static_cast<int>(counts.size());
    std::vector<std::vector<int64_t>> bufs(calls);
    for (int c = 0; c < calls; ++c) {
      bufs[c].resize(counts[c]);
      for (size_t i = 0; i < counts[c]; ++i) bufs[c][i] = Input(c, ctx.rank(), i);
    }
    batonStream_t s = nullptr;
    MP_ASSERT_OK(ctx, batonStreamCreate(&s));
    std::vector<batonEvent_t> events(calls);
    for (auto& e : events) MP_ASSERT_OK(ctx, batonEventCreate(&e));
    // Never recorded: complete, as a cudaEvent.
    MP_EXPECT_OK(ctx, batonEventQuery(events[0]));
    MP_EXPECT_OK(ctx, batonEventSynchronize(events[0]));
    if (ctx.rank() == 1) {
      while (queried->load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ctx.SetStep("queue the calls and their events");
    for (int c = 0; c < calls; ++c) {
      MP_EXPECT_OK(ctx, batonAllReduce(bufs[c].data(), bufs[c].data(), counts[c], batonInt64,
                                       batonSum, ctx.comm(), s));
      MP_EXPECT_OK(ctx, batonEventRecord(events[c], s));
    }
    if (ctx.rank() == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      for (int c = 0; c < calls; ++c)
        MP_EXPECT_RESULT(ctx, batonEventQuery(events[c]), batonInProgress) << " event " << c;
      queried->store(1);
    }
    for (int c = 0; c < calls; ++c) {
      ctx.SetStep("batonEventSynchronize of call " + std::to_string(c));
      MP_EXPECT_OK(ctx, batonEventSynchronize(events[c]));
      // Every call up to c is complete.
      for (int d = 0; d <= c; ++d) {
        MP_EXPECT_OK(ctx, batonEventQuery(events[d]));
        MP_EXPECT_EQ(ctx, CountWrong(bufs[d], d, n), 0u)
            << " wrong elements in call " << d << " after event " << c;
      }
    }
    MP_EXPECT_OK(ctx, batonStreamQuery(s));
    MP_EXPECT_OK(ctx, batonStreamSynchronize(s));
    // Recorded again on an idle stream: complete as soon as the worker passes it.
    MP_EXPECT_OK(ctx, batonEventRecord(events[0], s));
    MP_EXPECT_OK(ctx, batonEventSynchronize(events[0]));
    // On the NULL stream: complete at once.
    MP_EXPECT_OK(ctx, batonEventRecord(events[1], nullptr));
    MP_EXPECT_OK(ctx, batonEventQuery(events[1]));
    for (auto e : events) MP_EXPECT_OK(ctx, batonEventDestroy(e));
    MP_EXPECT_OK(ctx, batonStreamDestroy(s));
  });
}

// An event destroyed while its work is queued: the work goes on and the
// stream still reports it; a second stream ordered after the first with
// batonStreamWaitEvent reads what the first wrote.
TEST_P(EventsTest, DestroyPendingAndWaitEvent) {
  RunRanks(GetParam(), [](RankContext& ctx) {
    const int n = ctx.nranks();
    constexpr size_t kCount = (size_t{1} << 18) + 3;
    std::vector<int64_t> a(kCount), b(kCount, -1);
    for (size_t i = 0; i < kCount; ++i) a[i] = Input(3, ctx.rank(), i);
    batonStream_t s1 = nullptr, s2 = nullptr;
    MP_ASSERT_OK(ctx, batonStreamCreate(&s1));
    MP_ASSERT_OK(ctx, batonStreamCreate(&s2));
    batonEvent_t done = nullptr, gone = nullptr, second = nullptr;
    MP_ASSERT_OK(ctx, batonEventCreate(&done));
    MP_ASSERT_OK(ctx, batonEventCreate(&gone));
    MP_ASSERT_OK(ctx, batonEventCreate(&second));
    ctx.SetStep("allreduce on s1, event destroyed while pending");
    MP_EXPECT_OK(ctx,
                 batonAllReduce(a.data(), a.data(), kCount, batonInt64, batonSum, ctx.comm(), s1));
    MP_EXPECT_OK(ctx, batonEventRecord(gone, s1));
    MP_EXPECT_OK(ctx, batonEventDestroy(gone));
    MP_EXPECT_OK(ctx, batonEventRecord(done, s1));
    ctx.SetStep("s2 waits for s1's event, then reduces its output");
    MP_EXPECT_OK(ctx, batonStreamWaitEvent(s2, done));
    // Sum over ranks of the (equal) reduced a: n times it.
    MP_EXPECT_OK(ctx,
                 batonAllReduce(a.data(), b.data(), kCount, batonInt64, batonSum, ctx.comm(), s2));
    MP_EXPECT_OK(ctx, batonEventRecord(second, s2));
    MP_EXPECT_OK(ctx, batonEventSynchronize(second));
    MP_EXPECT_OK(ctx, batonEventQuery(done));
    size_t bad = 0;
    for (size_t i = 0; i < kCount; ++i) bad += b[i] != Expected(3, n, i) * n;
    MP_EXPECT_EQ(ctx, bad, 0u) << " wrong elements after the wait";
    MP_EXPECT_EQ(ctx, CountWrong(a, 3, n), 0u);
    MP_EXPECT_OK(ctx, batonStreamSynchronize(s1));
    MP_EXPECT_OK(ctx, batonStreamSynchronize(s2));
    MP_EXPECT_OK(ctx, batonEventDestroy(done));
    MP_EXPECT_OK(ctx, batonEventDestroy(second));
    MP_EXPECT_OK(ctx, batonStreamDestroy(s1));
    MP_EXPECT_OK(ctx, batonStreamDestroy(s2));
  });
}

// A call that fails (counts differ; BATON_CHECK=1 makes every rank see it)
// between two good ones: the event after it reports the mismatch, the one
// before is a success with right numbers, an event with nothing new to
// capture is a success, and a call on the failed communicator fails under
// its own event (or is refused at once). The stream still reports the first error once.
TEST_P(EventsTest, ErrorsReachTheEventAfterTheCall) {
  Options options;
  options.env = {{"BATON_CHECK", "1"}, {"BATON_TIMEOUT", "20"}};
  RunRanks(
      GetParam(),
      [](RankContext& ctx) {
        const int n = ctx.nranks();
        std::vector<int64_t> good(1001), bad(64);
        for (size_t i = 0; i < good.size(); ++i) good[i] = Input(5, ctx.rank(), i);
        batonStream_t s = nullptr;
        MP_ASSERT_OK(ctx, batonStreamCreate(&s));
        batonEvent_t e[4];
        for (auto& x : e) MP_ASSERT_OK(ctx, batonEventCreate(&x));
        MP_EXPECT_OK(ctx, batonAllReduce(good.data(), good.data(), good.size(), batonInt64,
                                         batonSum, ctx.comm(), s));
        MP_EXPECT_OK(ctx, batonEventRecord(e[0], s));
        const size_t count = ctx.rank() == 0 ? 63 : 64;
        MP_EXPECT_OK(ctx, batonAllReduce(bad.data(), bad.data(), count, batonInt64, batonSum,
                                         ctx.comm(), s));
        MP_EXPECT_OK(ctx, batonEventRecord(e[1], s));
        MP_EXPECT_OK(ctx, batonEventRecord(e[2], s));
        // Refused at once if the failure is known by then, else it fails on the stream.
        const batonResult_t queued =
            batonAllReduce(bad.data(), bad.data(), 64, batonInt64, batonSum, ctx.comm(), s);
        MP_EXPECT_OK(ctx, batonEventRecord(e[3], s));
        ctx.SetStep("events after the failing call");
        MP_EXPECT_OK(ctx, batonEventSynchronize(e[0]));
        MP_EXPECT_EQ(ctx, CountWrong(good, 5, n), 0u);
        MP_EXPECT_RESULT(ctx, batonEventSynchronize(e[1]), batonInvalidUsage);
        const std::string message = batonGetLastError(nullptr);
        MP_EXPECT_NE(ctx, message.find("mismatch"), std::string::npos) << message;
        MP_EXPECT_RESULT(ctx, batonEventQuery(e[1]), batonInvalidUsage);
        MP_EXPECT_OK(ctx, batonEventSynchronize(e[2]));
        const batonResult_t after = batonEventSynchronize(e[3]);
        if (queued == batonSuccess) {
          MP_EXPECT_TRUE(ctx, after != batonSuccess && after != batonInProgress)
              << " the call on the failed communicator: " << ResultName(after);
        } else {
          MP_EXPECT_OK(ctx, after) << " (nothing was queued after e[2])";
        }
        MP_EXPECT_RESULT(ctx, batonStreamSynchronize(s), batonInvalidUsage);
        MP_EXPECT_OK(ctx, batonStreamSynchronize(s));
        for (auto x : e) MP_EXPECT_OK(ctx, batonEventDestroy(x));
        MP_EXPECT_OK(ctx, batonStreamDestroy(s));
        MP_EXPECT_OK(ctx, batonCommAbort(ctx.TakeComm()));
      },
      options);
}

// batonCommAbort ends a call that waits for a peer that never comes: the
// event after it reports an error long before BATON_TIMEOUT.
TEST(EventsAbort, AbortEndsTheWait) {
  Options options;
  options.env = {{"BATON_TIMEOUT", "60"}};
  RunRanks(
      2,
      [](RankContext& ctx) {
        auto* aborted = static_cast<std::atomic<int>*>(ctx.shared());
        if (ctx.rank() == 1) {
          while (aborted->load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
          MP_EXPECT_OK(ctx, batonCommAbort(ctx.TakeComm()));
          return;
        }
        std::vector<int64_t> v(4096, 1);
        batonStream_t s = nullptr;
        batonEvent_t e = nullptr;
        MP_ASSERT_OK(ctx, batonStreamCreate(&s));
        MP_ASSERT_OK(ctx, batonEventCreate(&e));
        MP_EXPECT_OK(
            ctx, batonAllReduce(v.data(), v.data(), v.size(), batonInt64, batonSum, ctx.comm(), s));
        MP_EXPECT_OK(ctx, batonEventRecord(e, s));
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        MP_EXPECT_RESULT(ctx, batonEventQuery(e), batonInProgress);
        const auto start = std::chrono::steady_clock::now();
        MP_EXPECT_OK(ctx, batonCommAbort(ctx.TakeComm()));
        const batonResult_t r = batonEventSynchronize(e);
        MP_EXPECT_TRUE(ctx, r != batonSuccess && r != batonInProgress) << ResultName(r);
        MP_EXPECT_LT(ctx, baton_test::SecondsSince(start), 10.0);
        aborted->store(1);
        MP_EXPECT_RESULT(ctx, batonEventQuery(e), r);
        MP_EXPECT_EQ(ctx, batonStreamSynchronize(s), r);
        MP_EXPECT_OK(ctx, batonEventDestroy(e));
        MP_EXPECT_OK(ctx, batonStreamDestroy(s));
      },
      options);
}

INSTANTIATE_TEST_SUITE_P(Ranks, EventsTest, ::testing::Values(2, 3, 4),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

// Bad arguments give batonInvalidArgument with a message, never a crash.
TEST(EventsArgs, BadArgumentsAreRejected) {
  Options options;
  options.init_comm = false;
  options.unique_id = false;
  options.deadline = std::chrono::seconds(60);
  RunRanks(
      1,
      [](RankContext& ctx) {
        auto expect_invalid = [&](const char* call, batonResult_t r) {
          MP_EXPECT_EQ(ctx, r, batonInvalidArgument) << " (" << ResultName(r) << ") from " << call;
          const char* msg = batonGetLastError(nullptr);
          MP_EXPECT_TRUE(ctx, msg != nullptr && msg[0] != '\0') << " no message after " << call;
        };
        batonEvent_t e = nullptr, dead = nullptr;
        batonStream_t s = nullptr;
        MP_ASSERT_OK(ctx, batonStreamCreate(&s));
        MP_ASSERT_OK(ctx, batonEventCreate(&e));
        MP_ASSERT_OK(ctx, batonEventCreate(&dead));
        MP_ASSERT_OK(ctx, batonEventDestroy(dead));
        // Stands for a cudaStream_t or any pointer that is not a host stream.
        int not_a_stream = 0;
        auto foreign = reinterpret_cast<batonStream_t>(&not_a_stream);
        expect_invalid("create NULL", batonEventCreate(nullptr));
        for (batonEvent_t bad : {static_cast<batonEvent_t>(nullptr), dead}) {
          expect_invalid("record", batonEventRecord(bad, s));
          expect_invalid("query", batonEventQuery(bad));
          expect_invalid("synchronize", batonEventSynchronize(bad));
          expect_invalid("destroy", batonEventDestroy(bad));
          expect_invalid("stream wait", batonStreamWaitEvent(s, bad));
        }
        expect_invalid("record on a foreign stream", batonEventRecord(e, foreign));
        expect_invalid("wait on the NULL stream", batonStreamWaitEvent(nullptr, e));
        expect_invalid("wait on a foreign stream", batonStreamWaitEvent(foreign, e));
        // The event survived the bad calls.
        MP_EXPECT_OK(ctx, batonEventRecord(e, s));
        MP_EXPECT_OK(ctx, batonStreamWaitEvent(s, e));
        MP_EXPECT_OK(ctx, batonEventSynchronize(e));
        MP_EXPECT_OK(ctx, batonStreamSynchronize(s));
        MP_EXPECT_OK(ctx, batonEventDestroy(e));
        MP_EXPECT_OK(ctx, batonStreamDestroy(s));
      },
      options);
}

}  // namespace
