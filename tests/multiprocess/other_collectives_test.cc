// End-to-end tests of batonReduce, batonAllGather, batonReduceScatter,
// batonAlltoAll, batonSend/batonRecv and groups: real ranks (one process
// each) over the shm and tcp transports, compared bitwise against a
// reference computed independently in every rank (collective_data.h).
#include <baton.h>
#include <string.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "common/mp_harness.h"
#include "multiprocess/collective_data.h"

namespace {

using namespace baton_test;  // NOLINT: the test data of collective_data.h

// Whether the call succeeded; any other result (batonInvalidUsage included:
// every collective here is implemented) is a failure. The caller stops the
// section then, which every rank does alike, since all make the same calls.
bool Ran(RankContext& ctx, batonResult_t r, const std::string& what) {
  MP_EXPECT_EQ(ctx, r, batonSuccess)
      << " (" << baton_test::ResultName(r) << ") from " << what << ": " << ctx.LastError();
  return r == batonSuccess;
}

// Counts for these sections, smaller than the matrix's: the buffers of
// allgather, reducescatter and alltoall are nranks times larger. With 8
// ranks, 16411 8-byte elements per rank still span several 512 KiB chunks.
std::vector<size_t> SmallCounts(int nranks) {
  std::vector<size_t> counts = {0,    1,    2, 7, static_cast<size_t>(nranks) * 37 + nranks - 1,
                                1001, 16411};
  std::sort(counts.begin(), counts.end());
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
  return counts;
}

// Every byte of buf is still kUnwrittenByte (a buffer the call must ignore).
bool Untouched(const GuardedBuffer& buf) {
  for (size_t i = 0; i < buf.bytes(); ++i) {
    if (buf.data()[i] != GuardedBuffer::kUnwrittenByte) return false;
  }
  return buf.GuardsIntact();
}

// NCCL semantics: the result lands in the root's recvbuff only; on the other
// ranks recvbuff is ignored (it may be NULL) and sendbuff is const. Each op
// uses a different root.
bool ReduceCase(RankContext& ctx, batonStream_t stream, const TypeDesc& t, size_t count,
                bool in_place) {
  const int rank = ctx.rank();
  const bool on_stream = stream != nullptr;
  const std::vector<int> roots = Roots(ctx.nranks());
  struct Call {
    batonRedOp_t op;
    int root;
    uint64_t seed;
    std::unique_ptr<GuardedBuffer> send, recv;
  };
  std::vector<Call> calls;
  for (batonRedOp_t op : kOps) {
    Call c{op, roots[static_cast<size_t>(op) % roots.size()],
           Seed({4, static_cast<uint64_t>(t.type), count, in_place, on_stream,
                 static_cast<uint64_t>(op)}),
           std::make_unique<GuardedBuffer>(count * t.size),
           std::make_unique<GuardedBuffer>(count * t.size)};
    FillInput(t.type, (in_place ? c.recv : c.send)->data(), count, c.seed, rank, op);
    calls.push_back(std::move(c));
  }
  for (Call& c : calls) {
    const std::string what =
        Describe("reduce", t, OpName(c.op), count, in_place, on_stream, c.root);
    ctx.SetStep(what);
    const void* send = in_place ? c.recv->data() : c.send->data();
    if (!Ran(ctx,
             batonReduce(send, c.recv->data(), count, t.type, c.op, c.root, ctx.comm(), stream),
             what)) {
      return false;
    }
  }
  if (on_stream && !Ran(ctx, batonStreamSynchronize(stream), "batonStreamSynchronize")) {
    return false;
  }
  for (Call& c : calls) {
    const std::string what =
        Describe("reduce", t, OpName(c.op), count, in_place, on_stream, c.root);
    if (rank == c.root) {
      CheckAllReduceResult(ctx, what, t.type, c.op, c.seed, c.recv->data(), count);
    } else if (in_place) {
      CheckInput(ctx, what + " (non-root buffer modified)", t.type, c.op, c.seed, rank,
                 c.recv->data(), count);
    } else {
      MP_EXPECT_TRUE(ctx, Untouched(*c.recv)) << " non-root recvbuff written in " << what;
    }
    MP_EXPECT_TRUE(ctx, c.recv->GuardsIntact()) << " recv guard overwritten in " << what;
    if (!in_place) {
      CheckInput(ctx, what + " (send buffer modified)", t.type, c.op, c.seed, rank, c.send->data(),
                 count);
    }
  }
  return true;
}

// recv[r * count + i] = rank r's input[i]; in place, sendbuff is this rank's
// block of recvbuff.
bool AllGatherCase(RankContext& ctx, batonStream_t stream, const TypeDesc& t, size_t count,
                   bool in_place) {
  const int rank = ctx.rank(), n = ctx.nranks();
  const bool on_stream = stream != nullptr;
  const uint64_t seed = Seed({5, static_cast<uint64_t>(t.type), count, in_place, on_stream});
  const size_t block = count * t.size;
  GuardedBuffer send(block), recv(block * n);
  uint8_t* mine = in_place ? recv.data() + rank * block : send.data();
  FillInput(t.type, mine, count, seed, rank, batonMax);
  const std::string what = Describe("allgather", t, "", count, in_place, on_stream);
  ctx.SetStep(what);
  if (!Ran(ctx, batonAllGather(mine, recv.data(), count, t.type, ctx.comm(), stream), what)) {
    return false;
  }
  if (on_stream && !Ran(ctx, batonStreamSynchronize(stream), "batonStreamSynchronize")) {
    return false;
  }
  for (int r = 0; r < n; ++r) {
    CheckInput(ctx, what + " block " + std::to_string(r), t.type, batonMax, seed, r,
               recv.data() + r * block, count);
  }
  MP_EXPECT_TRUE(ctx, recv.GuardsIntact()) << " recv guard overwritten in " << what;
  if (!in_place) {
    CheckInput(ctx, what + " (send buffer modified)", t.type, batonMax, seed, rank, send.data(),
               count);
  }
  return true;
}

// recv[i] = op over ranks r of r's input[rank * count + i]; in place,
// recvbuff is this rank's block of sendbuff.
bool ReduceScatterCase(RankContext& ctx, batonStream_t stream, const TypeDesc& t, size_t count,
                       bool in_place) {
  const int rank = ctx.rank(), n = ctx.nranks();
  const bool on_stream = stream != nullptr;
  const size_t block = count * t.size;
  struct Call {
    batonRedOp_t op;
    uint64_t seed;
    std::unique_ptr<GuardedBuffer> send, recv;
  };
  std::vector<Call> calls;
  for (batonRedOp_t op : kOps) {
    Call c{op,
           Seed({6, static_cast<uint64_t>(t.type), count, in_place, on_stream,
                 static_cast<uint64_t>(op)}),
           std::make_unique<GuardedBuffer>(block * n), std::make_unique<GuardedBuffer>(block)};
    FillInput(t.type, c.send->data(), count * n, c.seed, rank, op);
    calls.push_back(std::move(c));
  }
  const auto out = [&](Call& c) {
    return in_place ? c.send->data() + rank * block : c.recv->data();
  };
  for (Call& c : calls) {
    const std::string what = Describe("reducescatter", t, OpName(c.op), count, in_place, on_stream);
    ctx.SetStep(what);
    if (!Ran(ctx,
             batonReduceScatter(c.send->data(), out(c), count, t.type, c.op, ctx.comm(), stream),
             what)) {
      return false;
    }
  }
  if (on_stream && !Ran(ctx, batonStreamSynchronize(stream), "batonStreamSynchronize")) {
    return false;
  }
  for (Call& c : calls) {
    const std::string what = Describe("reducescatter", t, OpName(c.op), count, in_place, on_stream);
    Dispatch(t.type, [&](auto tr) {
      using Tr = decltype(tr);
      CheckElements<Tr>(ctx, what, out(c), count, [&](size_t i) {
        return ReferenceReduce<Tr>(c.op, c.seed, n, rank * count + i);
      });
    });
    MP_EXPECT_TRUE(ctx, c.send->GuardsIntact()) << " send guard overwritten in " << what;
    if (!in_place) {
      MP_EXPECT_TRUE(ctx, c.recv->GuardsIntact()) << " recv guard overwritten in " << what;
      CheckInput(ctx, what + " (send buffer modified)", t.type, c.op, c.seed, rank, c.send->data(),
                 count * n);
    }
  }
  return true;
}

// count elements per peer: block j of sendbuff goes to rank j, and block i of
// recvbuff comes from rank i. Out of place only (the header defines no
// in-place form).
bool AlltoAllCase(RankContext& ctx, batonStream_t stream, const TypeDesc& t, size_t count,
                  bool in_place) {
  if (in_place) return true;
  const int rank = ctx.rank(), n = ctx.nranks();
  const bool on_stream = stream != nullptr;
  const uint64_t seed = Seed({7, static_cast<uint64_t>(t.type), count, on_stream});
  const size_t block = count * t.size;
  GuardedBuffer send(block * n), recv(block * n);
  FillInput(t.type, send.data(), count * n, seed, rank, batonMax);
  const std::string what = Describe("alltoall", t, "", count, false, on_stream);
  ctx.SetStep(what);
  if (!Ran(ctx, batonAlltoAll(send.data(), recv.data(), count, t.type, ctx.comm(), stream), what)) {
    return false;
  }
  if (on_stream && !Ran(ctx, batonStreamSynchronize(stream), "batonStreamSynchronize")) {
    return false;
  }
  for (int r = 0; r < n; ++r) {
    Dispatch(t.type, [&](auto tr) {
      using Tr = decltype(tr);
      CheckElements<Tr>(
          ctx, what + " block from rank " + std::to_string(r), recv.data() + r * block, count,
          [&](size_t i) { return Tr::Input(batonMax, Bits(seed, r, rank * count + i)); });
    });
  }
  MP_EXPECT_TRUE(ctx, recv.GuardsIntact()) << " recv guard overwritten in " << what;
  CheckInput(ctx, what + " (send buffer modified)", t.type, batonMax, seed, rank, send.data(),
             count * n);
  return true;
}

// Every rank sends two messages of different sizes to every rank (itself
// included) and receives from every rank, all in one group: any order of
// posting must complete, and messages between a pair must match in order.
bool SendRecvAllPairs(RankContext& ctx, batonStream_t stream, const TypeDesc& t, size_t count,
                      bool /*in_place*/) {
  const int rank = ctx.rank(), n = ctx.nranks();
  const bool on_stream = stream != nullptr;
  const uint64_t seed = Seed({8, static_cast<uint64_t>(t.type), count, on_stream});
  // Per pair: a first message of `first` elements, then the rest.
  const size_t first = count / 3, per_pair = count;
  GuardedBuffer send(per_pair * n * t.size), recv(per_pair * n * t.size);
  FillInput(t.type, send.data(), per_pair * n, seed, rank, batonMax);
  const std::string what = Describe("grouped send/recv all pairs", t, "", count, false, on_stream);
  ctx.SetStep(what);
  MP_EXPECT_OK(ctx, batonGroupStart());
  bool ran = true;
  // Receives posted before sends, in reverse peer order: only a group makes
  // this deadlock-free.
  for (int p = n - 1; p >= 0 && ran; --p) {
    uint8_t* dst = recv.data() + p * per_pair * t.size;
    ran = Ran(ctx, batonRecv(dst, first, t.type, p, ctx.comm(), stream), what) &&
          Ran(ctx, batonRecv(dst + first * t.size, per_pair - first, t.type, p, ctx.comm(), stream),
              what);
  }
  for (int p = 0; p < n && ran; ++p) {
    const uint8_t* src = send.data() + p * per_pair * t.size;
    ran = Ran(ctx, batonSend(src, first, t.type, p, ctx.comm(), stream), what) &&
          Ran(ctx, batonSend(src + first * t.size, per_pair - first, t.type, p, ctx.comm(), stream),
              what);
  }
  const batonResult_t end = batonGroupEnd();
  if (!ran) return false;
  if (!Ran(ctx, end, what + " batonGroupEnd")) return false;
  if (on_stream && !Ran(ctx, batonStreamSynchronize(stream), "batonStreamSynchronize")) {
    return false;
  }
  for (int p = 0; p < n; ++p) {
    Dispatch(t.type, [&](auto tr) {
      using Tr = decltype(tr);
      CheckElements<Tr>(ctx, what + " from rank " + std::to_string(p),
                        recv.data() + p * per_pair * t.size, per_pair, [&](size_t i) {
                          return Tr::Input(batonMax, Bits(seed, p, rank * per_pair + i));
                        });
    });
  }
  MP_EXPECT_TRUE(ctx, recv.GuardsIntact()) << " recv guard overwritten in " << what;
  return true;
}

// Collectives inside one group are launched together at batonGroupEnd and
// still produce their own results.
void GroupedCollectives(RankContext& ctx, batonStream_t stream) {
  const int rank = ctx.rank(), n = ctx.nranks();
  for (batonStream_t s : {static_cast<batonStream_t>(nullptr), stream}) {
    int64_t sum[5], max[3];
    float bcast[4];
    for (int i = 0; i < 5; ++i) sum[i] = rank * 10 + i;
    for (int i = 0; i < 3; ++i) max[i] = (rank + i) % n;  // a permutation of 0..n-1
    for (int i = 0; i < 4; ++i) bcast[i] = static_cast<float>(rank) + 0.25f * i;
    ctx.SetStep("grouped allreduce + broadcast + allreduce");
    MP_EXPECT_OK(ctx, batonGroupStart());
    const bool ran =
        Ran(ctx, batonAllReduce(sum, sum, 5, batonInt64, batonSum, ctx.comm(), s), "grouped sum") &&
        Ran(ctx, batonBroadcast(bcast, bcast, 4, batonFloat, n - 1, ctx.comm(), s),
            "grouped broadcast") &&
        Ran(ctx, batonAllReduce(max, max, 3, batonInt64, batonMax, ctx.comm(), s), "grouped max");
    const batonResult_t end = batonGroupEnd();
    if (!ran || !Ran(ctx, end, "batonGroupEnd")) return;
    if (s != nullptr) MP_EXPECT_OK(ctx, batonStreamSynchronize(s));
    for (int i = 0; i < 5; ++i) MP_EXPECT_EQ(ctx, sum[i], int64_t{10} * n * (n - 1) / 2 + n * i);
    for (int i = 0; i < 3; ++i) MP_EXPECT_EQ(ctx, max[i], int64_t{n - 1});
    for (int i = 0; i < 4; ++i) MP_EXPECT_EQ(ctx, bcast[i], static_cast<float>(n - 1) + 0.25f * i);
  }
}

class OtherCollectivesTest : public ::testing::TestWithParam<std::tuple<int, const char*>> {};

TEST_P(OtherCollectivesTest, ReduceAllGatherReduceScatterAlltoAllSendRecvGroups) {
  const auto [nranks, transport] = GetParam();
  Options options;
  options.env = {{"BATON_TRANSPORT", transport}};
  options.deadline = std::chrono::seconds(300);
  RunRanks(
      nranks,
      [](RankContext& ctx) {
        HostStream stream(ctx);
        const std::vector<size_t> counts = SmallCounts(ctx.nranks());
        const auto time = [&](const char* name, auto case_fn) {
          Timed(ctx, name, [&] { ForEachCase(ctx, stream.get(), counts, case_fn); });
        };
        time("reduce", ReduceCase);
        time("allgather", AllGatherCase);
        time("reducescatter", ReduceScatterCase);
        time("alltoall", AlltoAllCase);
        time("send/recv", SendRecvAllPairs);
        GroupedCollectives(ctx, stream.get());
      },
      options);
}

INSTANTIATE_TEST_SUITE_P(Ranks, OtherCollectivesTest,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 7, 8),
                                            ::testing::Values("shm", "tcp")),
                         [](const auto& info) {
                           return std::string(std::get<1>(info.param)) + "_" +
                                  std::to_string(std::get<0>(info.param)) + "ranks";
                         });

}  // namespace
