// What the failure tests share: their timeout, the big buffer that keeps a
// collective in flight when a rank dies, and the checks after a death.
#pragma once

#include <baton.h>

#include <signal.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "common/mp_harness.h"

namespace baton_test {

constexpr int kTimeoutSeconds = 20;  // BATON_TIMEOUT for these tests
// Survivors must give up within the timeout; the slack covers the work done
// before the death and a loaded 2-core machine.
constexpr double kMaxDetectSeconds = kTimeoutSeconds + 15;
constexpr size_t kLargeCount = size_t{16} << 20;  // 64 MiB of floats

inline Options FailureOptions(const char* transport) {
  Options options;
  options.env = {{"BATON_TRANSPORT", transport},
                 {"BATON_TIMEOUT", std::to_string(kTimeoutSeconds)}};
  options.deadline = std::chrono::seconds(60);
  return options;
}

// Runs allreduces on comm until one fails (directly, or at
// batonStreamSynchronize when a stream is given); returns that error, or
// batonSuccess if none failed within `limit_s`.
inline batonResult_t AllReduceUntilError(batonComm_t comm, batonStream_t stream,
                                         std::vector<float>& buf, double limit_s, int* iterations) {
  const auto start = std::chrono::steady_clock::now();
  batonResult_t r = batonSuccess;
  *iterations = 0;
  while (r == batonSuccess && SecondsSince(start) < limit_s) {
    // Max keeps the values finite however many iterations run.
    r = batonAllReduce(buf.data(), buf.data(), buf.size(), batonFloat, batonMax, comm, stream);
    if (r == batonSuccess && stream != nullptr) r = batonStreamSynchronize(stream);
    ++*iterations;
  }
  return r;
}

// After a peer's death: the error reached the caller in time, the communicator
// reports it, and batonCommAbort returns.
inline void ExpectFailedThenAbort(RankContext& ctx, batonResult_t r, double elapsed, int iterations,
                                  bool on_stream) {
  MP_EXPECT_NE(ctx, r, batonSuccess) << " no error after " << iterations << " allreduces in "
                                     << elapsed << " s although a peer died";
  MP_EXPECT_LT(ctx, elapsed, kMaxDetectSeconds)
      << " s to report " << ResultName(r) << " with BATON_TIMEOUT=" << kTimeoutSeconds;
  MP_EXPECT_TRUE(ctx, r != batonInvalidArgument && r != batonInvalidUsage)
      << " a dead peer is not a usage error: " << ResultName(r);
  MP_EXPECT_NE(ctx, std::string(ctx.LastError()), "") << " no message for " << ResultName(r);
  if (ctx.rank() == 0) {
    ctx.Log(ResultName(r) + " after " + std::to_string(iterations) + " allreduces in " +
            std::to_string(elapsed) + " s: " + ctx.LastError());
  }
  batonResult_t async = batonSuccess;
  MP_EXPECT_OK(ctx, batonCommGetAsyncError(ctx.comm(), &async));
  // A failed stream operation is an asynchronous error and must stick.
  if (on_stream) MP_EXPECT_NE(ctx, async, batonSuccess);
  const auto abort_start = std::chrono::steady_clock::now();
  MP_EXPECT_OK(ctx, batonCommAbort(ctx.TakeComm()));
  MP_EXPECT_LT(ctx, SecondsSince(abort_start), 10.0) << " s in batonCommAbort";
}

// One rank's part in a late-rank test, with BATON_TIMEOUT=timeout_s: an
// allreduce of `count` floats that every rank joins, then rank `late`
// sleeps past the timeout while the others call the next one, whose timeout
// must name it as the rank that has not entered allreduce #2, with its last
// call, as the executor's verdict does; then abort.
inline void LateRankIsNamed(RankContext& ctx, size_t count, int timeout_s, int late) {
  std::vector<float> buf(count, 1.0f);
  MP_ASSERT_OK(ctx, batonAllReduce(buf.data(), buf.data(), buf.size(), batonFloat32, batonSum,
                                   ctx.comm(), nullptr));
  if (ctx.rank() == late) {
    std::this_thread::sleep_for(std::chrono::seconds(timeout_s + 3));
  } else {
    const auto start = std::chrono::steady_clock::now();
    const batonResult_t r = batonAllReduce(buf.data(), buf.data(), buf.size(), batonFloat32,
                                           batonSum, ctx.comm(), nullptr);
    const std::string message = ctx.LastError();
    // Appended piecewise: g++ 12 at -O2 warns (-Wrestrict, a false positive)
    // on `"literal" + std::to_string(...)` once inlined here.
    std::string who = "rank ";
    who += std::to_string(late);
    who += " (pid";
    std::string timeout_words = " ";
    timeout_words += std::to_string(timeout_s);
    timeout_words += " s (BATON_TIMEOUT)";
    MP_EXPECT_EQ(ctx, r, batonTimeout) << message;
    MP_EXPECT_LT(ctx, SecondsSince(start), timeout_s + 5.0) << message;
    MP_EXPECT_NE(ctx, message.find(timeout_words), std::string::npos) << message;
    MP_EXPECT_NE(ctx, message.find(who), std::string::npos) << message;
    MP_EXPECT_NE(ctx, message.find("has not entered allreduce #2"), std::string::npos) << message;
    MP_EXPECT_NE(ctx, message.find("its last call is allreduce #1"), std::string::npos) << message;
    if (ctx.rank() == 0) ctx.Log(message);
  }
  MP_EXPECT_OK(ctx, batonCommAbort(ctx.TakeComm()));
}

// Raises `sig` in this process after 50 ms, from a thread of its own, so
// that it lands in the middle of whatever the rank is doing by then.
inline void RaiseSoon(int sig) {
  std::thread([sig] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    raise(sig);
  }).detach();
}

}  // namespace baton_test
