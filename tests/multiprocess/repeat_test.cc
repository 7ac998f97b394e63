// Repeated calls: a call equal to the previous one (same
// buffers, count, datatype, op, root, algorithm) runs the schedule built for
// it then, without building it or its per-peer queues again
// (Communicator::RunRepeatable). These tests repeat calls with new data each
// time and interleave other calls, so a stale schedule, stale scratch or
// stale queues show up as wrong results, for every forced algorithm and the
// automatic choice, over shared memory and TCP, on the calling thread and
// queued on a host stream.
#include <baton.h>

#include <algorithm>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/mp_harness.h"

namespace {

using baton_test::Options;
using baton_test::RankContext;
using baton_test::RunRanks;

// Rank r's element i in iteration `it`: small integers, so float sums are
// exact whatever the order.
float Input(int rank, int it, size_t i) {
  return static_cast<float>((rank * 7 + it * 3 + static_cast<int>(i % 11)) % 23);
}

// Allreduce (sum, max), in and out of place, each repeated `reps` times with
// new inputs, then broadcast and reduce with a root that changes, then the
// first allreduce again: every result checked against the sum or maximum
// each rank computes alone.
void AllReduceRepeats(RankContext& ctx) {
  const int n = ctx.nranks(), rank = ctx.rank();
  constexpr int kReps = 40;
  for (size_t count : {size_t{1}, size_t{2}, size_t{7}, size_t{1000}, size_t{70001}}) {
    std::vector<float> send(count), recv(count);
    for (batonRedOp_t op : {batonSum, batonMax}) {
      for (bool in_place : {false, true}) {
        for (int it = 0; it < kReps; ++it) {
          ctx.SetStep("allreduce count " + std::to_string(count) + " op " + std::to_string(op) +
                      (in_place ? " in place" : "") + " iteration " + std::to_string(it));
          std::vector<float>& in = in_place ? recv : send;
          for (size_t i = 0; i < count; ++i) in[i] = Input(rank, it, i);
          MP_ASSERT_OK(ctx, batonAllReduce(in.data(), recv.data(), count, batonFloat32, op,
                                           ctx.comm(), nullptr));
          size_t wrong = 0, first = count;
          for (size_t i = 0; i < count; ++i) {
            float want = op == batonSum ? 0.0f : Input(0, it, i);
            for (int r = 0; r < n; ++r)
              want = op == batonSum ? want + Input(r, it, i) : std::max(want, Input(r, it, i));
            if (recv[i] != want && wrong++ == 0) first = i;
          }
          MP_ASSERT_EQ(ctx, wrong, size_t{0})
              << "count " << count << " op " << op << (in_place ? " in place" : "") << " iteration "
              << it << ": first wrong element " << first;
        }
      }
    }
    // A root that changes between otherwise equal calls.
    for (int it = 0; it < 2 * n; ++it) {
      const int root = it % n;
      ctx.SetStep("broadcast root " + std::to_string(root));
      for (size_t i = 0; i < count; ++i) recv[i] = rank == root ? Input(root, it, i) : -1.0f;
      MP_ASSERT_OK(ctx, batonBroadcast(recv.data(), recv.data(), count, batonFloat32, root,
                                       ctx.comm(), nullptr));
      for (size_t i = 0; i < count; ++i) MP_ASSERT_EQ(ctx, recv[i], Input(root, it, i));
      ctx.SetStep("reduce root " + std::to_string(root));
      for (size_t i = 0; i < count; ++i) send[i] = Input(rank, it, i);
      for (size_t i = 0; i < count; ++i) recv[i] = -1.0f;
      MP_ASSERT_OK(ctx, batonReduce(send.data(), recv.data(), count, batonFloat32, batonSum, root,
                                    ctx.comm(), nullptr));
      if (rank == root) {
        for (size_t i = 0; i < count; ++i) {
          float want = 0;
          for (int r = 0; r < n; ++r) want += Input(r, it, i);
          MP_ASSERT_EQ(ctx, recv[i], want);
        }
      }
    }
  }
}

// The same allreduce and allgather on buffers that move between calls by
// odd steps, as nccl-tests walks its buffers, in and out of place: a repeat
// runs its schedule moved to the new buffers (Schedule::Rebase).
void MovingBuffers(RankContext& ctx) {
  const int n = ctx.nranks(), rank = ctx.rank();
  for (size_t count : {size_t{2}, size_t{33}, size_t{5000}}) {
    std::vector<float> send(count * 8 + 64), recv(count * 8 * n + 64);
    for (bool in_place : {false, true}) {
      // Consecutive equal calls (each a repeat of the one before), buffers
      // moving by 3 elements each time and back every 7th call.
      for (int it = 0; it < 24; ++it) {
        const size_t shift = static_cast<size_t>(it % 7) * 3;  // elements
        float* out = recv.data() + shift;
        float* in = in_place ? out : send.data() + shift;
        ctx.SetStep("moving allreduce count " + std::to_string(count) + " iteration " +
                    std::to_string(it));
        for (size_t i = 0; i < count; ++i) in[i] = Input(rank, it, i);
        MP_ASSERT_OK(ctx,
                     batonAllReduce(in, out, count, batonFloat32, batonSum, ctx.comm(), nullptr));
        for (size_t i = 0; i < count; ++i) {
          float want = 0;
          for (int r = 0; r < n; ++r) want += Input(r, it, i);
          MP_ASSERT_EQ(ctx, out[i], want) << "count " << count << " shift " << shift
                                          << (in_place ? " in place" : "") << " element " << i;
        }
      }
      for (int it = 0; it < 24; ++it) {
        const size_t shift = static_cast<size_t>(it % 7) * 3;
        float* out = recv.data() + shift;
        float* mine = in_place ? out + rank * count : send.data() + shift;
        ctx.SetStep("moving allgather count " + std::to_string(count) + " iteration " +
                    std::to_string(it));
        for (size_t i = 0; i < count; ++i) mine[i] = Input(rank, it, i);
        MP_ASSERT_OK(ctx, batonAllGather(mine, out, count, batonFloat32, ctx.comm(), nullptr));
        for (int r = 0; r < n; ++r)
          for (size_t i = 0; i < count; ++i)
            MP_ASSERT_EQ(ctx, out[r * count + i], Input(r, it, i))
                << "allgather count " << count << " shift " << shift << " block " << r
                << (in_place ? " in place" : "");
      }
    }
  }
}

// The same allgatherv twice with the same arrays, whose counts change in
// between: equal pointers, other contents, so the call must not be taken for
// a repeat.
void AllGatherVCountsChange(RankContext& ctx) {
  const int n = ctx.nranks(), rank = ctx.rank();
  std::vector<size_t> counts(n), displs(n);
  std::vector<int32_t> send(64), recv(64 * n);
  for (int it = 0; it < 6; ++it) {
    ctx.SetStep("allgatherv iteration " + std::to_string(it));
    size_t total = 0;
    for (int r = 0; r < n; ++r) {
      counts[r] = static_cast<size_t>((r + it) % 4 + 1);
      displs[r] = total;
      total += counts[r];
    }
    for (size_t i = 0; i < counts[rank]; ++i) send[i] = rank * 1000 + it * 10 + static_cast<int>(i);
    std::fill(recv.begin(), recv.end(), -1);
    MP_ASSERT_OK(ctx, batonAllGatherV(send.data(), counts[rank], recv.data(), counts.data(),
                                      displs.data(), batonInt32, ctx.comm(), nullptr));
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < counts[r]; ++i)
        MP_ASSERT_EQ(ctx, recv[displs[r] + i], r * 1000 + it * 10 + static_cast<int>(i))
            << "iteration " << it << " block of rank " << r;
  }
}

// Sends and receives repeated between neighbours in a ring, with barriers
// between rounds.
void SendRecvRepeats(RankContext& ctx) {
  const int n = ctx.nranks(), rank = ctx.rank();
  if (n < 2) return;
  const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
  std::vector<int64_t> out(33), in(33);
  for (int it = 0; it < 30; ++it) {
    ctx.SetStep("send/recv iteration " + std::to_string(it));
    for (size_t i = 0; i < out.size(); ++i) out[i] = rank * 100000 + it * 100 + static_cast<int>(i);
    MP_ASSERT_OK(ctx, batonGroupStart());
    MP_ASSERT_OK(ctx, batonSend(out.data(), out.size(), batonInt64, next, ctx.comm(), nullptr));
    MP_ASSERT_OK(ctx, batonRecv(in.data(), in.size(), batonInt64, prev, ctx.comm(), nullptr));
    MP_ASSERT_OK(ctx, batonGroupEnd());
    for (size_t i = 0; i < in.size(); ++i)
      MP_ASSERT_EQ(ctx, in[i], prev * 100000 + it * 100 + static_cast<int>(i));
    MP_ASSERT_OK(ctx, batonBarrier(ctx.comm(), nullptr));
  }
  // Ungrouped: even ranks send first, odd ranks receive first.
  if (n % 2 == 0) {
    for (int it = 0; it < 30; ++it) {
      const int partner = rank ^ 1;
      for (size_t i = 0; i < out.size(); ++i) out[i] = rank * 7 + it + static_cast<int>(i);
      if (rank % 2 == 0) {
        MP_ASSERT_OK(ctx,
                     batonSend(out.data(), out.size(), batonInt64, partner, ctx.comm(), nullptr));
        MP_ASSERT_OK(ctx,
                     batonRecv(in.data(), in.size(), batonInt64, partner, ctx.comm(), nullptr));
      } else {
        MP_ASSERT_OK(ctx,
                     batonRecv(in.data(), in.size(), batonInt64, partner, ctx.comm(), nullptr));
        MP_ASSERT_OK(ctx,
                     batonSend(out.data(), out.size(), batonInt64, partner, ctx.comm(), nullptr));
      }
      for (size_t i = 0; i < in.size(); ++i)
        MP_ASSERT_EQ(ctx, in[i], partner * 7 + it + static_cast<int>(i));
    }
  }
}

// Repeats queued on a host stream, whose worker reuses schedules as a
// synchronous caller does: per count, allreduces on slices that move by odd
// steps, pairs of the same in-place call on the same slice (the second one
// a repeat at the same address: n times the sum), the op changing midway,
// then a synchronous call equal to the last queued one, and the stream
// again, every result checked after the stream's synchronize.
void StreamRepeats(RankContext& ctx) {
  const int n = ctx.nranks(), rank = ctx.rank();
  batonStream_t stream = nullptr;
  MP_ASSERT_OK(ctx, batonStreamCreate(&stream));
  constexpr int kCalls = 24;
  auto op_of = [](int it) { return it < kCalls / 2 ? batonSum : batonMax; };
  // What slice `s` holds after the queued calls: its call's result; for
  // the slice of a pair, the first call's result reduced again.
  auto want = [&](int s, size_t i) {
    const batonRedOp_t op = op_of(s);
    float w = op == batonSum ? 0.0f : Input(0, s, i);
    for (int r = 0; r < n; ++r)
      w = op == batonSum ? w + Input(r, s, i) : std::max(w, Input(r, s, i));
    return s % 4 == 2 && op == batonSum ? w * static_cast<float>(n) : w;
  };
  for (size_t count : {size_t{1}, size_t{7}, size_t{1000}, size_t{70001}}) {
    const size_t stride = count + 3;
    std::vector<float> send(stride * kCalls), recv(stride * kCalls);
    for (int round = 0; round < 2; ++round) {
      ctx.SetStep("stream repeats count " + std::to_string(count) + " round " +
                  std::to_string(round));
      for (int it = 0; it < kCalls; ++it) {
        // Calls 2 and 3 of every four share one slice, in place.
        const int slice = it % 4 == 3 ? it - 1 : it;
        const bool in_place = it % 4 >= 2;
        float* out = recv.data() + slice * stride;
        float* in = in_place ? out : send.data() + slice * stride;
        if (it % 4 != 3)
          for (size_t i = 0; i < count; ++i) in[i] = Input(rank, it, i);
        MP_ASSERT_OK(ctx,
                     batonAllReduce(in, out, count, batonFloat32, op_of(it), ctx.comm(), stream));
      }
      MP_ASSERT_OK(ctx, batonStreamSynchronize(stream));
      for (int s = 0; s < kCalls; ++s) {
        if (s % 4 == 3) continue;
        const float* out = recv.data() + s * stride;
        for (size_t i = 0; i < count; ++i)
          MP_ASSERT_EQ(ctx, out[i], want(s, i))
              << "count " << count << " slice " << s << " element " << i;
      }
      // The last queued call's kind again, synchronously: the key the
      // worker left, on the same slice.
      ctx.SetStep("synchronous after the stream, count " + std::to_string(count));
      float* out = recv.data() + (kCalls - 2) * stride;
      for (size_t i = 0; i < count; ++i) out[i] = Input(rank, kCalls - 1, i);
      MP_ASSERT_OK(ctx,
                   batonAllReduce(out, out, count, batonFloat32, batonMax, ctx.comm(), nullptr));
      for (size_t i = 0; i < count; ++i) {
        float w = Input(0, kCalls - 1, i);
        for (int r = 0; r < n; ++r) w = std::max(w, Input(r, kCalls - 1, i));
        MP_ASSERT_EQ(ctx, out[i], w) << "count " << count << " element " << i;
      }
    }
  }
  MP_ASSERT_OK(ctx, batonStreamDestroy(stream));
}

void Body(RankContext& ctx) {
  AllReduceRepeats(ctx);
  MovingBuffers(ctx);
  AllGatherVCountsChange(ctx);
  SendRecvRepeats(ctx);
  StreamRepeats(ctx);
}

struct Case {
  int nranks;
  const char* algo;       // the allreduce's algorithm, BATON_ALGO ("" = automatic)
  const char* transport;  // BATON_TRANSPORT ("" = default)
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.nranks << " ranks, allreduce algorithm " << (c.algo[0] ? c.algo : "auto")
      << ", transport " << (c.transport[0] ? c.transport : "auto");
}

class RepeatTest : public ::testing::TestWithParam<Case> {};

TEST_P(RepeatTest, RepeatedCallsSeeNewDataAndChangedArguments) {
  const Case& c = GetParam();
  Options options;
  if (c.algo[0] != '\0') options.env.push_back({"BATON_ALGO", std::string("allreduce:") + c.algo});
  if (c.transport[0] != '\0') options.env.push_back({"BATON_TRANSPORT", c.transport});
  RunRanks(c.nranks, Body, options);
}

INSTANTIATE_TEST_SUITE_P(Algorithms, RepeatTest,
                         ::testing::Values(Case{1, "", ""}, Case{2, "", ""}, Case{3, "", ""},
                                           Case{4, "", ""}, Case{5, "", ""}, Case{8, "", ""},
                                           Case{4, "rhd", ""}, Case{5, "rhd", ""},
                                           Case{3, "ring", ""}, Case{4, "tree", ""},
                                           Case{2, "", "tcp"}, Case{3, "rhd", "tcp"}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           std::string name = std::to_string(info.param.nranks) + "ranks";
                           if (info.param.algo[0] != '\0')
                             name += std::string("_") + info.param.algo;
                           if (info.param.transport[0] != '\0')
                             name += std::string("_") + info.param.transport;
                           return name;
                         });

}  // namespace
