// End-to-end tests of batonAllReduce, batonBroadcast and batonBarrier: real
// ranks (one process each) over the shm and tcp transports, compared bitwise
// against a reference computed independently in every rank
// (collective_data.h); the other collectives are in other_collectives_test.cc.
#include <baton.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <vector>

#include <gtest/gtest.h>

#include "common/mp_harness.h"
#include "multiprocess/collective_data.h"

namespace {

using namespace baton_test;  // NOLINT: the test data of collective_data.h

// The five ops of one (type, count, placement): on a host stream they are
// queued back to back and synchronized once.
bool AllReduceCase(RankContext& ctx, batonStream_t stream, const TypeDesc& t, size_t count,
                   bool in_place) {
  const int rank = ctx.rank();
  const bool on_stream = stream != nullptr;
  struct Call {
    batonRedOp_t op;
    uint64_t seed;
    std::unique_ptr<GuardedBuffer> send, recv;
  };
  std::vector<Call> calls;
  for (batonRedOp_t op : kOps) {
    Call c{op,
           Seed({1, static_cast<uint64_t>(t.type), count, in_place, on_stream,
                 static_cast<uint64_t>(op)}),
           std::make_unique<GuardedBuffer>(count * t.size),
           std::make_unique<GuardedBuffer>(count * t.size)};
    FillInput(t.type, (in_place ? c.recv : c.send)->data(), count, c.seed, rank, op);
    calls.push_back(std::move(c));
  }
  for (Call& c : calls) {
    const std::string what = Describe("allreduce", t, OpName(c.op), count, in_place, on_stream);
    ctx.SetStep(what);
    const void* send = in_place ? c.recv->data() : c.send->data();
    MP_EXPECT_OK(ctx, batonAllReduce(send, c.recv->data(), count, t.type, c.op, ctx.comm(), stream))
        << " for " << what;
  }
  if (on_stream) {
    ctx.SetStep("batonStreamSynchronize after queued allreduces");
    MP_EXPECT_OK(ctx, batonStreamSynchronize(stream));
  }
  for (Call& c : calls) {
    const std::string what = Describe("allreduce", t, OpName(c.op), count, in_place, on_stream);
    CheckAllReduceResult(ctx, what, t.type, c.op, c.seed, c.recv->data(), count);
    MP_EXPECT_TRUE(ctx, c.recv->GuardsIntact()) << " recv guard overwritten in " << what;
    if (!in_place) {
      CheckInput(ctx, what + " (send buffer modified)", t.type, c.op, c.seed, rank, c.send->data(),
                 count);
      MP_EXPECT_TRUE(ctx, c.send->GuardsIntact()) << " send guard overwritten in " << what;
    }
  }
  return true;
}

// One broadcast per root of one (type, count, placement). Out of place, the
// non-roots pass a send buffer of their own that must stay untouched; in
// place, every rank passes sendbuff == recvbuff and non-roots start with
// their own (garbage) data.
bool BroadcastCase(RankContext& ctx, batonStream_t stream, const TypeDesc& t, size_t count,
                   bool in_place) {
  const int rank = ctx.rank();
  const bool on_stream = stream != nullptr;
  struct Call {
    int root;
    uint64_t seed;
    std::unique_ptr<GuardedBuffer> send, recv;
  };
  std::vector<Call> calls;
  for (int root : Roots(ctx.nranks())) {
    Call c{root,
           Seed({2, static_cast<uint64_t>(t.type), count, in_place, on_stream,
                 static_cast<uint64_t>(root)}),
           std::make_unique<GuardedBuffer>(count * t.size),
           std::make_unique<GuardedBuffer>(count * t.size)};
    FillInput(t.type, (in_place ? c.recv : c.send)->data(), count, c.seed, rank, batonMax);
    calls.push_back(std::move(c));
  }
  for (Call& c : calls) {
    const std::string what = Describe("broadcast", t, "", count, in_place, on_stream, c.root);
    ctx.SetStep(what);
    const void* send = in_place ? c.recv->data() : c.send->data();
    MP_EXPECT_OK(ctx,
                 batonBroadcast(send, c.recv->data(), count, t.type, c.root, ctx.comm(), stream))
        << " for " << what;
  }
  if (on_stream) {
    ctx.SetStep("batonStreamSynchronize after queued broadcasts");
    MP_EXPECT_OK(ctx, batonStreamSynchronize(stream));
  }
  for (Call& c : calls) {
    const std::string what = Describe("broadcast", t, "", count, in_place, on_stream, c.root);
    CheckInput(ctx, what, t.type, batonMax, c.seed, c.root, c.recv->data(), count);
    MP_EXPECT_TRUE(ctx, c.recv->GuardsIntact()) << " recv guard overwritten in " << what;
    if (!in_place) {
      CheckInput(ctx, what + " (send buffer modified)", t.type, batonMax, c.seed, rank,
                 c.send->data(), count);
      MP_EXPECT_TRUE(ctx, c.send->GuardsIntact()) << " send guard overwritten in " << what;
    }
  }
  return true;
}

void AllReduceMatrix(RankContext& ctx, batonStream_t stream) {
  ForEachCase(ctx, stream, MatrixCounts(ctx.nranks()), AllReduceCase);
}

void BroadcastMatrix(RankContext& ctx, batonStream_t stream) {
  ForEachCase(ctx, stream, MatrixCounts(ctx.nranks()), BroadcastCase);
}

// Cheap per-element pseudo-random bits for the 64 MiB buffers, where the
// Mix-based generator (times nranks for the reference) would dominate the time.
inline uint32_t CheapBits(size_t i) {
  return (static_cast<uint32_t>(i) * 0x9e3779b1u) >> 11 ^ static_cast<uint32_t>(i >> 16);
}

// Reports mismatches of got[i] != want(i) for i in [0, count) as one failure.
template <typename T, typename Want>
void CheckLarge(RankContext& ctx, const std::string& what, const T* got, size_t count, Want want) {
  size_t mismatches = 0;
  std::ostringstream details;
  for (size_t i = 0; i < count; ++i) {
    const T w = want(i);
    if (memcmp(&w, &got[i], sizeof(T)) == 0) continue;
    if (++mismatches <= 4) details << "\n  [" << i << "] got " << +got[i] << ", expected " << +w;
  }
  MP_EXPECT_EQ(ctx, mismatches, 0u)
      << " wrong elements of " << count << " in " << what << details.str();
}

// 64 MiB buffers for a few combinations: float sum out of place on the NULL
// stream, int8 max in place on a host stream, and a byte broadcast from the
// last rank. The inputs are built so the expected result has a closed form
// (O(1) per element instead of O(nranks)), and every rank contributes to it.
void LargeBuffers(RankContext& ctx, batonStream_t stream) {
  constexpr size_t kBytes = size_t{64} << 20;
  const int rank = ctx.rank();
  const int n = ctx.nranks();
  const auto spread = [&](size_t i) { return static_cast<int>((i + rank) % n); };  // 0..n-1
  {
    // v = k(i) * (spread + 1) / 4, so the sum is k(i) * n(n+1)/2 / 4, exactly.
    const size_t count = kBytes / sizeof(float);
    const auto k = [](size_t i) { return static_cast<int>(CheapBits(i) % 17) - 8; };
    GuardedBuffer send(kBytes), recv(kBytes);
    auto* in = reinterpret_cast<float*>(send.data());
    for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>(k(i) * (spread(i) + 1)) / 4;
    MP_EXPECT_OK(ctx, batonAllReduce(send.data(), recv.data(), count, batonFloat, batonSum,
                                     ctx.comm(), nullptr));
    const std::string what = Describe("allreduce", kTypes[7], "sum", count, false, false);
    CheckLarge(ctx, what, reinterpret_cast<const float*>(recv.data()), count,
               [&](size_t i) { return static_cast<float>(k(i) * n * (n + 1) / 2) / 4; });
    CheckLarge(ctx, what + " (send buffer modified)", in, count,
               [&](size_t i) { return static_cast<float>(k(i) * (spread(i) + 1)) / 4; });
    MP_EXPECT_TRUE(ctx, recv.GuardsIntact()) << " in " << what;
  }
  {
    // v = b(i) - spread with b(i) in [n - 129, 127]: the max is b(i), held by
    // a different rank for consecutive elements.
    const auto b = [&](size_t i) {
      return std::max(static_cast<int>(CheapBits(i) & 0xff) - 128, n - 129);
    };
    GuardedBuffer buf(kBytes);
    auto* v = reinterpret_cast<int8_t*>(buf.data());
    for (size_t i = 0; i < kBytes; ++i) v[i] = static_cast<int8_t>(b(i) - spread(i));
    MP_EXPECT_OK(ctx, batonAllReduce(v, v, kBytes, batonInt8, batonMax, ctx.comm(), stream));
    MP_EXPECT_OK(ctx, batonStreamSynchronize(stream));
    const std::string what = Describe("allreduce", kTypes[0], "max", kBytes, true, true);
    CheckLarge(ctx, what, v, kBytes, [&](size_t i) { return static_cast<int8_t>(b(i)); });
    MP_EXPECT_TRUE(ctx, buf.GuardsIntact()) << " in " << what;
  }
  {
    const int root = n - 1;
    const auto byte = [](size_t i, int r) { return static_cast<uint8_t>(CheapBits(i) + 31 * r); };
    GuardedBuffer buf(kBytes);
    for (size_t i = 0; i < kBytes; ++i) buf.data()[i] = byte(i, rank);
    MP_EXPECT_OK(
        ctx, batonBroadcast(buf.data(), buf.data(), kBytes, batonUint8, root, ctx.comm(), nullptr));
    const std::string what = Describe("broadcast", kTypes[1], "", kBytes, true, false, root);
    CheckLarge(ctx, what, buf.data(), kBytes, [&](size_t i) { return byte(i, root); });
    MP_EXPECT_TRUE(ctx, buf.GuardsIntact()) << " in " << what;
  }
}

int64_t MonotonicNanos() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

// No rank may leave a barrier before the last one entered it. CLOCK_MONOTONIC
// is shared by all processes of the machine, so the late rank's entry time,
// broadcast afterwards, is a direct check of that causality.
void BarrierCausality(RankContext& ctx, batonStream_t stream) {
  for (bool on_stream : {false, true}) {
    for (int late = 0; late < ctx.nranks(); ++late) {
      int64_t entered = 0;
      if (ctx.rank() == late) {
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
        entered = MonotonicNanos();
      }
      MP_EXPECT_OK(ctx, batonBarrier(ctx.comm(), on_stream ? stream : nullptr));
      if (on_stream) MP_EXPECT_OK(ctx, batonStreamSynchronize(stream));
      const int64_t left = MonotonicNanos();
      MP_EXPECT_OK(ctx,
                   batonBroadcast(&entered, &entered, 1, batonInt64, late, ctx.comm(), nullptr));
      MP_EXPECT_GE(ctx, left, entered) << " (ns) barrier returned before rank " << late
                                       << " entered it" << (on_stream ? " (host stream)" : "");
    }
  }
}

class CollectivesTest : public ::testing::TestWithParam<std::tuple<int, const char*>> {};

// One communicator per (nranks, transport) runs every combination, keeping
// the init cost (and the test time with 8 ranks on 2 cores) down.
TEST_P(CollectivesTest, AllReduceBroadcastBarrier) {
  const auto [nranks, transport] = GetParam();
  Options options;
  options.env = {{"BATON_TRANSPORT", transport}};
  options.deadline = std::chrono::seconds(300);
  RunRanks(
      nranks,
      [](RankContext& ctx) {
        HostStream stream(ctx);
        const auto time = [&](const char* name, void (*section)(RankContext&, batonStream_t)) {
          Timed(ctx, name, [&] { section(ctx, stream.get()); });
        };
        time("allreduce matrix", AllReduceMatrix);
        time("broadcast matrix", BroadcastMatrix);
        time("barrier", BarrierCausality);
        const int n = ctx.nranks();
        if (n == 2 || n == 4 || n == 8) time("64 MiB buffers", LargeBuffers);
      },
      options);
}

INSTANTIATE_TEST_SUITE_P(Ranks, CollectivesTest,
                         ::testing::Combine(::testing::Range(1, 9),
                                            ::testing::Values("shm", "tcp")),
                         [](const auto& info) {
                           return std::string(std::get<1>(info.param)) + "_" +
                                  std::to_string(std::get<0>(info.param)) + "ranks";
                         });

class TransportTest : public ::testing::TestWithParam<const char*> {};

// Two communicators over the same ranks (the second in reverse rank order)
// used alternately, synchronously and interleaved on one host stream: each
// must deliver its own results.
TEST_P(TransportTest, TwoCommunicatorsAlternately) {
  Options options;
  options.env = {{"BATON_TRANSPORT", GetParam()}};
  options.extra_ids = 1;
  RunRanks(
      4,
      [](RankContext& ctx) {
        const int n = ctx.nranks();
        const int rank_b = n - 1 - ctx.rank();
        batonComm_t b = nullptr;
        MP_ASSERT_OK(ctx, batonCommInitRank(&b, n, ctx.extra_id(0), rank_b));
        int got_rank = -1;
        MP_EXPECT_OK(ctx, batonCommUserRank(b, &got_rank));
        MP_EXPECT_EQ(ctx, got_rank, rank_b);
        HostStream stream(ctx);
        for (int iter = 0; iter < 10; ++iter) {
          const bool on_stream = iter % 2 == 1;
          batonStream_t s = on_stream ? stream.get() : nullptr;
          // Distinct values per comm and iteration, so a result delivered
          // to the wrong communicator cannot pass.
          int64_t sum_a[3], sum_b[3], bcast_a[2], bcast_b[2];
          for (int i = 0; i < 3; ++i) {
            sum_a[i] = (ctx.rank() + 1) * 10 + iter + i;
            sum_b[i] = (ctx.rank() + 1) * 1000 + iter + i;
          }
          for (int i = 0; i < 2; ++i) {
            bcast_a[i] = 100 * ctx.rank() + iter + i;
            bcast_b[i] = -100 * rank_b - iter - i;
          }
          const int root = iter % n;
          MP_EXPECT_OK(ctx, batonAllReduce(sum_a, sum_a, 3, batonInt64, batonSum, ctx.comm(), s));
          MP_EXPECT_OK(ctx, batonAllReduce(sum_b, sum_b, 3, batonInt64, batonSum, b, s));
          MP_EXPECT_OK(ctx, batonBroadcast(bcast_b, bcast_b, 2, batonInt64, root, b, s));
          MP_EXPECT_OK(ctx, batonBroadcast(bcast_a, bcast_a, 2, batonInt64, root, ctx.comm(), s));
          if (on_stream) MP_EXPECT_OK(ctx, batonStreamSynchronize(s));
          for (int i = 0; i < 3; ++i) {
            // sum over r of ((r + 1) * k + iter + i) = k * n(n+1)/2 + n * (iter + i)
            MP_EXPECT_EQ(ctx, sum_a[i], int64_t{10} * n * (n + 1) / 2 + n * (iter + i))
                << " iter " << iter;
            MP_EXPECT_EQ(ctx, sum_b[i], int64_t{1000} * n * (n + 1) / 2 + n * (iter + i))
                << " iter " << iter;
          }
          for (int i = 0; i < 2; ++i) {
            MP_EXPECT_EQ(ctx, bcast_a[i], 100 * root + iter + i) << " iter " << iter;
            MP_EXPECT_EQ(ctx, bcast_b[i], -100 * root - iter - i) << " iter " << iter;
          }
        }
        MP_EXPECT_OK(ctx, batonCommDestroy(b));
      },
      options);
}

INSTANTIATE_TEST_SUITE_P(Transports, TransportTest, ::testing::Values("shm", "tcp"),
                         [](const auto& info) { return std::string(info.param); });

// A communicator of one rank: every op is a copy (avg divides by 1), in place
// is a no-op, broadcast needs root 0, barrier returns.
TEST(SingleRankTest, CollectivesAreCopies) {
  RunRanks(1, [](RankContext& ctx) {
    const int32_t in[5] = {7, -3, 0, 2147483647, -2147483647 - 1};
    for (batonRedOp_t op : kOps) {
      int32_t out[5] = {};
      MP_EXPECT_OK(ctx, batonAllReduce(in, out, 5, batonInt32, op, ctx.comm(), nullptr));
      MP_EXPECT_EQ(ctx, memcmp(in, out, sizeof(in)), 0) << " op " << OpName(op);
      int32_t inout[5];
      memcpy(inout, in, sizeof(in));
      MP_EXPECT_OK(ctx, batonAllReduce(inout, inout, 5, batonInt32, op, ctx.comm(), nullptr));
      MP_EXPECT_EQ(ctx, memcmp(in, inout, sizeof(in)), 0) << " in place, op " << OpName(op);
    }
    const float f_in[3] = {1.5f, -2.25f, 1e30f};
    float f_out[3] = {};
    MP_EXPECT_OK(ctx, batonAllReduce(f_in, f_out, 3, batonFloat, batonAvg, ctx.comm(), nullptr));
    MP_EXPECT_EQ(ctx, memcmp(f_in, f_out, sizeof(f_in)), 0);
    double d[2] = {0.1, 0.2}, d_out[2] = {};
    MP_EXPECT_OK(ctx, batonBroadcast(d, d_out, 2, batonDouble, 0, ctx.comm(), nullptr));
    MP_EXPECT_EQ(ctx, memcmp(d, d_out, sizeof(d)), 0);
    MP_EXPECT_RESULT(ctx, batonBroadcast(d, d_out, 2, batonDouble, 1, ctx.comm(), nullptr),
                     batonInvalidArgument);
    MP_EXPECT_OK(ctx, batonBarrier(ctx.comm(), nullptr));
    int count = 0, rank = -1;
    MP_EXPECT_OK(ctx, batonCommCount(ctx.comm(), &count));
    MP_EXPECT_OK(ctx, batonCommUserRank(ctx.comm(), &rank));
    MP_EXPECT_EQ(ctx, count, 1);
    MP_EXPECT_EQ(ctx, rank, 0);
  });
}

// The fp16/bf16 helpers above are the reference for two datatypes; check
// them against known encodings so a bug there is not blamed on the library.
TEST(ReferenceTest, HalfAndBfloat16Conversions) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);                      // rounds up to inf
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);         // smallest subnormal
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000);         // tie to even: 0
  EXPECT_EQ(FloatToHalf(std::ldexp(3.0f, -25)), 0x0002);         // tie to even: 2
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie to even
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(3.0f, -11)), 0x3c02);
  EXPECT_EQ(FloatToHalf(1.0f / 3), 0x3555);
  EXPECT_EQ(FloatToHalf(1.0f / 7), 0x3092);
  for (uint32_t h = 0; h < 0x7c00; ++h) {  // every finite half round-trips
    ASSERT_EQ(FloatToHalf(HalfToFloat(static_cast<uint16_t>(h))), h);
    ASSERT_EQ(FloatToHalf(HalfToFloat(static_cast<uint16_t>(h | 0x8000))), h | 0x8000);
  }
  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBf16(1.0f / 3), 0x3eab);
  EXPECT_EQ(FloatToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);  // tie to even
  EXPECT_EQ(FloatToBf16(1.0f + std::ldexp(3.0f, -8)), 0x3f82);
  EXPECT_EQ(Bf16ToFloat(0xc040), -3.0f);
  // The input ranges really are exact: the worst-case 8-rank sums fit.
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(-64.0f + 1)), -63.0f);
  EXPECT_EQ(HalfToFloat(FloatToHalf(63.75f)), 63.75f);
}

}  // namespace
