// batonCommGrow and batonCommGetUniqueId (NCCL 2.29's ncclCommGrow): ranks
// join a running communicator for several sizes, over shared memory and TCP,
// blocking and not; the survivors of a SIGKILL shrink and then grow back to
// the old size with a new process; a joining rank that never comes, or
// existing ranks that never call the grow, are batonTimeout within
// BATON_TIMEOUT; wrong arguments and ranks that disagree are errors with a
// message, and leave the parent usable.
#include <baton.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <tuple>
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

// The out-of-band channel of these tests (harness memory shared by the
// ranks, not by the library): the coordinator publishes its grow id here.
struct Board {
  std::atomic<int> published;
  std::atomic<int> done;
  batonUniqueId id;
};
static_assert(sizeof(Board) <= RankContext::kSharedBytes);

Board* BoardOf(RankContext& ctx) {
  return static_cast<Board*>(ctx.shared());
}

void Publish(RankContext& ctx, const batonUniqueId& id) {
  Board* b = BoardOf(ctx);
  memcpy(&b->id, &id, sizeof(id));
  b->published.store(1, std::memory_order_release);
}

// Waits (up to 60 s) for the coordinator's id.
bool WaitForId(RankContext& ctx, batonUniqueId* id) {
  Board* b = BoardOf(ctx);
  const auto start = std::chrono::steady_clock::now();
  while (b->published.load(std::memory_order_acquire) == 0) {
    if (SecondsSince(start) > 60) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  memcpy(id, &b->id, sizeof(*id));
  return true;
}

// Every rank adds its tag at three size classes; the sums must be `want`.
void ExpectSums(RankContext& ctx, batonComm_t comm, int32_t tag, int32_t want) {
  for (size_t n : {size_t(1), size_t(4097), size_t(1) << 20}) {
    std::vector<int32_t> v(n, tag);
    MP_ASSERT_OK(ctx, batonAllReduce(v.data(), v.data(), n, batonInt32, batonSum, comm, nullptr));
    MP_EXPECT_EQ(ctx, v[0], want) << " (" << n << " elements)";
    MP_EXPECT_EQ(ctx, v[n - 1], want) << " (" << n << " elements)";
  }
}

// Waits for a nonblocking creation.
batonResult_t WaitReady(batonComm_t comm) {
  const auto start = std::chrono::steady_clock::now();
  batonResult_t state = batonInProgress;
  while (state == batonInProgress && SecondsSince(start) < 60) {
    const batonResult_t r = batonCommGetAsyncError(comm, &state);
    if (r != batonSuccess) return r;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return state;
}

// (old size, new size, transport, blocking)
class GrowTest : public ::testing::TestWithParam<std::tuple<int, int, const char*, bool>> {};

// `old` ranks make a communicator; the last of them coordinates; the others
// up to `total` join. Everyone keeps (or takes) its harness rank.
TEST_P(GrowTest, RanksJoinARunningCommunicator) {
  const auto [old, total, transport, blocking] = GetParam();
  Options options = FailureOptions(transport);
  options.init_comm = false;
  RunRanks(
      total,
      [old = old, total = total, blocking = blocking](RankContext& ctx) {
        batonConfig_t config = BATON_CONFIG_INITIALIZER;
        config.blocking = blocking ? 1 : 0;
        batonComm_t grown = nullptr;
        auto start = std::chrono::steady_clock::now();
        if (ctx.rank() < old) {
          batonComm_t parent = nullptr;
          MP_ASSERT_OK(ctx, batonCommInitRank(&parent, old, ctx.id(), ctx.rank()));
          ExpectSums(ctx, parent, 1, old);
          batonUniqueId id;
          const bool coordinator = ctx.rank() == old - 1;
          start = std::chrono::steady_clock::now();  // the grow, id included
          if (coordinator) {
            MP_ASSERT_OK(ctx, batonCommGetUniqueId(parent, &id));
            Publish(ctx, id);
          }
          const batonResult_t r =
              batonCommGrow(parent, total, coordinator ? &id : nullptr, -1, &grown, &config);
          MP_ASSERT_TRUE(ctx, r == (blocking ? batonSuccess : batonInProgress))
              << " batonCommGrow returned " << baton_test::ResultName(r) << ": "
              << batonGetLastError(parent);
          if (!blocking) MP_ASSERT_OK(ctx, WaitReady(grown));
          if (ctx.rank() == 0)
            ctx.Log(std::to_string(old) + " -> " + std::to_string(total) + " ranks in " +
                    std::to_string(SecondsSince(start)) + " s");
          // The parent is untouched and still works.
          ExpectSums(ctx, parent, 2, 2 * old);
          MP_EXPECT_OK(ctx, batonCommDestroy(parent));
        } else {
          batonUniqueId id;
          MP_ASSERT_TRUE(ctx, WaitForId(ctx, &id)) << " no grow id within 60 s";
          const batonResult_t r = batonCommGrow(nullptr, total, &id, ctx.rank(), &grown, &config);
          MP_ASSERT_TRUE(ctx, r == (blocking ? batonSuccess : batonInProgress))
              << " batonCommGrow returned " << baton_test::ResultName(r) << ": "
              << batonGetLastError(nullptr);
          if (!blocking) MP_ASSERT_OK(ctx, WaitReady(grown));
        }
        ctx.set_comm(grown);
        int count = 0, rank = -1;
        MP_EXPECT_OK(ctx, batonCommCount(grown, &count));
        MP_EXPECT_OK(ctx, batonCommUserRank(grown, &rank));
        MP_EXPECT_EQ(ctx, count, total);
        MP_EXPECT_EQ(ctx, rank, ctx.rank());
        ExpectSums(ctx, grown, ctx.rank(), total * (total - 1) / 2);
      },
      options);
}

INSTANTIATE_TEST_SUITE_P(
    Sizes, GrowTest,
    ::testing::Values(std::make_tuple(1, 2, "shm", true), std::make_tuple(2, 3, "shm", true),
                      std::make_tuple(2, 4, "shm", true), std::make_tuple(3, 5, "shm", true),
                      std::make_tuple(4, 5, "shm", true), std::make_tuple(2, 4, "tcp", true),
                      std::make_tuple(3, 4, "tcp", true), std::make_tuple(2, 3, "shm", false)),
    [](const auto& info) {
      return "from" + std::to_string(std::get<0>(info.param)) + "to" +
             std::to_string(std::get<1>(info.param)) + "_" + std::get<2>(info.param) +
             (std::get<3>(info.param) ? "" : "_nonblocking");
    });

class GrowAfterShrinkTest : public ::testing::TestWithParam<const char*> {};

// Elastic training's cycle: rank 2 of 4 dies mid-allreduce, the survivors
// shrink to 3 and go on, then a new process (harness rank 4) joins and the
// communicator has 4 ranks again: the survivors in their old order, the
// newcomer last.
TEST_P(GrowAfterShrinkTest, SurvivorsGrowBackToTheOldSize) {
  Options options = FailureOptions(GetParam());
  options.init_comm = false;
  options.expected_signal = {{2, SIGKILL}};
  RunRanks(
      5,
      [](RankContext& ctx) {
        batonComm_t grown = nullptr;
        if (ctx.rank() < 4) {
          batonComm_t world = nullptr;
          MP_ASSERT_OK(ctx, batonCommInitRank(&world, 4, ctx.id(), ctx.rank()));
          std::vector<float> buf(kLargeCount, 1.0f);
          if (ctx.rank() == 2) RaiseSoon(SIGKILL);
          int iterations = 0;
          const batonResult_t r = AllReduceUntilError(world, nullptr, buf, 60, &iterations);
          MP_ASSERT_TRUE(ctx, r != batonSuccess) << " no error although rank 2 died";
          int excluded[] = {2};
          batonComm_t shrunk = nullptr;
          MP_ASSERT_OK(ctx,
                       batonCommShrink(world, excluded, 1, &shrunk, nullptr, BATON_SHRINK_ABORT));
          MP_EXPECT_OK(ctx, batonCommAbort(world));
          ExpectSums(ctx, shrunk, ctx.rank(), 0 + 1 + 3);
          int rank = -1;
          MP_EXPECT_OK(ctx, batonCommUserRank(shrunk, &rank));
          batonUniqueId id;
          if (rank == 0) {
            MP_ASSERT_OK(ctx, batonCommGetUniqueId(shrunk, &id));
            Publish(ctx, id);
          }
          MP_ASSERT_OK(ctx,
                       batonCommGrow(shrunk, 4, rank == 0 ? &id : nullptr, -1, &grown, nullptr));
          MP_EXPECT_OK(ctx, batonCommDestroy(shrunk));
          MP_EXPECT_OK(ctx, batonCommUserRank(grown, &rank));
          MP_EXPECT_EQ(ctx, rank, ctx.rank() < 2 ? ctx.rank() : ctx.rank() - 1);
        } else {
          batonUniqueId id;
          MP_ASSERT_TRUE(ctx, WaitForId(ctx, &id)) << " no grow id within 60 s";
          MP_ASSERT_OK(ctx, batonCommGrow(nullptr, 4, &id, 3, &grown, nullptr));
        }
        ctx.set_comm(grown);
        int count = 0;
        MP_EXPECT_OK(ctx, batonCommCount(grown, &count));
        MP_EXPECT_EQ(ctx, count, 4);
        ExpectSums(ctx, grown, ctx.rank(), 0 + 1 + 3 + 4);
      },
      options);
}

INSTANTIATE_TEST_SUITE_P(Transports, GrowAfterShrinkTest, ::testing::Values("shm", "tcp"),
                         [](const auto& info) { return std::string(info.param); });

constexpr int kShortTimeout = 3;  // BATON_TIMEOUT of the timeout tests

Options ShortTimeout() {
  Options options = FailureOptions("shm");
  for (auto& [name, value] : options.env)
    if (name == "BATON_TIMEOUT") value = std::to_string(kShortTimeout);
  return options;
}

// A joining rank that never comes: the existing ranks fail with batonTimeout
// within the timeout, naming the rendezvous; the parent still works, and a
// new grow id can be had (the failed grow used the first up).
TEST(GrowFailureTest, JoiningRankThatNeverComesIsATimeout) {
  RunRanks(
      2,
      [](RankContext& ctx) {
        batonUniqueId id;
        if (ctx.rank() == 0) MP_ASSERT_OK(ctx, batonCommGetUniqueId(ctx.comm(), &id));
        batonComm_t grown = nullptr;
        const auto start = std::chrono::steady_clock::now();
        const batonResult_t r =
            batonCommGrow(ctx.comm(), 3, ctx.rank() == 0 ? &id : nullptr, -1, &grown, nullptr);
        const double took = SecondsSince(start);
        MP_EXPECT_EQ(ctx, r, batonTimeout) << ": " << batonGetLastError(ctx.comm());
        MP_EXPECT_TRUE(ctx, grown == nullptr);
        MP_EXPECT_LT(ctx, took, kShortTimeout + 10.0) << " s to give up";
        const std::string why = batonGetLastError(ctx.comm());
        MP_EXPECT_EQ(ctx, why.find("batonCommGrow: rank " + std::to_string(ctx.rank()) + " of 3"),
                     size_t{0})
            << why;
        MP_EXPECT_NE(ctx, why.find("timed out"), std::string::npos) << why;
        if (ctx.rank() == 0) ctx.Log("gave up after " + std::to_string(took) + " s: " + why);
        ExpectSums(ctx, ctx.comm(), 1, 2);
        if (ctx.rank() == 0) MP_EXPECT_OK(ctx, batonCommGetUniqueId(ctx.comm(), &id));
      },
      ShortTimeout());
}

// Existing ranks that never call the grow: the joining rank fails with
// batonTimeout instead of waiting for ever.
TEST(GrowFailureTest, ExistingRanksThatNeverGrowAreATimeout) {
  Options options = ShortTimeout();
  options.init_comm = false;
  RunRanks(
      3,
      [](RankContext& ctx) {
        Board* board = BoardOf(ctx);
        if (ctx.rank() < 2) {
          batonComm_t parent = nullptr;
          MP_ASSERT_OK(ctx, batonCommInitRank(&parent, 2, ctx.id(), ctx.rank()));
          ctx.set_comm(parent);
          if (ctx.rank() == 0) {
            batonUniqueId id;
            MP_ASSERT_OK(ctx, batonCommGetUniqueId(parent, &id));
            Publish(ctx, id);
            // The id's rendezvous lives in this process: stay until the joiner gave up.
            const auto start = std::chrono::steady_clock::now();
            while (board->done.load() == 0 && SecondsSince(start) < 60)
              std::this_thread::sleep_for(std::chrono::milliseconds(5));
          }
          return;
        }
        batonUniqueId id;
        MP_ASSERT_TRUE(ctx, WaitForId(ctx, &id)) << " no grow id within 60 s";
        batonComm_t grown = nullptr;
        const auto start = std::chrono::steady_clock::now();
        const batonResult_t r = batonCommGrow(nullptr, 3, &id, 2, &grown, nullptr);
        const double took = SecondsSince(start);
        board->done.store(1);
        MP_EXPECT_EQ(ctx, r, batonTimeout) << ": " << batonGetLastError(nullptr);
        MP_EXPECT_TRUE(ctx, grown == nullptr);
        MP_EXPECT_LT(ctx, took, kShortTimeout + 10.0) << " s to give up";
        ctx.Log("the joining rank gave up after " + std::to_string(took) +
                " s: " + batonGetLastError(nullptr));
      },
      options);
}

// Every argument the call can check alone is batonInvalidArgument (or
// batonInvalidUsage) at once, with a message, and no communicator.
TEST(GrowArgumentsTest, BadArgumentsAreRefused) {
  RunRanks(
      2,
      [](RankContext& ctx) {
        batonComm_t c = ctx.comm();
        batonComm_t out = nullptr;
        batonUniqueId id;
        MP_EXPECT_RESULT(ctx, batonCommGetUniqueId(nullptr, &id), batonInvalidArgument);
        MP_EXPECT_RESULT(ctx, batonCommGetUniqueId(c, nullptr), batonInvalidArgument);
        MP_ASSERT_OK(ctx, batonCommGetUniqueId(c, &id));
        batonUniqueId second;
        MP_EXPECT_RESULT(ctx, batonCommGetUniqueId(c, &second), batonInvalidUsage);
        MP_EXPECT_NE(ctx, std::string(ctx.LastError()).find("not used yet"), std::string::npos)
            << ctx.LastError();
        MP_EXPECT_RESULT(ctx, batonCommGrow(c, 3, &id, -1, nullptr, nullptr), batonInvalidArgument);
        MP_EXPECT_RESULT(ctx, batonCommGrow(nullptr, 3, nullptr, 2, &out, nullptr),
                         batonInvalidArgument);
        MP_EXPECT_RESULT(ctx, batonCommGrow(c, 2, &id, -1, &out, nullptr), batonInvalidArgument);
        MP_EXPECT_NE(ctx, std::string(ctx.LastError()).find("does not grow"), std::string::npos)
            << ctx.LastError();
        MP_EXPECT_RESULT(ctx, batonCommGrow(c, 3, &id, 0, &out, nullptr), batonInvalidArgument);
        MP_EXPECT_RESULT(ctx, batonCommGrow(nullptr, 3, &id, 3, &out, nullptr),
                         batonInvalidArgument);
        MP_EXPECT_RESULT(ctx, batonCommGrow(nullptr, 3, &id, -1, &out, nullptr),
                         batonInvalidArgument);
        MP_EXPECT_RESULT(ctx, batonCommGrow(nullptr, 1, &id, 0, &out, nullptr),
                         batonInvalidArgument);
        batonUniqueId garbage;
        memset(&garbage, 0x5a, sizeof(garbage));
        MP_EXPECT_RESULT(ctx, batonCommGrow(nullptr, 3, &garbage, 2, &out, nullptr),
                         batonInvalidArgument);
        batonConfig_t bad = BATON_CONFIG_INITIALIZER;
        bad.magic = 0;
        MP_EXPECT_RESULT(ctx, batonCommGrow(c, 3, &id, -1, &out, &bad), batonInvalidArgument);
        MP_EXPECT_OK(ctx, batonGroupStart());
        MP_EXPECT_RESULT(ctx, batonCommGrow(c, 3, &id, -1, &out, nullptr), batonInvalidUsage);
        MP_EXPECT_OK(ctx, batonGroupEnd());
        MP_EXPECT_TRUE(ctx, out == nullptr);
        ExpectSums(ctx, c, 1, 2);
      },
      FailureOptions("shm"));
}

// Existing ranks that disagree fail together, each with the same message,
// before anyone waits at a rendezvous; the parent goes on.
TEST(GrowArgumentsTest, RanksThatDisagreeAreInvalidUsageOnEveryRank) {
  RunRanks(
      2,
      [](RankContext& ctx) {
        batonComm_t c = ctx.comm();
        batonComm_t out = nullptr;
        auto expect_usage = [&](batonResult_t r, const char* words) {
          MP_EXPECT_EQ(ctx, r, batonInvalidUsage) << ": " << ctx.LastError();
          MP_EXPECT_NE(ctx, std::string(ctx.LastError()).find(words), std::string::npos)
              << ctx.LastError();
          MP_EXPECT_TRUE(ctx, out == nullptr);
        };
        batonUniqueId id;
        if (ctx.rank() == 0) MP_ASSERT_OK(ctx, batonCommGetUniqueId(c, &id));
        // Nobody passes the id (its maker keeps it for later).
        expect_usage(batonCommGrow(c, 3, nullptr, -1, &out, nullptr), "no rank passes");
        // Different sizes (the maker passes it: used up).
        expect_usage(batonCommGrow(c, ctx.rank() == 0 ? 3 : 4, ctx.rank() == 0 ? &id : nullptr, -1,
                                   &out, nullptr),
                     "every rank must pass the same nRanks");
        // The used id again.
        expect_usage(batonCommGrow(c, 3, ctx.rank() == 0 ? &id : nullptr, -1, &out, nullptr),
                     "used already");
        // An id of another making (batonGetUniqueId).
        batonUniqueId foreign;
        MP_ASSERT_OK(ctx, batonGetUniqueId(&foreign));
        expect_usage(batonCommGrow(c, 3, ctx.rank() == 1 ? &foreign : nullptr, -1, &out, nullptr),
                     "rank 1 passes an id that no rank made here");
        // Two makers.
        MP_ASSERT_OK(ctx, batonCommGetUniqueId(c, &id));
        expect_usage(batonCommGrow(c, 3, &id, -1, &out, nullptr), "both pass a grow id");
        ExpectSums(ctx, c, 1, 2);
      },
      FailureOptions("shm"));
}

}  // namespace
