// batonRecvAny: receives matched against whichever peer's send comes first,
// over shared memory and TCP, interleaved with named receives and
// collectives; every byte checked against a pattern each rank computes on
// its own; size and datatype mismatches, a timeout and a peer that aborts.
#include <baton.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "common/mp_harness.h"
#include "common/reference.h"

namespace {

using baton_test::Options;
using baton_test::RankContext;
using baton_test::RunRanks;

// The bytes rank `from` sends rank `to` in round `round`: a reference every
// rank computes alone (a byte-wise hash, whatever the datatype).
void Pattern(int from, int to, int round, size_t bytes, std::vector<uint8_t>* out) {
  out->resize(bytes);
  uint64_t h = 0x9e3779b97f4a7c15ull * (uint64_t(from) * 131 + uint64_t(to) * 7 + round + 1);
  for (size_t i = 0; i < bytes; ++i) {
    h ^= h >> 31;
    h *= 0xbf58476d1ce4e5b9ull;
    (*out)[i] = static_cast<uint8_t>(h >> 56);
  }
}

struct Size {
  size_t count;
  batonDataType_t type;
};

// Rounds: each rank in turn receives one message from every other rank,
// from one of them (the next rank) by name and from the rest with
// batonRecvAny, while the senders start after short delays that differ per
// rank and round, so the arrival order varies. An allreduce ends each round:
// ranks that have sent move on to it and their next message to the receiver
// opens the allreduce, which the any-source receives must pass over.
void RoundsBody(RankContext& ctx, batonStream_t stream) {
  const int rank = ctx.rank(), n = ctx.nranks();
  // 1, odd, several MiB (3 MiB + 6 bytes), in several datatypes.
  const Size sizes[] = {{1, batonInt8},       {7, batonFloat32},
                        {1001, batonFloat64}, {13, batonBfloat16},
                        {65537, batonUint8},  {(3u << 20) / 2 + 3, batonFloat16},
                        {5, batonInt64}};
  int round = 0;
  for (const Size& size : sizes) {
    const size_t bytes = size.count * SizeOf(size.type);
    for (int receiver = 0; receiver < n; ++receiver, ++round) {
      const std::string what = "round " + std::to_string(round) + " (receiver " +
                               std::to_string(receiver) + ", " + std::to_string(size.count) +
                               " elements)";
      ctx.SetStep(what);
      if (rank == receiver) {
        std::vector<int> seen(n, 0);
        std::vector<uint8_t> got(bytes), want;
        const int named = (receiver + 1) % n;
        for (int k = 0; k < n - 1; ++k) {
          int source = -1;
          memset(got.data(), 0xee, got.size());
          if (k == 0 && n > 2) {
            MP_ASSERT_OK(ctx,
                         batonRecv(got.data(), size.count, size.type, named, ctx.comm(), stream));
            source = named;
          } else {
            MP_ASSERT_OK(
                ctx, batonRecvAny(got.data(), size.count, size.type, &source, ctx.comm(), stream))
                << " " << what;
          }
          if (stream != nullptr) MP_ASSERT_OK(ctx, batonStreamSynchronize(stream));
          MP_ASSERT_TRUE(ctx, source >= 0 && source < n && source != rank)
              << " source " << source << " in " << what;
          MP_EXPECT_EQ(ctx, seen[source], 0) << " rank " << source << " matched twice in " << what;
          seen[source] = 1;
          Pattern(source, rank, round, bytes, &want);
          MP_EXPECT_TRUE(ctx, got == want) << " data from rank " << source << " in " << what;
        }
      } else {
        // Delays from 0 to ~1.5 ms, a different order of senders per round.
        usleep(static_cast<useconds_t>(((rank * 7 + round * 3) % n) * 500));
        std::vector<uint8_t> data;
        Pattern(rank, receiver, round, bytes, &data);
        MP_ASSERT_OK(ctx,
                     batonSend(data.data(), size.count, size.type, receiver, ctx.comm(), stream));
        // `data` must outlive the queued send.
        if (stream != nullptr) MP_ASSERT_OK(ctx, batonStreamSynchronize(stream));
      }
      int64_t v = rank + round, sum = 0;
      MP_ASSERT_OK(ctx, batonAllReduce(&v, &sum, 1, batonInt64, batonSum, ctx.comm(), stream));
      if (stream != nullptr) MP_ASSERT_OK(ctx, batonStreamSynchronize(stream));
      MP_ASSERT_EQ(ctx, sum, int64_t{n} * (n - 1) / 2 + int64_t{n} * round);
    }
  }
  // Several messages from each peer, all taken with batonRecvAny: each
  // peer's are matched in its send order.
  if (n <= 5) {
    ctx.SetStep("three messages from every peer");
    const int per_peer = 3;
    if (rank == 0) {
      std::vector<int> next(n, 0);
      for (int k = 0; k < per_peer * (n - 1); ++k) {
        int64_t got[2] = {-1, -1};
        int source = -1;
        MP_ASSERT_OK(ctx, batonRecvAny(got, 2, batonInt64, &source, ctx.comm(), stream));
        if (stream != nullptr) MP_ASSERT_OK(ctx, batonStreamSynchronize(stream));
        MP_ASSERT_TRUE(ctx, source > 0 && source < n);
        MP_EXPECT_EQ(ctx, got[0], int64_t{source});
        MP_EXPECT_EQ(ctx, got[1], int64_t{next[source]++});
      }
      for (int p = 1; p < n; ++p) MP_EXPECT_EQ(ctx, next[p], per_peer);
    } else {
      for (int64_t i = 0; i < per_peer; ++i) {
        const int64_t msg[2] = {rank, i};
        MP_ASSERT_OK(ctx, batonSend(msg, 2, batonInt64, 0, ctx.comm(), stream));
        if (stream != nullptr) MP_ASSERT_OK(ctx, batonStreamSynchronize(stream));
      }
      if (stream != nullptr) MP_ASSERT_OK(ctx, batonStreamSynchronize(stream));
    }
    MP_ASSERT_OK(ctx, batonBarrier(ctx.comm(), stream));
    if (stream != nullptr) MP_ASSERT_OK(ctx, batonStreamSynchronize(stream));
  }
}

class AnySourceTest : public ::testing::TestWithParam<std::tuple<int, const char*>> {};

TEST_P(AnySourceTest, EveryRankReceivesFromAllInAnyOrder) {
  const auto [nranks, transport] = GetParam();
  Options options;
  options.env = {{"BATON_TRANSPORT", transport}};
  options.deadline = std::chrono::seconds(120);
  RunRanks(
      nranks,
      [](RankContext& ctx) {
        RoundsBody(ctx, nullptr);
        batonStream_t s = nullptr;
        MP_ASSERT_OK(ctx, batonStreamCreate(&s));
        if (ctx.nranks() <= 3) RoundsBody(ctx, s);
        MP_EXPECT_OK(ctx, batonStreamDestroy(s));
      },
      options);
}

INSTANTIATE_TEST_SUITE_P(Ranks, AnySourceTest,
                         ::testing::Combine(::testing::Values(2, 3, 4, 5, 8),
                                            ::testing::Values("shm", "tcp")),
                         [](const auto& info) {
                           return std::string(std::get<1>(info.param)) + "_" +
                                  std::to_string(std::get<0>(info.param)) + "ranks";
                         });

// Arguments refused before anything runs; the communicator stays usable.
TEST(AnySource, RefusesBadArguments) {
  RunRanks(2, [](RankContext& ctx) {
    float buf[4] = {};
    int source = -1;
    MP_EXPECT_RESULT(ctx, batonRecvAny(buf, 4, batonFloat32, nullptr, ctx.comm(), nullptr),
                     batonInvalidArgument);
    MP_EXPECT_RESULT(ctx, batonRecvAny(buf, 0, batonFloat32, &source, ctx.comm(), nullptr),
                     batonInvalidArgument);
    MP_EXPECT_RESULT(ctx, batonRecvAny(nullptr, 4, batonFloat32, &source, ctx.comm(), nullptr),
                     batonInvalidArgument);
    MP_EXPECT_OK(ctx, batonGroupStart());
    MP_EXPECT_RESULT(ctx, batonRecvAny(buf, 4, batonFloat32, &source, ctx.comm(), nullptr),
                     batonInvalidUsage);
    MP_EXPECT_OK(ctx, batonGroupEnd());
    MP_EXPECT_TRUE(ctx,
                   std::string(batonGetLastError(ctx.comm())).find("group") != std::string::npos)
        << batonGetLastError(ctx.comm());
    MP_EXPECT_EQ(ctx, source, -1);
    // Still usable: one any-source exchange.
    if (ctx.rank() == 0) {
      MP_EXPECT_OK(ctx, batonRecvAny(buf, 4, batonFloat32, &source, ctx.comm(), nullptr));
      MP_EXPECT_EQ(ctx, source, 1);
      MP_EXPECT_EQ(ctx, buf[3], 3.5f);
    } else {
      const float msg[4] = {0.5f, 1.5f, 2.5f, 3.5f};
      MP_EXPECT_OK(ctx, batonSend(msg, 4, batonFloat32, 0, ctx.comm(), nullptr));
    }
  });
}

// A send of another count (or datatype) is an error naming both sizes,
// never a truncated receive or a hang.
TEST(AnySource, SizeMismatchIsAnError) {
  for (const char* transport : {"shm", "tcp"}) {
    Options options;
    options.env = {{"BATON_TRANSPORT", transport}, {"BATON_TIMEOUT", "20"}};
    RunRanks(
        3,
        [](RankContext& ctx) {
          float buf[12] = {};
          if (ctx.rank() == 0) {
            int source = -1;
            MP_EXPECT_RESULT(ctx, batonRecvAny(buf, 12, batonFloat32, &source, ctx.comm(), nullptr),
                             batonInvalidUsage);
            const std::string err = batonGetLastError(ctx.comm());
            MP_EXPECT_TRUE(ctx, err.find("12 x float (48 bytes)") != std::string::npos &&
                                    err.find("10 x float (40 bytes)") != std::string::npos)
                << err;
            MP_EXPECT_EQ(ctx, source, -1);
          } else if (ctx.rank() == 2) {
            // Told of the failure, or done before it: never a hang.
            batonResult_t r = batonSend(buf, 10, batonFloat32, 0, ctx.comm(), nullptr);
            MP_EXPECT_TRUE(ctx,
                           r == batonSuccess || r == batonInvalidUsage || r == batonRemoteError)
                << baton_test::ResultName(r);
          }
        },
        options);
  }
}

// Nobody sends: the wait ends at the communicator's timeout, naming why.
// The peers stay until rank 0 is done (a flag outside the library).
TEST(AnySource, TimesOut) {
  Options options;
  options.env = {{"BATON_TIMEOUT", "2"}};
  RunRanks(
      3,
      [](RankContext& ctx) {
        auto* done = static_cast<std::atomic<int>*>(ctx.shared());
        if (ctx.rank() == 0) {
          int64_t buf = 0;
          int source = -1;
          const auto start = std::chrono::steady_clock::now();
          MP_EXPECT_RESULT(ctx, batonRecvAny(&buf, 1, batonInt64, &source, ctx.comm(), nullptr),
                           batonTimeout);
          const double took = baton_test::SecondsSince(start);
          MP_EXPECT_TRUE(ctx, took > 1.5 && took < 30) << took << " s";
          MP_EXPECT_TRUE(ctx, std::string(batonGetLastError(ctx.comm())).find("any-source") !=
                                  std::string::npos)
              << batonGetLastError(ctx.comm());
          done->store(1);
        } else {
          while (done->load() == 0) usleep(10000);
        }
      },
      options);
}

// A peer that aborts ends the wait with an error at once, on both
// transports (long before the 60 s timeout).
TEST(AnySource, PeerAbortEndsTheWait) {
  for (const char* transport : {"shm", "tcp"}) {
    Options options;
    options.env = {{"BATON_TRANSPORT", transport}, {"BATON_TIMEOUT", "60"}};
    RunRanks(
        3,
        [](RankContext& ctx) {
          if (ctx.rank() == 0) {
            int64_t buf = 0;
            int source = -1;
            const auto start = std::chrono::steady_clock::now();
            const batonResult_t r = batonRecvAny(&buf, 1, batonInt64, &source, ctx.comm(), nullptr);
            MP_EXPECT_TRUE(ctx, r != batonSuccess && r != batonTimeout)
                << baton_test::ResultName(r);
            MP_EXPECT_TRUE(ctx, baton_test::SecondsSince(start) < 30);
          } else if (ctx.rank() == 1) {
            usleep(300000);
            MP_EXPECT_OK(ctx, batonCommAbort(ctx.TakeComm()));
          } else {
            // Rank 2 learns of the failure through its own call.
            int64_t v = 1, out = 0;
            (void)batonAllReduce(&v, &out, 1, batonInt64, batonSum, ctx.comm(), nullptr);
          }
        },
        options);
  }
}

}  // namespace
