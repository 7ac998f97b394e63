// Tests of the public API surface: version and error strings, argument
// validation of every entry point, communicator queries, host streams,
// groups, batonCommSplit, use after destroy and init that cannot complete.
#include <baton.h>
#include <stdint.h>
#include <string.h>

#include <atomic>
#include <chrono>
#include <set>
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
using baton_test::SecondsSince;

// Runs body in one child process without a communicator, so that a crash on
// a bad argument fails the test instead of killing the test binary.
void RunIsolated(const std::function<void(RankContext&)>& body) {
  Options options;
  options.init_comm = false;
  options.unique_id = false;
  options.deadline = std::chrono::seconds(60);
  RunRanks(1, body, options);
}

TEST(ApiTest, Version) {
  int version = -1;
  ASSERT_EQ(batonGetVersion(&version), batonSuccess);
  EXPECT_EQ(version, BATON_VERSION_CODE);
  EXPECT_EQ(version, BATON_MAJOR * 10000 + BATON_MINOR * 100 + BATON_PATCH);
}

TEST(ApiTest, ErrorStringsAreDistinct) {
  std::set<std::string> seen;
  for (int r = 0; r < batonNumResults; ++r) {
    const char* s = batonGetErrorString(static_cast<batonResult_t>(r));
    ASSERT_NE(s, nullptr) << "code " << r;
    EXPECT_NE(s[0], '\0') << "code " << r;
    EXPECT_TRUE(seen.insert(s).second) << "code " << r << " repeats \"" << s << "\"";
  }
  // Out of range codes still get a string (callers print whatever they got).
  for (int r : {static_cast<int>(batonNumResults), 42, -1}) {
    const char* s = batonGetErrorString(static_cast<batonResult_t>(r));
    ASSERT_NE(s, nullptr) << "code " << r;
    EXPECT_NE(s[0], '\0') << "code " << r;
  }
}

TEST(ApiTest, LastErrorIsNeverNull) {
  ASSERT_NE(batonGetLastError(nullptr), nullptr);
  RunIsolated([](RankContext& ctx) {
    MP_EXPECT_TRUE(ctx, batonGetLastError(nullptr) != nullptr);
    // A failure without a communicator leaves its reason in the thread's slot.
    MP_EXPECT_RESULT(ctx, batonCommCount(nullptr, nullptr), batonInvalidArgument);
    const char* msg = batonGetLastError(nullptr);
    MP_ASSERT_TRUE(ctx, msg != nullptr);
    MP_EXPECT_NE(ctx, std::string(msg), "");
  });
}

// Two results side by side (one printf of both): asking about one source
// must not move or overwrite the text returned for another.
TEST(ApiTest, LastErrorTextsStayValidSideBySide) {
  RunRanks(1, [](RankContext& ctx) {
    float x = 0;
    MP_EXPECT_RESULT(
        ctx,
        batonAllReduce(&x, &x, 1, static_cast<batonDataType_t>(99), batonSum, ctx.comm(), nullptr),
        batonInvalidArgument);
    const char* of_comm = batonGetLastError(ctx.comm());
    const std::string comm_text = of_comm;
    MP_EXPECT_RESULT(ctx, batonCommCount(nullptr, nullptr), batonInvalidArgument);
    const char* of_thread = batonGetLastError(nullptr);
    const std::string thread_text = of_thread;
    MP_EXPECT_NE(ctx, comm_text, thread_text);
    MP_EXPECT_TRUE(ctx, comm_text.find("datatype") != std::string::npos);
    const char* again = batonGetLastError(ctx.comm());
    MP_EXPECT_EQ(ctx, std::string(of_comm), comm_text);
    MP_EXPECT_EQ(ctx, std::string(of_thread), thread_text);
    MP_EXPECT_TRUE(ctx, again == of_comm);
  });
}

TEST(ApiTest, NullOutPointersWithoutComm) {
  RunIsolated([](RankContext& ctx) {
    MP_EXPECT_RESULT(ctx, batonGetVersion(nullptr), batonInvalidArgument);
    MP_EXPECT_RESULT(ctx, batonGetUniqueId(nullptr), batonInvalidArgument);
    MP_EXPECT_RESULT(ctx, batonStreamCreate(nullptr), batonInvalidArgument);
    MP_EXPECT_RESULT(ctx, batonCommInitFromEnv(nullptr), batonInvalidArgument);
  });
}

// NULL is not a stream to the stream functions (it is only the "synchronous"
// stream argument of collectives).
TEST(ApiTest, NullStreamArguments) {
  RunIsolated([](RankContext& ctx) {
    MP_EXPECT_RESULT(ctx, batonStreamSynchronize(nullptr), batonInvalidArgument);
    MP_EXPECT_RESULT(ctx, batonStreamQuery(nullptr), batonInvalidArgument);
    MP_EXPECT_RESULT(ctx, batonStreamDestroy(nullptr), batonInvalidArgument);
  });
}

TEST(ApiTest, IdleStream) {
  RunIsolated([](RankContext& ctx) {
    batonStream_t s = nullptr;
    MP_ASSERT_OK(ctx, batonStreamCreate(&s));
    MP_ASSERT_TRUE(ctx, s != nullptr);
    MP_EXPECT_OK(ctx, batonStreamQuery(s));
    MP_EXPECT_OK(ctx, batonStreamSynchronize(s));
    MP_EXPECT_OK(ctx, batonStreamSynchronize(s));
    MP_EXPECT_OK(ctx, batonStreamQuery(s));
    MP_EXPECT_OK(ctx, batonStreamDestroy(s));
    // Several streams at once are independent objects.
    batonStream_t a = nullptr, b = nullptr;
    MP_ASSERT_OK(ctx, batonStreamCreate(&a));
    MP_ASSERT_OK(ctx, batonStreamCreate(&b));
    MP_EXPECT_NE(ctx, static_cast<void*>(a), static_cast<void*>(b));
    MP_EXPECT_OK(ctx, batonStreamDestroy(b));
    MP_EXPECT_OK(ctx, batonStreamQuery(a));
    MP_EXPECT_OK(ctx, batonStreamDestroy(a));
    // A destroyed stream is rejected right after this thread used it.
    MP_EXPECT_RESULT(ctx, batonStreamQuery(a), batonInvalidArgument);
    MP_EXPECT_RESULT(ctx, batonStreamSynchronize(a), batonInvalidArgument);
    MP_EXPECT_RESULT(ctx, batonStreamDestroy(a), batonInvalidArgument);
  });
}

TEST(ApiTest, GroupStartEndBalance) {
  RunIsolated([](RankContext& ctx) {
    MP_EXPECT_RESULT(ctx, batonGroupEnd(), batonInvalidUsage);
    MP_EXPECT_NE(ctx, std::string(batonGetLastError(nullptr)), "");
    MP_EXPECT_OK(ctx, batonGroupStart());
    MP_EXPECT_OK(ctx, batonGroupEnd());
    // Nesting: only the outermost End launches; an extra End is still misuse.
    MP_EXPECT_OK(ctx, batonGroupStart());
    MP_EXPECT_OK(ctx, batonGroupStart());
    MP_EXPECT_OK(ctx, batonGroupEnd());
    MP_EXPECT_OK(ctx, batonGroupEnd());
    MP_EXPECT_RESULT(ctx, batonGroupEnd(), batonInvalidUsage);
    // Misuse did not leave the group state corrupted.
    MP_EXPECT_OK(ctx, batonGroupStart());
    MP_EXPECT_OK(ctx, batonGroupEnd());
  });
}

TEST(ApiTest, CommQueries) {
  RunRanks(3, [](RankContext& ctx) {
    int count = -1, rank = -1;
    MP_EXPECT_OK(ctx, batonCommCount(ctx.comm(), &count));
    MP_EXPECT_EQ(ctx, count, 3);
    MP_EXPECT_OK(ctx, batonCommUserRank(ctx.comm(), &rank));
    MP_EXPECT_EQ(ctx, rank, ctx.rank());
    batonResult_t async = batonInternalError;
    MP_EXPECT_OK(ctx, batonCommGetAsyncError(ctx.comm(), &async));
    MP_EXPECT_EQ(ctx, async, batonSuccess);
  });
}

// A queued allreduce cannot finish while a peer has not called it yet, so
// batonStreamQuery must say batonInProgress; after synchronizing, success.
// Rank 1 joins only after rank 0 has queried (a flag in harness memory).
TEST(ApiTest, StreamQueryReportsPendingWork) {
  RunRanks(2, [](RankContext& ctx) {
    auto* queried = static_cast<std::atomic<int>*>(ctx.shared());
    batonStream_t s = nullptr;
    MP_ASSERT_OK(ctx, batonStreamCreate(&s));
    int64_t v = ctx.rank() + 5;
    if (ctx.rank() == 1) {
      while (queried->load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    MP_EXPECT_OK(ctx, batonAllReduce(&v, &v, 1, batonInt64, batonSum, ctx.comm(), s));
    if (ctx.rank() == 0) {
      // Give the stream's worker time to start (and block in) the call.
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      MP_EXPECT_RESULT(ctx, batonStreamQuery(s), batonInProgress);
      queried->store(1);
    }
    MP_EXPECT_OK(ctx, batonStreamSynchronize(s));
    MP_EXPECT_OK(ctx, batonStreamQuery(s));
    MP_EXPECT_EQ(ctx, v, int64_t{11});
    MP_EXPECT_OK(ctx, batonStreamDestroy(s));
  });
}

// batonStreamDestroy and batonCommDestroy both wait for queued work: the
// result of an allreduce queued just before either must be complete after.
TEST(ApiTest, DestroyWaitsForQueuedWork) {
  RunRanks(3, [](RankContext& ctx) {
    const int n = ctx.nranks();
    constexpr size_t kCount = size_t{1} << 20;
    std::vector<int32_t> a(kCount), b(kCount);
    for (size_t i = 0; i < kCount; ++i) {
      a[i] = static_cast<int32_t>(i % 1000) + ctx.rank();
      b[i] = static_cast<int32_t>(i % 7) * (ctx.rank() + 1);
    }
    batonStream_t s = nullptr;
    MP_ASSERT_OK(ctx, batonStreamCreate(&s));
    ctx.SetStep("allreduce queued, then batonStreamDestroy");
    MP_EXPECT_OK(ctx,
                 batonAllReduce(a.data(), a.data(), kCount, batonInt32, batonSum, ctx.comm(), s));
    MP_EXPECT_OK(ctx, batonStreamDestroy(s));
    size_t bad_a = 0;
    for (size_t i = 0; i < kCount; ++i) {
      bad_a += a[i] != static_cast<int32_t>(i % 1000) * n + n * (n - 1) / 2;
    }
    MP_EXPECT_EQ(ctx, bad_a, 0u) << " elements not reduced after batonStreamDestroy returned";

    MP_ASSERT_OK(ctx, batonStreamCreate(&s));
    ctx.SetStep("allreduce queued, then batonCommDestroy");
    MP_EXPECT_OK(ctx,
                 batonAllReduce(b.data(), b.data(), kCount, batonInt32, batonSum, ctx.comm(), s));
    MP_EXPECT_OK(ctx, batonCommDestroy(ctx.TakeComm()));
    size_t bad_b = 0;
    for (size_t i = 0; i < kCount; ++i) {
      bad_b += b[i] != static_cast<int32_t>(i % 7) * n * (n + 1) / 2;
    }
    MP_EXPECT_EQ(ctx, bad_b, 0u) << " elements not reduced after batonCommDestroy returned";
    MP_EXPECT_OK(ctx, batonStreamSynchronize(s));
    MP_EXPECT_OK(ctx, batonStreamDestroy(s));
  });
}

// Checks that `r` is batonInvalidArgument and that a reason was recorded
// (on comm, or in the thread's slot when comm is NULL or invalid).
void ExpectInvalid(RankContext& ctx, const char* call, batonResult_t r, batonComm_t comm) {
  MP_EXPECT_EQ(ctx, r, batonInvalidArgument) << " (" << ResultName(r) << ") from " << call;
  const char* msg = batonGetLastError(comm);
  MP_EXPECT_TRUE(ctx, msg != nullptr && msg[0] != '\0') << " no error message after " << call;
}

// A correct allreduce on the communicator: it survived the bad calls.
void ExpectUsable(RankContext& ctx, const char* after) {
  ctx.SetStep(std::string("allreduce after ") + after);
  int32_t v[3] = {ctx.rank() + 1, 10 * ctx.rank(), -ctx.rank()};
  MP_EXPECT_OK(ctx, batonAllReduce(v, v, 3, batonInt32, batonSum, ctx.comm(), nullptr))
      << " after " << after;
  const int n = ctx.nranks();
  MP_EXPECT_EQ(ctx, v[0], n * (n + 1) / 2) << " after " << after;
  MP_EXPECT_EQ(ctx, v[1], 10 * n * (n - 1) / 2) << " after " << after;
  MP_EXPECT_EQ(ctx, v[2], -n * (n - 1) / 2) << " after " << after;
}

// Every rank makes the same bad call, so no rank goes on into a collective
// the others refused (that would hang, and the harness would fail it).
#define EXPECT_INVALID(ctx, comm, call)        \
  do {                                         \
    ctx.SetStep(#call);                        \
    ExpectInvalid(ctx, #call, (call), (comm)); \
    ExpectUsable(ctx, #call);                  \
  } while (0)

TEST(ApiTest, BadArgumentsAreRejected) {
  Options options;
  options.extra_ids = 1;
  RunRanks(
      2,
      [](RankContext& ctx) {
        batonComm_t c = ctx.comm();
        const int n = ctx.nranks();
        float a[8] = {}, b[8] = {};
        // count * sizeof(float) overflows size_t; so does count * nranks * 4
        // for the per-rank counts of allgather / reducescatter.
        const size_t kOverflow = SIZE_MAX / 4 + 1;
        const size_t kOverflowTimesRanks = SIZE_MAX / 8 + 1;
        const auto bad_type = [](int t) { return static_cast<batonDataType_t>(t); };
        const auto bad_op = [](int o) { return static_cast<batonRedOp_t>(o); };

        // batonAllReduce
        EXPECT_INVALID(ctx, nullptr,
                       batonAllReduce(a, b, 8, batonFloat, batonSum, nullptr, nullptr));
        EXPECT_INVALID(ctx, c, batonAllReduce(nullptr, b, 8, batonFloat, batonSum, c, nullptr));
        EXPECT_INVALID(ctx, c, batonAllReduce(a, nullptr, 8, batonFloat, batonSum, c, nullptr));
        for (int t : {42, -1, static_cast<int>(batonNumTypes)}) {
          EXPECT_INVALID(ctx, c, batonAllReduce(a, b, 8, bad_type(t), batonSum, c, nullptr));
        }
        for (int o : {42, -1, static_cast<int>(batonNumOps)}) {
          EXPECT_INVALID(ctx, c, batonAllReduce(a, b, 8, batonFloat, bad_op(o), c, nullptr));
        }
        EXPECT_INVALID(ctx, c, batonAllReduce(a, b, kOverflow, batonFloat, batonSum, c, nullptr));
        EXPECT_INVALID(ctx, c, batonAllReduce(a, b, SIZE_MAX, batonDouble, batonMax, c, nullptr));

        // batonBroadcast: recvbuff is needed on every rank.
        EXPECT_INVALID(ctx, nullptr, batonBroadcast(a, b, 8, batonFloat, 0, nullptr, nullptr));
        EXPECT_INVALID(ctx, c, batonBroadcast(a, nullptr, 8, batonFloat, 0, c, nullptr));
        EXPECT_INVALID(ctx, c, batonBroadcast(nullptr, nullptr, 8, batonFloat, 0, c, nullptr));
        for (int root : {-1, n, 42}) {
          EXPECT_INVALID(ctx, c, batonBroadcast(a, b, 8, batonFloat, root, c, nullptr));
        }
        for (int t : {42, -1}) {
          EXPECT_INVALID(ctx, c, batonBroadcast(a, b, 8, bad_type(t), 0, c, nullptr));
        }
        EXPECT_INVALID(ctx, c, batonBroadcast(a, b, kOverflow, batonFloat, 0, c, nullptr));

        // batonReduce: sendbuff is needed on every rank.
        EXPECT_INVALID(ctx, nullptr,
                       batonReduce(a, b, 8, batonFloat, batonSum, 0, nullptr, nullptr));
        EXPECT_INVALID(ctx, c, batonReduce(nullptr, b, 8, batonFloat, batonSum, 0, c, nullptr));
        for (int root : {-1, n}) {
          EXPECT_INVALID(ctx, c, batonReduce(a, b, 8, batonFloat, batonSum, root, c, nullptr));
        }
        EXPECT_INVALID(ctx, c, batonReduce(a, b, 8, bad_type(42), batonSum, 0, c, nullptr));
        EXPECT_INVALID(ctx, c, batonReduce(a, b, 8, bad_type(-1), batonSum, 0, c, nullptr));
        EXPECT_INVALID(ctx, c, batonReduce(a, b, 8, batonFloat, bad_op(42), 0, c, nullptr));
        EXPECT_INVALID(ctx, c, batonReduce(a, b, 8, batonFloat, bad_op(-1), 0, c, nullptr));
        EXPECT_INVALID(ctx, c, batonReduce(a, b, kOverflow, batonFloat, batonSum, 0, c, nullptr));

        // batonAllGather
        EXPECT_INVALID(ctx, nullptr, batonAllGather(a, b, 4, batonFloat, nullptr, nullptr));
        EXPECT_INVALID(ctx, c, batonAllGather(nullptr, b, 4, batonFloat, c, nullptr));
        EXPECT_INVALID(ctx, c, batonAllGather(a, nullptr, 4, batonFloat, c, nullptr));
        EXPECT_INVALID(ctx, c, batonAllGather(a, b, 4, bad_type(42), c, nullptr));
        EXPECT_INVALID(ctx, c, batonAllGather(a, b, 4, bad_type(-1), c, nullptr));
        EXPECT_INVALID(ctx, c, batonAllGather(a, b, kOverflow, batonFloat, c, nullptr));
        EXPECT_INVALID(ctx, c, batonAllGather(a, b, kOverflowTimesRanks, batonFloat, c, nullptr));

        // batonReduceScatter
        EXPECT_INVALID(ctx, nullptr,
                       batonReduceScatter(a, b, 4, batonFloat, batonSum, nullptr, nullptr));
        EXPECT_INVALID(ctx, c, batonReduceScatter(nullptr, b, 4, batonFloat, batonSum, c, nullptr));
        EXPECT_INVALID(ctx, c, batonReduceScatter(a, nullptr, 4, batonFloat, batonSum, c, nullptr));
        EXPECT_INVALID(ctx, c, batonReduceScatter(a, b, 4, bad_type(42), batonSum, c, nullptr));
        EXPECT_INVALID(ctx, c, batonReduceScatter(a, b, 4, batonFloat, bad_op(42), c, nullptr));
        EXPECT_INVALID(ctx, c, batonReduceScatter(a, b, 4, batonFloat, bad_op(-1), c, nullptr));
        EXPECT_INVALID(ctx, c,
                       batonReduceScatter(a, b, kOverflow, batonFloat, batonSum, c, nullptr));
        EXPECT_INVALID(
            ctx, c,
            batonReduceScatter(a, b, kOverflowTimesRanks, batonFloat, batonSum, c, nullptr));

        // batonAlltoAll
        EXPECT_INVALID(ctx, nullptr, batonAlltoAll(a, b, 4, batonFloat, nullptr, nullptr));
        EXPECT_INVALID(ctx, c, batonAlltoAll(nullptr, b, 4, batonFloat, c, nullptr));
        EXPECT_INVALID(ctx, c, batonAlltoAll(a, nullptr, 4, batonFloat, c, nullptr));
        EXPECT_INVALID(ctx, c, batonAlltoAll(a, b, 4, bad_type(42), c, nullptr));
        EXPECT_INVALID(ctx, c, batonAlltoAll(a, b, kOverflow, batonFloat, c, nullptr));

        // batonSend / batonRecv: every rank makes the same bad call.
        const int peer = 1 - ctx.rank();
        EXPECT_INVALID(ctx, nullptr, batonSend(a, 4, batonFloat, peer, nullptr, nullptr));
        EXPECT_INVALID(ctx, c, batonSend(nullptr, 4, batonFloat, peer, c, nullptr));
        EXPECT_INVALID(ctx, c, batonSend(a, 4, bad_type(42), peer, c, nullptr));
        EXPECT_INVALID(ctx, c, batonSend(a, kOverflow, batonFloat, peer, c, nullptr));
        EXPECT_INVALID(ctx, nullptr, batonRecv(b, 4, batonFloat, peer, nullptr, nullptr));
        EXPECT_INVALID(ctx, c, batonRecv(nullptr, 4, batonFloat, peer, c, nullptr));
        EXPECT_INVALID(ctx, c, batonRecv(b, 4, bad_type(-1), peer, c, nullptr));
        EXPECT_INVALID(ctx, c, batonRecv(b, kOverflow, batonFloat, peer, c, nullptr));
        for (int p : {-1, n, 42}) {
          EXPECT_INVALID(ctx, c, batonSend(a, 4, batonFloat, p, c, nullptr));
          EXPECT_INVALID(ctx, c, batonRecv(b, 4, batonFloat, p, c, nullptr));
        }

        EXPECT_INVALID(ctx, nullptr, batonBarrier(nullptr, nullptr));

        // Queries.
        int out = 0;
        batonResult_t async = batonSuccess;
        EXPECT_INVALID(ctx, nullptr, batonCommCount(nullptr, &out));
        EXPECT_INVALID(ctx, c, batonCommCount(c, nullptr));
        EXPECT_INVALID(ctx, nullptr, batonCommUserRank(nullptr, &out));
        EXPECT_INVALID(ctx, c, batonCommUserRank(c, nullptr));
        EXPECT_INVALID(ctx, nullptr, batonCommGetAsyncError(nullptr, &async));
        EXPECT_INVALID(ctx, c, batonCommGetAsyncError(c, nullptr));

        batonComm_t split = nullptr;
        EXPECT_INVALID(ctx, nullptr, batonCommSplit(nullptr, 0, 0, &split, nullptr));
        EXPECT_INVALID(ctx, c, batonCommSplit(c, 0, 0, nullptr, nullptr));

        // batonCommInitRank must reject these before touching the network.
        // The spare id keeps a library that does not from disturbing c.
        batonComm_t fresh = nullptr;
        const batonUniqueId& id = ctx.extra_id(0);
        const auto start = std::chrono::steady_clock::now();
        EXPECT_INVALID(ctx, nullptr, batonCommInitRank(&fresh, 0, id, 0));
        EXPECT_INVALID(ctx, nullptr, batonCommInitRank(&fresh, -1, id, 0));
        EXPECT_INVALID(ctx, nullptr, batonCommInitRank(&fresh, n, id, -1));
        EXPECT_INVALID(ctx, nullptr, batonCommInitRank(&fresh, n, id, n));
        EXPECT_INVALID(ctx, nullptr, batonCommInitRank(nullptr, n, id, ctx.rank()));
        MP_EXPECT_TRUE(ctx, fresh == nullptr);
        MP_EXPECT_LT(ctx, SecondsSince(start), 10.0) << " s spent rejecting bad init arguments";

        // Destroying / aborting NULL must not crash (NCCL returns success;
        // rejecting it is fine too).
        const batonResult_t d = batonCommDestroy(nullptr);
        MP_EXPECT_TRUE(ctx, d == batonSuccess || d == batonInvalidArgument) << ResultName(d);
        const batonResult_t ab = batonCommAbort(nullptr);
        MP_EXPECT_TRUE(ctx, ab == batonSuccess || ab == batonInvalidArgument) << ResultName(ab);
        ExpectUsable(ctx, "batonCommDestroy(NULL) / batonCommAbort(NULL)");

        // With count 0 the buffers are never touched, so NULL is fine (as in NCCL).
        ctx.SetStep("count 0 with NULL buffers");
        MP_EXPECT_OK(ctx, batonAllReduce(nullptr, nullptr, 0, batonFloat, batonSum, c, nullptr));
        MP_EXPECT_OK(ctx, batonBroadcast(nullptr, nullptr, 0, batonFloat, 0, c, nullptr));
        ExpectUsable(ctx, "count 0 with NULL buffers");
      },
      options);
}

// Colors rank % 2, keys in reverse rank order: each half is a 2-rank comm
// whose rank 0 is the highest parent rank of that color.
TEST(ApiTest, CommSplitByParity) {
  RunRanks(4, [](RankContext& ctx) {
    const int rank = ctx.rank(), n = ctx.nranks();
    batonComm_t half = nullptr;
    const batonResult_t r = batonCommSplit(ctx.comm(), rank % 2, n - rank, &half, nullptr);
    MP_ASSERT_EQ(ctx, r, batonSuccess) << " " << ResultName(r) << ": " << ctx.LastError();
    MP_ASSERT_TRUE(ctx, half != nullptr);
    // Same color: {0, 2} or {1, 3}; higher parent rank has the lower key.
    const int want_rank = rank < 2 ? 1 : 0;
    int count = 0, new_rank = -1;
    MP_EXPECT_OK(ctx, batonCommCount(half, &count));
    MP_EXPECT_OK(ctx, batonCommUserRank(half, &new_rank));
    MP_EXPECT_EQ(ctx, count, 2);
    MP_EXPECT_EQ(ctx, new_rank, want_rank);

    int64_t v[2] = {int64_t{1} << (4 * rank), rank};
    MP_EXPECT_OK(ctx, batonAllReduce(v, v, 2, batonInt64, batonSum, half, nullptr));
    const int other = rank ^ 2;  // the other member of this color
    MP_EXPECT_EQ(ctx, v[0], (int64_t{1} << (4 * rank)) + (int64_t{1} << (4 * other)));
    MP_EXPECT_EQ(ctx, v[1], int64_t{rank + other});
    int64_t root_rank = rank;
    MP_EXPECT_OK(ctx, batonBroadcast(&root_rank, &root_rank, 1, batonInt64, 0, half, nullptr));
    MP_EXPECT_EQ(ctx, root_rank, int64_t{std::max(rank, other)});
    // The parent is still usable alongside the child.
    ExpectUsable(ctx, "batonCommSplit");
    MP_EXPECT_OK(ctx, batonCommDestroy(half));

    // BATON_SPLIT_NOCOLOR: rank 3 opts out and gets NULL; the rest form a
    // 3-rank comm ordered by parent rank (equal keys).
    batonComm_t some = reinterpret_cast<batonComm_t>(&some);  // must be overwritten
    const int color = rank == 3 ? BATON_SPLIT_NOCOLOR : 7;
    MP_ASSERT_OK(ctx, batonCommSplit(ctx.comm(), color, 0, &some, nullptr));
    if (rank == 3) {
      MP_EXPECT_TRUE(ctx, some == nullptr);
    } else {
      MP_ASSERT_TRUE(ctx, some != nullptr);
      int count3 = 0, rank3 = -1;
      MP_EXPECT_OK(ctx, batonCommCount(some, &count3));
      MP_EXPECT_OK(ctx, batonCommUserRank(some, &rank3));
      MP_EXPECT_EQ(ctx, count3, 3);
      MP_EXPECT_EQ(ctx, rank3, rank);
      int32_t x = rank + 1;
      MP_EXPECT_OK(ctx, batonAllReduce(&x, &x, 1, batonInt32, batonSum, some, nullptr));
      MP_EXPECT_EQ(ctx, x, 6);
      MP_EXPECT_OK(ctx, batonCommDestroy(some));
    }
    ExpectUsable(ctx, "batonCommSplit with BATON_SPLIT_NOCOLOR");
  });
}

// The library keeps a registry of live handles: a destroyed (or never valid)
// handle is rejected with batonInvalidArgument instead of being dereferenced,
// also right after calls through it (each thread remembers its last lookup).
TEST(ApiTest, UseAfterDestroyIsRejected) {
  RunRanks(2, [](RankContext& ctx) {
    batonComm_t c = ctx.TakeComm();
    int32_t before = 1;
    MP_EXPECT_OK(ctx, batonAllReduce(&before, &before, 1, batonInt32, batonSum, c, nullptr));
    MP_EXPECT_EQ(ctx, before, 2);
    MP_ASSERT_OK(ctx, batonCommDestroy(c));
    int32_t v = 1;
    int out = 0;
    batonResult_t async = batonSuccess;
#define EXPECT_REJECTED(handle, call)              \
  do {                                             \
    ctx.SetStep(#call " on a " #handle " handle"); \
    ExpectInvalid(ctx, #call, (call), (handle));   \
  } while (0)
    EXPECT_REJECTED(c, batonAllReduce(&v, &v, 1, batonInt32, batonSum, c, nullptr));
    EXPECT_REJECTED(c, batonBroadcast(&v, &v, 1, batonInt32, 0, c, nullptr));
    EXPECT_REJECTED(c, batonBarrier(c, nullptr));
    EXPECT_REJECTED(c, batonCommCount(c, &out));
    EXPECT_REJECTED(c, batonCommUserRank(c, &out));
    EXPECT_REJECTED(c, batonCommGetAsyncError(c, &async));
    EXPECT_REJECTED(c, batonCommDestroy(c));
    EXPECT_REJECTED(c, batonCommAbort(c));
    MP_EXPECT_TRUE(ctx, batonGetLastError(c) != nullptr);

    // A pointer that never was a communicator is not dereferenced either.
    int64_t not_a_comm[64] = {};
    batonComm_t bogus = reinterpret_cast<batonComm_t>(not_a_comm);
    EXPECT_REJECTED(bogus, batonCommCount(bogus, &out));
    EXPECT_REJECTED(bogus, batonAllReduce(&v, &v, 1, batonInt32, batonSum, bogus, nullptr));
#undef EXPECT_REJECTED
  });
}

// A group's queued calls run at batonGroupEnd: destroying or finalizing
// their communicator before is misuse (it ran them on a freed one); an
// abort is allowed and fails them.
TEST(ApiTest, DestroyInsideAGroupThatHoldsItsCallsIsRejected) {
  RunRanks(2, [](RankContext& ctx) {
    batonComm_t c = ctx.TakeComm();
    int32_t v = ctx.rank() + 1;
    MP_ASSERT_OK(ctx, batonGroupStart());
    MP_EXPECT_OK(ctx, batonAllReduce(&v, &v, 1, batonInt32, batonSum, c, nullptr));
    MP_EXPECT_RESULT(ctx, batonCommDestroy(c), batonInvalidUsage);
    MP_EXPECT_TRUE(
        ctx, std::string(batonGetLastError(c)).find("batonGroupEnd first") != std::string::npos);
    MP_EXPECT_RESULT(ctx, batonCommFinalize(c), batonInvalidUsage);
    MP_EXPECT_OK(ctx, batonGroupEnd());
    MP_EXPECT_EQ(ctx, v, 3);
    // A group without calls on it does not hold it.
    MP_ASSERT_OK(ctx, batonGroupStart());
    MP_EXPECT_OK(ctx, batonCommFinalize(c));
    MP_EXPECT_OK(ctx, batonGroupEnd());
    // An abort inside the group fails the queued call at the end.
    MP_ASSERT_OK(ctx, batonGroupStart());
    MP_EXPECT_OK(ctx, batonAllReduce(&v, &v, 1, batonInt32, batonSum, c, nullptr));
    MP_EXPECT_OK(ctx, batonCommAbort(c));
    MP_EXPECT_TRUE(ctx, batonGroupEnd() != batonSuccess);
  });
}

// Communicators made and destroyed in turn (a new one may get the handle
// address of the one before): each call reaches the communicator its handle
// names now, on this thread and on another, never one remembered from
// before.
TEST(ApiTest, HandlesReusedAfterDestroyReachTheirNewCommunicator) {
  RunRanks(3, [](RankContext& ctx) {
    const int rank = ctx.rank();
    for (int round = 0; round < 6; ++round) {
      ctx.SetStep("round " + std::to_string(round));
      // Even rounds: all three ranks; odd: rank 2 alone, the others a pair.
      const int color = round % 2 == 0 ? 0 : rank == 2 ? 1 : 0;
      batonComm_t sub = nullptr;
      MP_ASSERT_OK(ctx, batonCommSplit(ctx.comm(), color, rank, &sub, nullptr));
      int count = 0;
      MP_EXPECT_OK(ctx, batonCommCount(sub, &count));
      const int want = round % 2 == 0 ? 3 : rank == 2 ? 1 : 2;
      MP_EXPECT_EQ(ctx, count, want);
      for (int call = 0; call < 3; ++call) {
        int32_t v = rank + 1;
        MP_EXPECT_OK(ctx, batonAllReduce(&v, &v, 1, batonInt32, batonSum, sub, nullptr));
        MP_EXPECT_EQ(ctx, v, round % 2 == 0 ? 6 : 3);  // odd: 3 alone, 1 + 2 in the pair
      }
      int32_t other = 0;
      std::thread([&] {
        int32_t w = 10 * (rank + 1);
        other =
            batonAllReduce(&w, &w, 1, batonInt32, batonSum, sub, nullptr) == batonSuccess ? w : -1;
      }).join();
      MP_EXPECT_EQ(ctx, other, round % 2 == 0 ? 60 : 30);
      MP_EXPECT_OK(ctx, batonCommDestroy(sub));
      int32_t after = 1;
      MP_EXPECT_EQ(ctx, batonAllReduce(&after, &after, 1, batonInt32, batonSum, sub, nullptr),
                   batonInvalidArgument);
    }
    ExpectUsable(ctx, "splits made and destroyed in turn");
  });
}

// Rank 3 never calls batonCommInitRank: the others must fail with a timeout
// (or a remote/system error) after BATON_TIMEOUT=3 s, not hang.
TEST(ApiTest, InitWithMissingRankTimesOut) {
  Options options;
  options.init_comm = false;
  options.env = {{"BATON_TIMEOUT", "3"}};
  options.deadline = std::chrono::seconds(60);
  RunRanks(
      4,
      [](RankContext& ctx) {
        if (ctx.rank() == 3) return;
        batonComm_t comm = nullptr;
        const auto start = std::chrono::steady_clock::now();
        const batonResult_t r = batonCommInitRank(&comm, ctx.nranks(), ctx.id(), ctx.rank());
        const double elapsed = SecondsSince(start);
        MP_EXPECT_TRUE(ctx, r == batonTimeout || r == batonRemoteError || r == batonSystemError)
            << " got " << ResultName(r) << " after " << elapsed << " s";
        MP_EXPECT_NE(ctx, std::string(batonGetLastError(nullptr)), "");
        // 3 s plus generous slack for a loaded 2-core machine.
        MP_EXPECT_LT(ctx, elapsed, 15.0) << " s to give up with BATON_TIMEOUT=3";
        if (r == batonSuccess && comm != nullptr) ctx.set_comm(comm);
      },
      options);
}

}  // namespace
