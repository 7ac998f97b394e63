// batonConfig_t and the creation calls around it: a config's name and
// timeout reach the communicator, nonblocking creation (init, split,
// shrink) returns batonInProgress and completes when polled, abort stops a
// creation that waits for a rank that never comes, bad configs are refused,
// batonCommInitAll makes several ranks in one process, batonCommFinalize
// flushes queued work, batonCommSetCallTimeout bounds the calls made after it.
#include <baton.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "base/flight_record.h"
#include "common/mp_harness.h"

namespace {

using baton_test::Options;
using baton_test::RankContext;
using baton_test::RunRanks;

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Polls a nonblocking creation to its end; the final state.
batonResult_t PollCreation(batonComm_t comm, int* polls) {
  batonResult_t state = batonInProgress;
  *polls = 0;
  for (;;) {
    if (batonCommGetAsyncError(comm, &state) != batonSuccess) return batonInternalError;
    if (state != batonInProgress) return state;
    ++*polls;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

// Every rank adds rank + 1; 0 when the sum is right.
bool SumIsRight(batonComm_t comm, int n) {
  int rank = -1;
  if (batonCommUserRank(comm, &rank) != batonSuccess) return false;
  int64_t v = rank + 1;
  if (batonAllReduce(&v, &v, 1, batonInt64, batonSum, comm, nullptr) != batonSuccess) return false;
  return v == int64_t(n) * (n + 1) / 2;
}

Options NoInit() {
  Options options;
  options.init_comm = false;
  return options;
}

TEST(ConfigTest, NameAndTimeoutReachTheCommunicator) {
  RunRanks(
      3,
      [](RankContext& ctx) {
        batonConfig_t config = BATON_CONFIG_INITIALIZER;
        config.commName = "gradients";
        config.timeout = 30;
        batonComm_t comm = nullptr;
        MP_ASSERT_OK(ctx, batonCommInitRankConfig(&comm, 3, ctx.id(), ctx.rank(), &config));
        ctx.set_comm(comm);
        MP_EXPECT_TRUE(ctx, SumIsRight(comm, 3));
        // The flight recorder carries the name (batonrun's table shows it).
        bool named = false;
        for (const std::string& path : baton::FlightFilesOf(getpid())) {
          baton::FlightSnapshot s;
          if (baton::ReadFlightFile(path, &s) && s.rank == ctx.rank())
            named = s.name == "gradients";
        }
        MP_EXPECT_TRUE(ctx, named);
        // A child inherits the name unless its config gives another.
        batonComm_t child = nullptr;
        batonConfig_t child_config = BATON_CONFIG_INITIALIZER;
        child_config.commName = "child";
        MP_ASSERT_OK(ctx, batonCommSplit(comm, 0, ctx.rank(), &child, &child_config));
        MP_EXPECT_TRUE(ctx, SumIsRight(child, 3));
        MP_EXPECT_OK(ctx, batonCommDestroy(child));
      },
      NoInit());
}

// Flight-recorder files of dead processes are removed when a communicator
// is created; files whose owner lives are kept, even when the pid in their
// name is no process here (an owner in another pid namespace). Liveness is
// the owner's flock, not the name's pid.
TEST(FlightFilesTest, StaleRemovedLiveKept) {
  const std::string stale = baton::FlightFilePath(2147483000, 0x5eed, 0);
  const std::string live = baton::FlightFilePath(2147483001, 0x5eed, 1);
  int ready[2], release[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(release), 0);
  // The live file's owner: locks it, says so, and holds the lock until the
  // release pipe closes (or 60 s pass).
  const pid_t owner = fork();
  ASSERT_GE(owner, 0);
  if (owner == 0) {
    close(ready[0]);
    close(release[1]);
    const int fd = open(live.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0 || flock(fd, LOCK_SH) != 0 || write(ready[1], "x", 1) != 1) _exit(1);
    pollfd p{release[0], POLLIN, 0};
    poll(&p, 1, 60000);
    _exit(0);
  }
  close(ready[1]);
  close(release[0]);
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1) << "the owner could not lock " << live;
  {
    const int fd = open(stale.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0);
    close(fd);  // no lock: as if its owner had died
  }
  RunRanks(2, [](RankContext& ctx) { MP_EXPECT_TRUE(ctx, SumIsRight(ctx.comm(), 2)); });
  EXPECT_NE(access(stale.c_str(), F_OK), 0) << stale << " was kept";
  EXPECT_EQ(access(live.c_str(), F_OK), 0) << live << " was removed while its owner lives";
  close(release[1]);
  close(ready[0]);
  int status = 0;
  waitpid(owner, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  unlink(live.c_str());
  unlink(stale.c_str());
}

// A config's timeout rules the creation: rank 1 never comes, so rank 0's
// init gives up after the config's 1 s although BATON_TIMEOUT says 300.
TEST(ConfigTest, ConfigTimeoutOverridesBatonTimeout) {
  Options options = NoInit();
  options.env = {{"BATON_TIMEOUT", "300"}};
  RunRanks(
      2,
      [](RankContext& ctx) {
        if (ctx.rank() == 1) return;
        batonConfig_t config = BATON_CONFIG_INITIALIZER;
        config.timeout = 1;
        batonComm_t comm = nullptr;
        const auto start = std::chrono::steady_clock::now();
        const batonResult_t r = batonCommInitRankConfig(&comm, 2, ctx.id(), 0, &config);
        const double took = SecondsSince(start);
        MP_EXPECT_EQ(ctx, r, batonTimeout);
        MP_EXPECT_TRUE(ctx, took >= 0.9 && took < 10) << " took " << took << " s";
        MP_EXPECT_TRUE(ctx, comm == nullptr);
      },
      options);
}

TEST(ConfigTest, NonblockingInitCompletesWhenPolled) {
  RunRanks(
      3,
      [](RankContext& ctx) {
        // Rank 2 comes late, so the others are still creating for a while.
        if (ctx.rank() == 2) std::this_thread::sleep_for(std::chrono::milliseconds(300));
        batonConfig_t config = BATON_CONFIG_INITIALIZER;
        config.blocking = 0;
        batonComm_t comm = nullptr;
        const batonResult_t r = batonCommInitRankConfig(&comm, 3, ctx.id(), ctx.rank(), &config);
        MP_ASSERT_EQ(ctx, r, batonInProgress);
        MP_ASSERT_TRUE(ctx, comm != nullptr);
        ctx.set_comm(comm);
        if (ctx.rank() == 0) {
          // Still creating: queries answer, calls are refused with a reason.
          int count = 0, rank = -1;
          MP_EXPECT_OK(ctx, batonCommCount(comm, &count));
          MP_EXPECT_OK(ctx, batonCommUserRank(comm, &rank));
          MP_EXPECT_EQ(ctx, count, 3);
          MP_EXPECT_EQ(ctx, rank, 0);
          int64_t v = 1;
          MP_EXPECT_EQ(ctx, batonAllReduce(&v, &v, 1, batonInt64, batonSum, comm, nullptr),
                       batonInvalidUsage);
          MP_EXPECT_TRUE(ctx, strstr(batonGetLastError(nullptr), "still being created") != nullptr)
              << batonGetLastError(nullptr);
        }
        int polls = 0;
        MP_ASSERT_EQ(ctx, PollCreation(comm, &polls), batonSuccess);
        if (ctx.rank() == 0) MP_EXPECT_TRUE(ctx, polls > 0) << " never saw batonInProgress";
        MP_EXPECT_TRUE(ctx, SumIsRight(comm, 3));
      },
      NoInit());
}

// A nonblocking creation waiting for a rank that never comes: abort returns
// at once, and the creation's thread stops waiting (the process exits
// cleanly right after, with nothing left behind).
TEST(ConfigTest, AbortStopsANonblockingCreation) {
  Options options = NoInit();
  options.env = {{"BATON_TIMEOUT", "60"}};
  RunRanks(
      2,
      [](RankContext& ctx) {
        if (ctx.rank() == 1) return;
        batonConfig_t config = BATON_CONFIG_INITIALIZER;
        config.blocking = 0;
        batonComm_t comm = nullptr;
        MP_ASSERT_EQ(ctx, batonCommInitRankConfig(&comm, 2, ctx.id(), 0, &config), batonInProgress);
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        batonResult_t state = batonSuccess;
        MP_EXPECT_OK(ctx, batonCommGetAsyncError(comm, &state));
        MP_EXPECT_EQ(ctx, state, batonInProgress);
        const auto start = std::chrono::steady_clock::now();
        MP_EXPECT_OK(ctx, batonCommAbort(comm));
        MP_EXPECT_TRUE(ctx, SecondsSince(start) < 0.5);
        // The handle is gone.
        MP_EXPECT_EQ(ctx, batonCommGetAsyncError(comm, &state), batonInvalidArgument);
      },
      options);
}

// A failed nonblocking creation reports its error through the handle, and
// destroy frees it.
TEST(ConfigTest, NonblockingCreationFailureIsReported) {
  RunRanks(
      2,
      [](RankContext& ctx) {
        if (ctx.rank() == 1) return;
        batonConfig_t config = BATON_CONFIG_INITIALIZER;
        config.blocking = 0;
        config.timeout = 1;
        batonComm_t comm = nullptr;
        MP_ASSERT_EQ(ctx, batonCommInitRankConfig(&comm, 2, ctx.id(), 0, &config), batonInProgress);
        int polls = 0;
        MP_EXPECT_EQ(ctx, PollCreation(comm, &polls), batonTimeout);
        MP_EXPECT_TRUE(ctx, strstr(batonGetLastError(comm), "rank 0 of 2") != nullptr)
            << batonGetLastError(comm);
        int64_t v = 1;
        MP_EXPECT_EQ(ctx, batonAllReduce(&v, &v, 1, batonInt64, batonSum, comm, nullptr),
                     batonTimeout);
        MP_EXPECT_OK(ctx, batonCommDestroy(comm));
      },
      NoInit());
}

TEST(ConfigTest, NonblockingSplitAndShrink) {
  RunRanks(4, [](RankContext& ctx) {
    batonConfig_t config = BATON_CONFIG_INITIALIZER;
    config.blocking = 0;
    // Ranks 0-2 split off; rank 3 takes no part (it returns at once).
    const int color = ctx.rank() < 3 ? 7 : BATON_SPLIT_NOCOLOR;
    batonComm_t child = nullptr;
    const batonResult_t r = batonCommSplit(ctx.comm(), color, ctx.rank(), &child, &config);
    if (ctx.rank() == 3) {
      MP_EXPECT_OK(ctx, r);
      MP_EXPECT_TRUE(ctx, child == nullptr);
      return;
    }
    MP_ASSERT_EQ(ctx, r, batonInProgress);
    int polls = 0;
    MP_ASSERT_EQ(ctx, PollCreation(child, &polls), batonSuccess);
    MP_EXPECT_TRUE(ctx, SumIsRight(child, 3));
    // The child shrinks by choice without its rank 2, nonblocking too.
    int rank = -1;
    MP_ASSERT_OK(ctx, batonCommUserRank(child, &rank));
    if (rank != 2) {
      int excluded[] = {2};
      batonComm_t shrunk = nullptr;
      MP_ASSERT_EQ(ctx, batonCommShrink(child, excluded, 1, &shrunk, &config, BATON_SHRINK_DEFAULT),
                   batonInProgress);
      MP_ASSERT_EQ(ctx, PollCreation(shrunk, &polls), batonSuccess);
      MP_EXPECT_TRUE(ctx, SumIsRight(shrunk, 2));
      MP_EXPECT_OK(ctx, batonCommDestroy(shrunk));
    }
    MP_EXPECT_OK(ctx, batonCommDestroy(child));
  });
}

TEST(ConfigTest, BadConfigsAreRefused) {
  batonUniqueId id;
  memset(&id, 0, sizeof(id));  // the config is checked before the id
  auto refused = [&](batonConfig_t config, const char* words) {
    batonComm_t comm = nullptr;
    EXPECT_EQ(batonCommInitRankConfig(&comm, 1, id, 0, &config), batonInvalidArgument);
    EXPECT_NE(std::string(batonGetLastError(nullptr)).find(words), std::string::npos)
        << batonGetLastError(nullptr);
    EXPECT_EQ(comm, nullptr);
  };
  batonConfig_t c = BATON_CONFIG_INITIALIZER;
  c.magic = 0;
  refused(c, "BATON_CONFIG_INITIALIZER");
  c = BATON_CONFIG_INITIALIZER;
  c.size = 4;
  refused(c, "size");
  c = BATON_CONFIG_INITIALIZER;
  c.blocking = 5;
  refused(c, "blocking");
  c = BATON_CONFIG_INITIALIZER;
  c.timeout = -1;
  refused(c, "timeout");
  c = BATON_CONFIG_INITIALIZER;
  c.splitShare = 3;
  refused(c, "splitShare");
  const std::string long_name(100, 'x');
  c = BATON_CONFIG_INITIALIZER;
  c.commName = long_name.c_str();
  refused(c, "commName");
  // A config from an older header (only up to `blocking`) is read as such.
  batonUniqueId real;
  ASSERT_EQ(batonGetUniqueId(&real), batonSuccess);
  c = BATON_CONFIG_INITIALIZER;
  c.size = offsetof(batonConfig_t, commName);
  c.commName = long_name.c_str();  // beyond its size: not read
  batonComm_t comm = nullptr;
  EXPECT_EQ(batonCommInitRankConfig(&comm, 1, real, 0, &c), batonSuccess)
      << batonGetLastError(nullptr);
  EXPECT_EQ(batonCommDestroy(comm), batonSuccess);
  // NULL is the defaults.
  ASSERT_EQ(batonGetUniqueId(&real), batonSuccess);
  EXPECT_EQ(batonCommInitRankConfig(&comm, 1, real, 0, nullptr), batonSuccess);
  EXPECT_EQ(batonCommDestroy(comm), batonSuccess);
}

// Ranks in one process, one thread each, over shared memory and TCP.
void InitAllAndReduce(int ndev) {
  std::vector<batonComm_t> comms(ndev, nullptr);
  ASSERT_EQ(batonCommInitAll(comms.data(), ndev, nullptr), batonSuccess)
      << batonGetLastError(nullptr);
  std::vector<int> ok(ndev, 0);
  std::vector<std::thread> threads;
  for (int r = 0; r < ndev; ++r)
    threads.emplace_back([&, r] {
      int rank = -1, count = 0;
      batonCommUserRank(comms[r], &rank);
      batonCommCount(comms[r], &count);
      std::vector<float> v(4097, float(rank + 1));
      ok[r] = rank == r && count == ndev &&
              batonAllReduce(v.data(), v.data(), v.size(), batonFloat32, batonSum, comms[r],
                             nullptr) == batonSuccess &&
              v[0] == float(ndev * (ndev + 1) / 2) && v[4096] == v[0];
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < ndev; ++r) {
    EXPECT_EQ(ok[r], 1) << "rank " << r << " of " << ndev;
    EXPECT_EQ(batonCommDestroy(comms[r]), batonSuccess);
  }
}

TEST(InitAllTest, RanksInOneProcess) {
  for (int ndev : {1, 2, 4}) InitAllAndReduce(ndev);
}

TEST(InitAllTest, RanksInOneProcessOverTcp) {
  setenv("BATON_TRANSPORT", "tcp", 1);
  InitAllAndReduce(3);
  unsetenv("BATON_TRANSPORT");
}

TEST(InitAllTest, BadArgumentsAreRefused) {
  batonComm_t comms[3];
  EXPECT_EQ(batonCommInitAll(nullptr, 2, nullptr), batonInvalidArgument);
  EXPECT_EQ(batonCommInitAll(comms, 0, nullptr), batonInvalidArgument);
  const int duplicate[] = {0, 1, 1};
  EXPECT_EQ(batonCommInitAll(comms, 3, duplicate), batonInvalidArgument);
  EXPECT_NE(std::string(batonGetLastError(nullptr)).find("twice"), std::string::npos);
  const int negative[] = {0, -1};
  EXPECT_EQ(batonCommInitAll(comms, 2, negative), batonInvalidArgument);
}

TEST(FinalizeTest, FlushesQueuedWorkAndReportsErrors) {
  RunRanks(2, [](RankContext& ctx) {
    batonStream_t stream = nullptr;
    MP_ASSERT_OK(ctx, batonStreamCreate(&stream));
    std::vector<int32_t> v(1 << 16, ctx.rank() + 1);
    for (int i = 0; i < 8; ++i)
      MP_ASSERT_OK(ctx, batonAllReduce(v.data(), v.data(), v.size(), batonInt32, batonMax,
                                       ctx.comm(), stream));
    MP_EXPECT_OK(ctx, batonCommFinalize(ctx.comm()));
    // Every queued call has run by now: the data is final (the stream's
    // own bookkeeping may lag a moment behind).
    MP_EXPECT_EQ(ctx, v[0], 2);
    MP_EXPECT_EQ(ctx, v.back(), 2);
    MP_EXPECT_OK(ctx, batonStreamSynchronize(stream));
    MP_EXPECT_OK(ctx, batonStreamDestroy(stream));
    MP_EXPECT_EQ(ctx, batonCommFinalize(nullptr), batonInvalidArgument);
  });
}

// A call's own timeout (batonCommSetCallTimeout) under a communicator's 60 s:
// calls made with it work as before; one that rank 0 never joins fails after
// its 1 s on ranks 1 and 2 although it was queued on a stream and the value
// was reset before it ran, naming rank 0; the communicator is then failed,
// as after its own timeout, on every rank.
TEST(CallTimeoutTest, BoundsTheCallsMadeAfterIt) {
  Options options;
  options.env = {{"BATON_TIMEOUT", "60"}};
  RunRanks(
      3,
      [](RankContext& ctx) {
        batonComm_t comm = ctx.comm();
        MP_EXPECT_EQ(ctx, batonCommSetCallTimeout(nullptr, 1), batonInvalidArgument);
        MP_EXPECT_EQ(ctx, batonCommSetCallTimeout(comm, -3), batonInvalidArgument);
        batonStream_t stream = nullptr;
        MP_ASSERT_OK(ctx, batonStreamCreate(&stream));
        for (int timeout : {5, 0}) {  // 0: forever
          MP_ASSERT_OK(ctx, batonCommSetCallTimeout(comm, timeout));
          std::vector<int32_t> v(1001, ctx.rank() + 1), w(7, 2 * ctx.rank());
          MP_ASSERT_OK(ctx, batonAllReduce(v.data(), v.data(), v.size(), batonInt32, batonSum, comm,
                                           nullptr));
          MP_ASSERT_OK(ctx, batonAllReduce(w.data(), w.data(), w.size(), batonInt32, batonMax, comm,
                                           stream));
          MP_ASSERT_OK(ctx, batonCommSetCallTimeout(comm, BATON_CONFIG_UNDEF_INT));
          MP_ASSERT_OK(ctx, batonStreamSynchronize(stream));
          MP_EXPECT_EQ(ctx, v[0], 6);
          MP_EXPECT_EQ(ctx, v.back(), 6);
          MP_EXPECT_EQ(ctx, w[3], 4);
        }
        auto* failed = static_cast<std::atomic<int>*>(ctx.shared());
        int64_t x = 1;
        if (ctx.rank() != 0) {
          MP_ASSERT_OK(ctx, batonCommSetCallTimeout(comm, 1));
          const auto start = std::chrono::steady_clock::now();
          MP_ASSERT_OK(ctx, batonAllReduce(&x, &x, 1, batonInt64, batonSum, comm, stream));
          MP_ASSERT_OK(ctx, batonCommSetCallTimeout(comm, BATON_CONFIG_UNDEF_INT));
          const batonResult_t r = batonStreamSynchronize(stream);
          const double took = SecondsSince(start);
          // batonTimeout where this rank timed out, a remote error where the
          // other one's note came first.
          MP_EXPECT_TRUE(ctx, r == batonTimeout || r == batonRemoteError)
              << baton_test::ResultName(r);
          MP_EXPECT_TRUE(ctx, took >= 0.9 && took < 20) << " took " << took << " s";
          const std::string error = batonGetLastError(comm);
          MP_EXPECT_TRUE(ctx, error.find("rank 0") != std::string::npos) << error;
          MP_EXPECT_TRUE(ctx, r != batonTimeout || error.find("own timeout") != std::string::npos)
              << error;
          MP_EXPECT_NE(ctx, batonAllReduce(&x, &x, 1, batonInt64, batonSum, comm, nullptr),
                       batonSuccess);
          failed->fetch_add(1);
        } else {
          // Out of band: wait for the others to fail, then find comm failed.
          const auto start = std::chrono::steady_clock::now();
          while (failed->load() < 2 && SecondsSince(start) < 60)
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
          MP_EXPECT_EQ(ctx, failed->load(), 2);
          MP_EXPECT_NE(ctx, batonAllReduce(&x, &x, 1, batonInt64, batonSum, comm, nullptr),
                       batonSuccess);
        }
        MP_EXPECT_OK(ctx, batonStreamDestroy(stream));
      },
      options);
}

}  // namespace
