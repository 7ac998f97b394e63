// Connections made on first use (BATON_RUNTIME_CONNECT, docs/scaling.md):
// every collective and send/recv pattern on communicators whose pairs
// connect when a call first needs them, checked against values each rank
// computes itself; a peer that dies before any connection to it exists;
// both ranks of a pair connecting at once, many times; and the descriptors
// a ring-only communicator holds.
#include <baton.h>
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "common/mp_harness.h"

namespace {

using baton_test::Options;
using baton_test::RankContext;
using baton_test::RunRanks;

constexpr size_t kCount = 1031;  // odd, and not a multiple of any rank count

// Rank r's element i, as every rank can compute it.
int64_t Value(int r, size_t i) {
  return static_cast<int64_t>(r) * 1000003 + static_cast<int64_t>(i);
}

int OpenDescriptors() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (readdir(d) != nullptr) ++n;
    closedir(d);
  }
  return n - 3;  // ".", ".." and the directory's own descriptor
}

// Every collective, then send/recv: a ring shift and all-to-all sends in
// one group (every rank to every other).
void EveryPattern(RankContext& ctx) {
  const int n = ctx.nranks(), me = ctx.rank();
  batonComm_t comm = ctx.comm();
  std::vector<int64_t> mine(kCount), out(kCount * n), expect(kCount * n);
  for (size_t i = 0; i < kCount; ++i) mine[i] = Value(me, i);

  MP_ASSERT_OK(
      ctx, batonAllReduce(mine.data(), out.data(), kCount, batonInt64, batonSum, comm, nullptr));
  for (size_t i = 0; i < kCount; ++i) {
    int64_t sum = 0;
    for (int r = 0; r < n; ++r) sum += Value(r, i);
    MP_ASSERT_TRUE(ctx, out[i] == sum) << "allreduce element " << i;
  }
  const int root = n - 1;
  std::vector<int64_t> b = mine;
  MP_ASSERT_OK(ctx, batonBroadcast(b.data(), b.data(), kCount, batonInt64, root, comm, nullptr));
  for (size_t i = 0; i < kCount; ++i) MP_ASSERT_TRUE(ctx, b[i] == Value(root, i)) << "broadcast";
  MP_ASSERT_OK(
      ctx, batonReduce(mine.data(), out.data(), kCount, batonInt64, batonMax, 0, comm, nullptr));
  if (me == 0)
    for (size_t i = 0; i < kCount; ++i) MP_ASSERT_TRUE(ctx, out[i] == Value(n - 1, i)) << "reduce";
  MP_ASSERT_OK(ctx, batonAllGather(mine.data(), out.data(), kCount, batonInt64, comm, nullptr));
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < kCount; ++i)
      MP_ASSERT_TRUE(ctx, out[r * kCount + i] == Value(r, i)) << "allgather";
  // Reduce-scatter and all-to-all over n blocks of kCount.
  std::vector<int64_t> blocks(kCount * n), got(kCount * n);
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < kCount; ++i) blocks[r * kCount + i] = Value(me, i) * 7 + r;
  MP_ASSERT_OK(ctx, batonReduceScatter(blocks.data(), got.data(), kCount, batonInt64, batonSum,
                                       comm, nullptr));
  for (size_t i = 0; i < kCount; ++i) {
    int64_t sum = 0;
    for (int r = 0; r < n; ++r) sum += Value(r, i) * 7 + me;
    MP_ASSERT_TRUE(ctx, got[i] == sum) << "reducescatter element " << i;
  }
  MP_ASSERT_OK(ctx, batonAlltoAll(blocks.data(), got.data(), kCount, batonInt64, comm, nullptr));
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < kCount; ++i)
      MP_ASSERT_TRUE(ctx, got[r * kCount + i] == Value(r, i) * 7 + me) << "alltoall";
  MP_ASSERT_OK(ctx, batonBarrier(comm, nullptr));

  // Ring shift by a stride that is no ring neighbour when n > 3.
  const int stride = n > 3 ? n / 2 : 1;
  const int to = (me + stride) % n, from = (me - stride + n) % n;
  std::vector<int64_t> recv(kCount);
  MP_ASSERT_OK(ctx, batonGroupStart());
  MP_ASSERT_OK(ctx, batonSend(mine.data(), kCount, batonInt64, to, comm, nullptr));
  MP_ASSERT_OK(ctx, batonRecv(recv.data(), kCount, batonInt64, from, comm, nullptr));
  MP_ASSERT_OK(ctx, batonGroupEnd());
  for (size_t i = 0; i < kCount; ++i) MP_ASSERT_TRUE(ctx, recv[i] == Value(from, i)) << "shift";

  // Every rank to every other, in one group.
  MP_ASSERT_OK(ctx, batonGroupStart());
  for (int r = 0; r < n; ++r) {
    if (r == me) continue;
    MP_ASSERT_OK(ctx, batonSend(&blocks[r * kCount], kCount, batonInt64, r, comm, nullptr));
    MP_ASSERT_OK(ctx, batonRecv(&got[r * kCount], kCount, batonInt64, r, comm, nullptr));
  }
  MP_ASSERT_OK(ctx, batonGroupEnd());
  for (int r = 0; r < n; ++r)
    if (r != me)
      for (size_t i = 0; i < kCount; ++i)
        MP_ASSERT_TRUE(ctx, got[r * kCount + i] == Value(r, i) * 7 + me) << "all sends";
}

class LazyTest : public ::testing::TestWithParam<std::tuple<int, const char*>> {};

TEST_P(LazyTest, EveryCollectiveAndSendRecvPattern) {
  const auto [nranks, transport] = GetParam();
  Options options;
  options.env = {{"BATON_TRANSPORT", transport}, {"BATON_RUNTIME_CONNECT", "1"}};
  options.deadline = std::chrono::seconds(240);
  RunRanks(nranks, EveryPattern, options);
}

INSTANTIATE_TEST_SUITE_P(Ranks, LazyTest,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 5, 6, 7, 8, 9, 16),
                                            ::testing::Values("shm", "tcp")),
                         [](const auto& info) {
                           return std::string(std::get<1>(info.param)) + "_" +
                                  std::to_string(std::get<0>(info.param)) + "ranks";
                         });

// The full mesh at creation (BATON_RUNTIME_CONNECT=0) still works.
class MeshTest : public ::testing::TestWithParam<const char*> {};

TEST_P(MeshTest, EveryCollectiveAndSendRecvPattern) {
  Options options;
  options.env = {{"BATON_TRANSPORT", GetParam()}, {"BATON_RUNTIME_CONNECT", "0"}};
  options.deadline = std::chrono::seconds(240);
  RunRanks(5, EveryPattern, options);
}

INSTANTIATE_TEST_SUITE_P(Transports, MeshTest, ::testing::Values("shm", "tcp"));

class LazyTransportTest : public ::testing::TestWithParam<const char*> {};

// Rank 2 dies right after creation; ring order on one host is rank order,
// so ranks 0 and 2 (of 4) were never connected. Rank 0 then sends to it:
// an error naming rank 2 within the timeout, not a hang.
TEST_P(LazyTransportTest, PeerDiesBeforeItsConnection) {
  Options options;
  options.env = {{"BATON_TRANSPORT", GetParam()}, {"BATON_TIMEOUT", "10"}};
  options.expected_signal = {{2, SIGKILL}};
  options.deadline = std::chrono::seconds(60);
  RunRanks(
      4,
      [](RankContext& ctx) {
        if (ctx.rank() == 2) raise(SIGKILL);
        if (ctx.rank() != 0) {
          std::this_thread::sleep_for(std::chrono::seconds(2));
          return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        int64_t v = 1;
        const auto start = std::chrono::steady_clock::now();
        const batonResult_t r = batonSend(&v, 1, batonInt64, 2, ctx.comm(), nullptr);
        const double took =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        MP_EXPECT_TRUE(ctx, r != batonSuccess);
        const std::string why = batonGetLastError(ctx.comm());
        MP_EXPECT_TRUE(ctx, why.find("rank 2") != std::string::npos) << why;
        MP_EXPECT_TRUE(ctx, took < 10) << took << " s";
        batonCommAbort(ctx.comm());  // frees it
        ctx.set_comm(nullptr);
      },
      options);
}

// Rank 3 of 6 aborts right after creation; it is connected to its ring
// neighbours 2 and 4 only. Its failure note reaches ranks 0, 1 and 5 over
// the ring (each rank passes the first note on once), so their ring
// allreduces fail naming rank 3, long before BATON_TIMEOUT.
TEST_P(LazyTransportTest, FailureNoteTravelsTheRing) {
  Options options;
  options.env = {{"BATON_TRANSPORT", GetParam()}, {"BATON_TIMEOUT", "60"}, {"BATON_ALGO", "ring"}};
  options.deadline = std::chrono::seconds(120);
  RunRanks(
      6,
      [](RankContext& ctx) {
        if (ctx.rank() == 3) {
          batonCommAbort(ctx.comm());
          ctx.set_comm(nullptr);
          return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        std::vector<float> buf(1000, 1.0f);
        const auto start = std::chrono::steady_clock::now();
        const batonResult_t r = batonAllReduce(buf.data(), buf.data(), buf.size(), batonFloat,
                                               batonSum, ctx.comm(), nullptr);
        const double took =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        MP_EXPECT_TRUE(ctx, r != batonSuccess);
        const std::string why = batonGetLastError(ctx.comm());
        MP_EXPECT_TRUE(ctx, why.find("rank 3") != std::string::npos) << why;
        MP_EXPECT_TRUE(ctx, took < 20) << took << " s";
      },
      options);
}

// Both ranks of a pair need each other at once: ranks r and r + n/2 (no
// ring neighbours) exchange in a fresh communicator, many times over.
TEST_P(LazyTransportTest, ConnectRace) {
  Options options;
  options.env = {{"BATON_TRANSPORT", GetParam()}};
  options.deadline = std::chrono::seconds(180);
  RunRanks(
      6,
      [](RankContext& ctx) {
        const int n = ctx.nranks(), me = ctx.rank(), other = (me + n / 2) % n;
        for (int round = 0; round < 25; ++round) {
          batonComm_t sub = nullptr;
          MP_ASSERT_OK(ctx, batonCommSplit(ctx.comm(), 0, me, &sub, nullptr));
          int64_t out = me * 100 + round, in = -1;
          MP_ASSERT_OK(ctx, batonGroupStart());
          MP_ASSERT_OK(ctx, batonSend(&out, 1, batonInt64, other, sub, nullptr));
          MP_ASSERT_OK(ctx, batonRecv(&in, 1, batonInt64, other, sub, nullptr));
          MP_ASSERT_OK(ctx, batonGroupEnd());
          MP_ASSERT_TRUE(ctx, in == other * 100 + round) << "round " << round;
          MP_ASSERT_OK(ctx, batonCommDestroy(sub));
        }
      },
      options);
}

// A communicator that only runs ring allreduces holds its ring neighbours'
// connections: a bounded number of descriptors at 16 ranks, where the full
// mesh holds 15 or 30 sockets.
TEST_P(LazyTransportTest, RingOnlyDescriptors) {
  Options options;
  options.env = {{"BATON_TRANSPORT", GetParam()}, {"BATON_ALGO", "ring"}};
  options.init_comm = false;
  options.deadline = std::chrono::seconds(180);
  RunRanks(
      16,
      [](RankContext& ctx) {
        const int before = OpenDescriptors();
        batonComm_t comm = nullptr;
        MP_ASSERT_OK(ctx, batonCommInitRank(&comm, ctx.nranks(), ctx.id(), ctx.rank()));
        ctx.set_comm(comm);
        std::vector<float> buf(1 << 16, 1.0f);
        for (size_t count : {size_t{1}, size_t{1000}, buf.size()})
          MP_ASSERT_OK(ctx, batonAllReduce(buf.data(), buf.data(), count, batonFloat, batonSum,
                                           comm, nullptr));
        const int held = OpenDescriptors() - before;
        // TCP: 2 neighbours x (data + control), the listener, epoll, three
        // eventfds, the flight recorder; shared memory fewer.
        MP_EXPECT_TRUE(ctx, held <= 14) << held << " descriptors";
        if (ctx.rank() == 0) printf("rank 0 holds %d descriptors\n", held);
      },
      options);
}

INSTANTIATE_TEST_SUITE_P(Transports, LazyTransportTest, ::testing::Values("shm", "tcp"));

}  // namespace
