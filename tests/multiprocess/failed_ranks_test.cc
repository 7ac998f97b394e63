// batonCommGetFailedRanks: after one or two ranks are SIGKILLed, every
// survivor lists exactly the killed ranks (never a survivor, even though the
// survivors abort and pass the failure on), the shrunk communicator lists
// none; a healthy communicator lists none, a rank that destroys its
// communicator is not failed and one that aborts a healthy one is; bad
// arguments are batonInvalidArgument.
#include <baton.h>
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/mp_harness.h"
#include "multiprocess/failure_common.h"

namespace {

using baton_test::AllReduceUntilError;
using baton_test::FailureOptions;
using baton_test::Options;
using baton_test::RankContext;
using baton_test::RunRanks;
using baton_test::SecondsSince;

std::string Join(const std::vector<int>& v) {
  std::string s = "{";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "}";
}

// The failed ranks of comm as the API gives them, checked for its contract:
// ascending, distinct, in range, the count whole.
std::vector<int> FailedRanks(RankContext& ctx, batonComm_t comm) {
  int n = -1;
  std::vector<int> ranks(64, -7);
  const batonResult_t r = batonCommGetFailedRanks(comm, ranks.data(), 64, &n);
  MP_EXPECT_OK(ctx, r);
  if (r != batonSuccess || n < 0 || n > 64) return {-1};
  ranks.resize(n);
  for (int i = 0; i < n; ++i) {
    MP_EXPECT_TRUE(ctx, ranks[i] >= 0 && (i == 0 || ranks[i] > ranks[i - 1]))
        << " not ascending and distinct: " << Join(ranks);
  }
  return ranks;
}

// Whether every thread of process `pid` has exited (the leader a zombie, the
// others gone, or the process reaped): its descriptors are closed by then.
// The leader alone turns zombie while other threads may still hold them.
bool Exited(pid_t pid) {
  const std::string dir = "/proc/" + std::to_string(pid) + "/task";
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return true;
  bool exited = true;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream stat(dir + "/" + e->d_name + "/stat");
    std::string line;
    if (!std::getline(stat, line)) continue;  // gone meanwhile
    const size_t paren = line.rfind(')');
    const char state =
        paren != std::string::npos && paren + 2 < line.size() ? line[paren + 2] : 'X';
    if (state != 'Z' && state != 'X') exited = false;
  }
  closedir(d);
  return exited;
}

struct KillCase {
  const char* transport;
  int nranks;
  std::vector<int> killed;
};

std::string CaseName(const ::testing::TestParamInfo<KillCase>& info) {
  std::string name =
      std::string(info.param.transport) + "_" + std::to_string(info.param.nranks) + "_ranks_kill";
  for (int r : info.param.killed) {
    name += '_';
    name += std::to_string(r);
  }
  return name;
}

class FailedRanksKillTest : public ::testing::TestWithParam<KillCase> {};

// The killed ranks die together in the middle of allreduces. Each survivor:
// the list read at once after its error holds only killed ranks; once the
// killed processes have exited it is exactly them (with maxRanks smaller
// than the count, the count is still whole); the old communicator keeps
// that list through the shrink (the survivors' own aborts list nobody);
// the shrunk communicator lists none and works.
TEST_P(FailedRanksKillTest, SurvivorsListExactlyTheKilledRanks) {
  const KillCase c = GetParam();
  Options options = FailureOptions(c.transport);
  for (int r : c.killed) options.expected_signal[r] = SIGKILL;
  RunRanks(
      c.nranks,
      [c](RankContext& ctx) {
        auto* pids = static_cast<pid_t*>(ctx.shared());
        pids[ctx.rank()] = getpid();
        const bool killed =
            std::find(c.killed.begin(), c.killed.end(), ctx.rank()) != c.killed.end();
        // Every pid is written before anyone dies; nothing failed yet.
        std::vector<float> buf(size_t{1} << 20, 1.0f);
        MP_ASSERT_OK(ctx, batonAllReduce(buf.data(), buf.data(), 1, batonFloat, batonSum,
                                         ctx.comm(), nullptr));
        MP_EXPECT_EQ(ctx, Join(FailedRanks(ctx, ctx.comm())), "{}");
        if (killed) baton_test::RaiseSoon(SIGKILL);
        int iterations = 0;
        const batonResult_t r = AllReduceUntilError(ctx.comm(), nullptr, buf, 60, &iterations);
        MP_ASSERT_TRUE(ctx, r != batonSuccess) << " no error although ranks died";

        // At once: what this rank knows so far, killed ranks only.
        for (int f : FailedRanks(ctx, ctx.comm())) {
          MP_EXPECT_TRUE(ctx, std::find(c.killed.begin(), c.killed.end(), f) != c.killed.end())
              << " lists rank " << f << ", which was not killed";
        }
        // Once every killed process has exited: exactly them.
        const auto start = std::chrono::steady_clock::now();
        for (int k : c.killed) {
          while (!Exited(pids[k]) && SecondsSince(start) < 10)
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
        const std::vector<int> failed = FailedRanks(ctx, ctx.comm());
        MP_EXPECT_EQ(ctx, Join(failed), Join(c.killed)) << " after " << ctx.LastError();
        int count = -1, first = -1;
        MP_EXPECT_OK(ctx, batonCommGetFailedRanks(ctx.comm(), &first, 1, &count));
        MP_EXPECT_EQ(ctx, count, static_cast<int>(c.killed.size()));
        MP_EXPECT_EQ(ctx, first, c.killed.front());
        count = -1;
        MP_EXPECT_OK(ctx, batonCommGetFailedRanks(ctx.comm(), nullptr, 0, &count));
        MP_EXPECT_EQ(ctx, count, static_cast<int>(c.killed.size()));

        ctx.SetStep("batonCommShrink without the killed ranks");
        std::vector<int> excluded = failed;
        batonComm_t shrunk = nullptr;
        MP_ASSERT_OK(ctx,
                     batonCommShrink(ctx.comm(), excluded.data(), static_cast<int>(excluded.size()),
                                     &shrunk, nullptr, BATON_SHRINK_ABORT));
        // Every survivor aborted the old communicator to shrink: still only the killed ranks.
        MP_EXPECT_EQ(ctx, Join(FailedRanks(ctx, ctx.comm())), Join(c.killed));
        MP_EXPECT_EQ(ctx, Join(FailedRanks(ctx, shrunk)), "{}");
        int size = 0;
        MP_EXPECT_OK(ctx, batonCommCount(shrunk, &size));
        MP_EXPECT_EQ(ctx, size, c.nranks - static_cast<int>(c.killed.size()));
        // The survivors add their old ranks; it also keeps every survivor's reads of the old
        // communicator before any of them frees it.
        int sum = ctx.rank(), want = 0;
        for (int q = 0; q < c.nranks; ++q)
          if (std::find(c.killed.begin(), c.killed.end(), q) == c.killed.end()) want += q;
        MP_ASSERT_OK(ctx, batonAllReduce(&sum, &sum, 1, batonInt32, batonSum, shrunk, nullptr));
        MP_EXPECT_EQ(ctx, sum, want);
        MP_EXPECT_EQ(ctx, Join(FailedRanks(ctx, shrunk)), "{}");
        if (ctx.rank() == (c.killed.front() == 0 ? 1 : 0))
          ctx.Log("failed ranks " + Join(failed) + " after: " + ctx.LastError());
        MP_EXPECT_OK(ctx, batonCommDestroy(shrunk));
        MP_EXPECT_OK(ctx, batonCommAbort(ctx.TakeComm()));
      },
      options);
}

INSTANTIATE_TEST_SUITE_P(Kills, FailedRanksKillTest,
                         ::testing::Values(KillCase{"shm", 3, {1}}, KillCase{"shm", 4, {0}},
                                           KillCase{"shm", 5, {2}}, KillCase{"shm", 3, {0, 2}},
                                           KillCase{"shm", 4, {1, 2}}, KillCase{"shm", 5, {1, 3}},
                                           KillCase{"shm", 5, {0, 4}}, KillCase{"tcp", 3, {1}},
                                           KillCase{"tcp", 4, {0}}, KillCase{"tcp", 5, {2}},
                                           KillCase{"tcp", 3, {0, 2}}, KillCase{"tcp", 4, {1, 2}},
                                           KillCase{"tcp", 5, {1, 3}}, KillCase{"tcp", 5, {0, 4}}),
                         CaseName);

class FailedRanksTest : public ::testing::TestWithParam<const char*> {};

// A healthy communicator lists nobody, before and after calls; a rank that
// destroys its communicator on purpose is not failed either.
TEST_P(FailedRanksTest, HealthyAndDestroyedListNone) {
  RunRanks(
      4,
      [](RankContext& ctx) {
        MP_EXPECT_EQ(ctx, Join(FailedRanks(ctx, ctx.comm())), "{}");
        std::vector<int32_t> v(4097, 1);
        MP_ASSERT_OK(ctx, batonAllReduce(v.data(), v.data(), v.size(), batonInt32, batonSum,
                                         ctx.comm(), nullptr));
        MP_EXPECT_EQ(ctx, v[4096], 4);
        MP_EXPECT_EQ(ctx, Join(FailedRanks(ctx, ctx.comm())), "{}");
        auto* gone = static_cast<volatile int*>(ctx.shared());
        if (ctx.rank() == 3) {
          MP_EXPECT_OK(ctx, batonCommDestroy(ctx.TakeComm()));
          gone[0] = 1;
          return;
        }
        const auto start = std::chrono::steady_clock::now();
        while (gone[0] == 0 && SecondsSince(start) < 20)
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        MP_EXPECT_EQ(ctx, Join(FailedRanks(ctx, ctx.comm())), "{}");
      },
      FailureOptions(GetParam()));
}

// batonCommAbort on a communicator that had not failed: that rank is where
// the failure starts, and is listed; the others, which fail because of it
// (and pass its note on), are not.
TEST_P(FailedRanksTest, AbortOfAHealthyCommunicatorIsAFailure) {
  RunRanks(
      4,
      [](RankContext& ctx) {
        if (ctx.rank() == 1) {
          MP_EXPECT_OK(ctx, batonCommAbort(ctx.TakeComm()));
          return;
        }
        std::vector<float> buf(size_t{1} << 16, 1.0f);
        int iterations = 0;
        const batonResult_t r = AllReduceUntilError(ctx.comm(), nullptr, buf, 30, &iterations);
        MP_EXPECT_NE(ctx, r, batonSuccess);
        MP_EXPECT_EQ(ctx, Join(FailedRanks(ctx, ctx.comm())), "{1}") << ctx.LastError();
        // No survivor frees its communicator before all have read the list: a rank this one
        // never connected to that has freed it cannot be told from a dead one (its listener is
        // closed; docs/reliability.md).
        auto* done = static_cast<std::atomic<int>*>(ctx.shared());
        done->fetch_add(1);
        const auto start = std::chrono::steady_clock::now();
        while (done->load() < 3 && SecondsSince(start) < 20)
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
      },
      FailureOptions(GetParam()));
}

// Bad arguments: batonInvalidArgument with a message; the communicator is
// untouched.
TEST(FailedRanksArgumentsTest, BadArgumentsAreRefused) {
  RunRanks(
      2,
      [](RankContext& ctx) {
        int ranks[4] = {-7, -7, -7, -7};
        int n = -7;
        MP_EXPECT_RESULT(ctx, batonCommGetFailedRanks(nullptr, ranks, 4, &n), batonInvalidArgument);
        MP_EXPECT_RESULT(ctx, batonCommGetFailedRanks(ctx.comm(), ranks, 4, nullptr),
                         batonInvalidArgument);
        MP_EXPECT_RESULT(ctx, batonCommGetFailedRanks(ctx.comm(), ranks, -1, &n),
                         batonInvalidArgument);
        MP_EXPECT_NE(ctx, std::string(ctx.LastError()).find("maxRanks"), std::string::npos)
            << ctx.LastError();
        MP_EXPECT_RESULT(ctx, batonCommGetFailedRanks(ctx.comm(), nullptr, 2, &n),
                         batonInvalidArgument);
        MP_EXPECT_EQ(ctx, n, -7);
        MP_EXPECT_EQ(ctx, ranks[0], -7);
        MP_EXPECT_OK(ctx, batonCommGetFailedRanks(ctx.comm(), nullptr, 0, &n));
        MP_EXPECT_EQ(ctx, n, 0);
        MP_EXPECT_OK(ctx, batonCommGetFailedRanks(ctx.comm(), ranks, 4, &n));
        MP_EXPECT_EQ(ctx, n, 0);
        MP_EXPECT_EQ(ctx, ranks[0], -7);
        float v = 1.0f;
        MP_EXPECT_OK(ctx, batonAllReduce(&v, &v, 1, batonFloat, batonSum, ctx.comm(), nullptr));
        MP_EXPECT_EQ(ctx, v, 2.0f);
      },
      FailureOptions("shm"));
}

INSTANTIATE_TEST_SUITE_P(Transports, FailedRanksTest, ::testing::Values("shm", "tcp"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
