// Single-copy collectives on ordinary (malloc'd) buffers through cross-memory
// attach (comm/host_cma.cc): allreduce, reduce-scatter, allgather,
// broadcast, reduce, alltoall and the v-variants for 1 to 9 ranks, several
// datatypes and ops, counts 0, 1, odd and above the default threshold, in
// place and out of place, against a reference computed here in double; with
// the path forced on for every size (BATON_CMA_COLL_MIN_BYTES=1), with the
// kernel's refusal forced (one rank non-dumpable: its peers'
// process_vm_readv fails with EPERM) and with the switch off. Each rank's
// log (BATON_DEBUG=INFO, set for this test) tells which path it took.
#include <baton.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/mp_harness.h"
#include "common/rank_log.h"
#include "common/reference.h"

namespace {

using baton_test::CaptureLog;
using baton_test::DropPtraceCapability;
using baton_test::Options;
using baton_test::RankContext;
using baton_test::RunRanks;

enum class Coll {
  kAllReduce,
  kReduceScatter,
  kAllGather,
  kBroadcast,
  kReduce,
  kAlltoAll,
  kAllGatherV,
  kReduceScatterV,
  kAlltoAllV
};
constexpr Coll kColls[] = {Coll::kAllReduce,  Coll::kReduceScatter,  Coll::kAllGather,
                           Coll::kBroadcast,  Coll::kReduce,         Coll::kAlltoAll,
                           Coll::kAllGatherV, Coll::kReduceScatterV, Coll::kAlltoAllV};
const char* Name(Coll c) {
  static const char* kNames[] = {"allreduce",  "reducescatter",  "allgather",
                                 "broadcast",  "reduce",         "alltoall",
                                 "allgatherv", "reducescatterv", "alltoallv"};
  return kNames[static_cast<int>(c)];
}
bool Reduces(Coll c) {
  return c == Coll::kAllReduce || c == Coll::kReduceScatter || c == Coll::kReduce ||
         c == Coll::kReduceScatterV;
}

struct Case {
  Coll coll;
  batonDataType_t type;
  batonRedOp_t op;
  size_t count;  // per rank (per block for the v-variants: block q has count + q elements)
  bool in_place;
  int root;
};

std::string Describe(const Case& c) {
  return std::string(Name(c.coll)) + " type=" + std::to_string(c.type) +
         " op=" + std::to_string(c.op) + " count=" + std::to_string(c.count) +
         (c.in_place ? " in place" : " out of place") + " root=" + std::to_string(c.root);
}

// Runs one case on fresh vectors and counts wrong elements.
batonResult_t RunCase(RankContext& ctx, const Case& c, size_t* wrong) {
  const int n = ctx.nranks(), r = ctx.rank();
  const size_t es = SizeOf(c.type), cnt = c.count;
  // v-variants: uneven blocks (count + q for rank q), received in reverse
  // order with a gap of 3 elements between blocks.
  std::vector<size_t> counts(n), displs(n), sdispls(n), scounts(n);
  size_t total = 0, span = 0;
  for (int q = 0; q < n; ++q) counts[q] = cnt == 0 ? 0 : cnt + q;
  total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  for (int q = n - 1; q >= 0; --q) {
    displs[q] = span;
    span += counts[q] + 3;
  }
  size_t send_elems = 0, recv_elems = 0;
  switch (c.coll) {
    case Coll::kAllReduce:
    case Coll::kBroadcast:
    case Coll::kReduce:
      send_elems = recv_elems = cnt;
      break;
    case Coll::kReduceScatter:
      send_elems = n * cnt;
      recv_elems = cnt;
      break;
    case Coll::kAllGather:
      send_elems = cnt;
      recv_elems = n * cnt;
      break;
    case Coll::kAlltoAll:
      send_elems = recv_elems = n * cnt;
      break;
    case Coll::kAllGatherV:
      send_elems = counts[r];
      recv_elems = span;
      break;
    case Coll::kReduceScatterV:
      send_elems = total;
      recv_elems = counts[r];
      break;
    case Coll::kAlltoAllV:
      // Rank r sends (cnt + r + q) % 7 + cnt to rank q, at reversed places.
      for (int q = 0; q < n; ++q) scounts[q] = cnt == 0 ? 0 : (cnt + r + q) % 7 + cnt;
      for (int q = n - 1; q >= 0; --q) {
        sdispls[q] = send_elems;
        send_elems += scounts[q] + 1;
      }
      for (int q = 0; q < n; ++q) counts[q] = cnt == 0 ? 0 : (cnt + q + r) % 7 + cnt;
      span = 0;
      for (int q = n - 1; q >= 0; --q) {
        displs[q] = span;
        span += counts[q] + 2;
      }
      recv_elems = span;
      break;
  }
  std::vector<uint8_t> send_mem((send_elems + 1) * es), recv_mem((recv_elems + 1) * es, 0xab);
  uint8_t* send = send_mem.data();
  uint8_t* recv = recv_mem.data();
  size_t first = 0;  // the global index of this rank's first input element
  if (c.coll == Coll::kAllGather) first = r * cnt;
  if (c.coll == Coll::kAllGatherV)
    for (int q = 0; q < r; ++q) first += counts[q];
  if (c.in_place) {
    switch (c.coll) {
      case Coll::kReduceScatter:
        recv = send + r * cnt * es;
        break;
      case Coll::kAllGather:
        send = recv + r * cnt * es;
        break;
      case Coll::kAllGatherV:
        send = recv + displs[r] * es;
        break;
      case Coll::kReduceScatterV:
        recv =
            send +
            (total == 0 ? 0 : std::accumulate(counts.begin(), counts.begin() + r, size_t{0})) * es;
        break;
      default:
        recv = send;
    }
  }
  for (size_t i = 0; i < send_elems; ++i) Store(c.type, send, i, SmallInput(c.type, r, first + i));
  batonComm_t comm = ctx.comm();
  batonResult_t res = batonSuccess;
  switch (c.coll) {
    case Coll::kAllReduce:
      res = batonAllReduce(send, recv, cnt, c.type, c.op, comm, nullptr);
      break;
    case Coll::kReduceScatter:
      res = batonReduceScatter(send, recv, cnt, c.type, c.op, comm, nullptr);
      break;
    case Coll::kAllGather:
      res = batonAllGather(send, recv, cnt, c.type, comm, nullptr);
      break;
    case Coll::kBroadcast:
      res = batonBroadcast(send, recv, cnt, c.type, c.root, comm, nullptr);
      break;
    case Coll::kReduce:
      res = batonReduce(send, recv, cnt, c.type, c.op, c.root, comm, nullptr);
      break;
    case Coll::kAlltoAll:
      res = batonAlltoAll(send, recv, cnt, c.type, comm, nullptr);
      break;
    case Coll::kAllGatherV:
      res = batonAllGatherV(send, counts[r], recv, counts.data(), displs.data(), c.type, comm,
                            nullptr);
      break;
    case Coll::kReduceScatterV:
      res = batonReduceScatterV(send, recv, counts.data(), c.type, c.op, comm, nullptr);
      break;
    case Coll::kAlltoAllV:
      res = batonAlltoAllV(send, scounts.data(), sdispls.data(), recv, counts.data(), displs.data(),
                           c.type, comm, nullptr);
      break;
  }
  *wrong = 0;
  if (res != batonSuccess) return res;
  auto check = [&](size_t at, double want) {
    *wrong += !CloseInType(c.type, Load(c.type, recv, at), want);
  };
  switch (c.coll) {
    case Coll::kAllReduce:
      for (size_t i = 0; i < cnt; ++i) check(i, SmallReduced(c.type, c.op, n, i));
      break;
    case Coll::kReduceScatter:
      for (size_t i = 0; i < cnt; ++i) check(i, SmallReduced(c.type, c.op, n, r * cnt + i));
      break;
    case Coll::kAllGather:
      for (size_t i = 0; i < n * cnt; ++i)
        check(i, SmallInput(c.type, static_cast<int>(i / cnt), i));
      break;
    case Coll::kBroadcast:
      for (size_t i = 0; i < cnt; ++i) check(i, SmallInput(c.type, c.root, i));
      break;
    case Coll::kReduce:
      if (r == c.root)
        for (size_t i = 0; i < cnt; ++i) check(i, SmallReduced(c.type, c.op, n, i));
      break;
    case Coll::kAlltoAll:
      for (int q = 0; q < n; ++q)
        for (size_t j = 0; j < cnt; ++j) check(q * cnt + j, SmallInput(c.type, q, r * cnt + j));
      break;
    case Coll::kAllGatherV: {
      size_t g = 0;
      for (int q = 0; q < n; ++q) {
        for (size_t j = 0; j < counts[q]; ++j) check(displs[q] + j, SmallInput(c.type, q, g + j));
        g += counts[q];
      }
      // The gaps keep what they held (in place: this rank's own input is there).
      if (!c.in_place)
        for (int q = 0; q + 1 < n; ++q) *wrong += recv[(displs[q] + counts[q]) * es] != 0xab;
      break;
    }
    case Coll::kReduceScatterV: {
      size_t at = 0;
      for (int q = 0; q < r; ++q) at += counts[q];
      for (size_t j = 0; j < counts[r]; ++j) check(j, SmallReduced(c.type, c.op, n, at + j));
      break;
    }
    case Coll::kAlltoAllV:
      // Block q came from rank q's sdispls[r]: its own layout, recomputed here.
      for (int q = 0; q < n; ++q) {
        size_t off = 0;
        for (int p = n - 1; p > r; --p) off += (cnt == 0 ? 0 : (cnt + q + p) % 7 + cnt) + 1;
        for (size_t j = 0; j < counts[q]; ++j) check(displs[q] + j, SmallInput(c.type, q, off + j));
      }
      break;
  }
  return res;
}

// Every case; the big count (above the default threshold for every
// collective) with float only, so the sweep stays quick.
void Sweep(RankContext& ctx, const std::vector<size_t>& counts) {
  const int n = ctx.nranks();
  // Fewer types from 5 ranks on: 9 processes on a small machine are slow,
  // and the types' kernels are the same at every rank count.
  const std::vector<batonDataType_t> types =
      n <= 4 ? std::vector<batonDataType_t>{batonFloat32, batonFloat64, batonInt32, batonBfloat16,
                                            batonUint8}
             : std::vector<batonDataType_t>{batonFloat32, batonInt32, batonBfloat16};
  for (Coll coll : kColls) {
    for (batonDataType_t t : types) {
      for (batonRedOp_t op : {batonSum, batonMax, batonProd, batonAvg}) {
        if (!Reduces(coll) && op != batonSum) continue;
        if (op == batonAvg && !IsFloat(t)) continue;
        if (op == batonProd && t == batonUint8) continue;
        for (size_t count : counts) {
          if (count == counts.back() && (t != batonFloat32 || op == batonProd)) continue;
          for (bool in_place : {false, true}) {
            if (in_place && (coll == Coll::kReduce || coll == Coll::kAlltoAllV)) continue;
            const Case c{coll, t, op, count, in_place, static_cast<int>(count % n)};
            size_t wrong = 0;
            const batonResult_t res = RunCase(ctx, c, &wrong);
            MP_ASSERT_OK(ctx, res) << Describe(c) << ": " << ctx.LastError();
            MP_ASSERT_TRUE(ctx, wrong == 0) << wrong << " wrong elements in " << Describe(c);
          }
        }
      }
    }
  }
}

constexpr char kTookCma[] = "buffers through process_vm_readv/writev";
// Whether every collective of the sweep took the single-copy path.
void ExpectEverySingleCopy(RankContext& ctx, const std::string& log) {
  for (Coll coll : kColls)
    MP_EXPECT_NE(ctx, log.find(std::string("single-copy collectives: ") + Name(coll) + " of"),
                 std::string::npos)
        << Name(coll) << " did not take the single-copy path";
}
constexpr char kRefused[] = "the shared-memory slots carry ordinary buffers";

// The communicator made inside the capture, so its creation's lines count.
void InitSweepDestroy(RankContext& ctx, const std::vector<size_t>& counts) {
  batonComm_t comm = nullptr;
  MP_ASSERT_OK(ctx, batonCommInitRank(&comm, ctx.nranks(), ctx.id(), ctx.rank()));
  ctx.set_comm(comm);
  Sweep(ctx, counts);
  MP_EXPECT_OK(ctx, batonCommDestroy(ctx.TakeComm()));
}

Options Forced() {
  Options options;
  options.init_comm = false;
  // Forced on for every size, also where ranks outnumber cores (the
  // default leaves such hosts on the slots) and whatever the kernel's copy
  // speed (the default's other condition, asked for beyond any machine).
  options.env = {{"BATON_CMA_COLL", "1"},
                 {"BATON_CMA_COLL_MIN_BYTES", "1"},
                 {"BATON_CMA_COLL_MIN_SPEED", "100000"}};
  return options;
}

// 2 MiB of float at the largest count: above the default threshold.
const std::vector<size_t> kCounts = {0, 1, 1001, (size_t{1} << 19) + 3};

class SingleCopy : public ::testing::TestWithParam<int> {};

TEST_P(SingleCopy, EveryCollectiveForced) {
  RunRanks(
      GetParam(),
      [](RankContext& ctx) {
        // From 5 ranks on the largest count is 70001 (above the threshold
        // for float from 4 ranks on; the big one runs at 2 to 4 ranks).
        const std::vector<size_t> counts =
            ctx.nranks() <= 4 ? kCounts : std::vector<size_t>{0, 1, 1001, 70001};
        const std::string log = CaptureLog([&] { InitSweepDestroy(ctx, counts); });
        if (ctx.nranks() > 1) {
          ExpectEverySingleCopy(ctx, log);
          MP_EXPECT_EQ(ctx, log.find(kRefused), std::string::npos);
        }
      },
      Forced());
}

INSTANTIATE_TEST_SUITE_P(Ranks, SingleCopy, ::testing::Values(1, 2, 3, 4, 5, 6, 7, 8, 9));

// The defaults: small calls through the slots, the big ones single-copy
// where the ranks do not outnumber the cores, else everything through the
// slots (measured slower there).
TEST(SingleCopyDefault, LargeCallsOnly) {
  for (int n : {2, 3}) {
    Options options;
    options.init_comm = false;
    // Whatever this machine's kernel copy measures (SlowKernelCopy below).
    options.env = {{"BATON_CMA_COLL_MIN_SPEED", "0"}};
    RunRanks(
        n,
        [](RankContext& ctx) {
          const std::string log = CaptureLog([&] {
            InitSweepDestroy(ctx, {1, 1001, 70001, (size_t{1} << 19) + 3});
          });
          if (ctx.nranks() <= sysconf(_SC_NPROCESSORS_ONLN))
            ExpectEverySingleCopy(ctx, log);
          else
            MP_EXPECT_EQ(ctx, log.find(kTookCma), std::string::npos);
        },
        options);
  }
}

// The default's speed check: a kernel copy slower than asked for (here
// more than any machine's: 1000x memcpy) keeps every rank on the slots,
// with one INFO line each naming the reason, and right results.
TEST(SingleCopyDefault, SlowKernelCopy) {
  for (int n : {2, 3}) {
    Options options;
    options.init_comm = false;
    options.env = {{"BATON_CMA_COLL_MIN_BYTES", "1"}, {"BATON_CMA_COLL_MIN_SPEED", "100000"}};
    RunRanks(
        n,
        [](RankContext& ctx) {
          if (ctx.nranks() > sysconf(_SC_NPROCESSORS_ONLN)) return;  // the default is off there
          const std::string log = CaptureLog([&] { InitSweepDestroy(ctx, {1, 1001, 70001}); });
          MP_EXPECT_NE(ctx, log.find(kRefused), std::string::npos) << "no line";
          MP_EXPECT_EQ(ctx, log.find(kRefused), log.rfind(kRefused)) << "more than one line";
          MP_EXPECT_NE(ctx, log.find("memcpy"), std::string::npos) << log;
          MP_EXPECT_EQ(ctx, log.find(kTookCma), std::string::npos) << "a single-copy call ran";
        },
        options);
  }
}

// Allreduce whose buffers overflow the last-level cache: the result is
// streamed into the own output and written to the peers from scratch.
TEST(SingleCopyLarge, AllReduceAboveTheCache) {
  RunRanks(
      2,
      [](RankContext& ctx) {
        batonComm_t comm = nullptr;
        MP_ASSERT_OK(ctx, batonCommInitRank(&comm, ctx.nranks(), ctx.id(), ctx.rank()));
        ctx.set_comm(comm);
        for (batonRedOp_t op : {batonSum, batonAvg}) {
          for (bool in_place : {false, true}) {
            const Case c{Coll::kAllReduce, batonFloat32, op, (size_t{9} << 20) + 5, in_place, 0};
            size_t wrong = 0;
            MP_ASSERT_OK(ctx, RunCase(ctx, c, &wrong)) << Describe(c) << ": " << ctx.LastError();
            MP_ASSERT_TRUE(ctx, wrong == 0) << wrong << " wrong elements in " << Describe(c);
          }
        }
        MP_EXPECT_OK(ctx, batonCommDestroy(ctx.TakeComm()));
      },
      Forced());
}

// Rank 1 is not dumpable and nobody holds CAP_SYS_PTRACE, so its peers'
// process_vm_readv of it fails with EPERM: the first call settles that on
// every rank, one INFO line each, and every call takes the slots with right
// results.
TEST(SingleCopyRefused, NonDumpableRank) {
  for (int n : {2, 4}) {
    RunRanks(
        n,
        [](RankContext& ctx) {
          MP_ASSERT_TRUE(ctx, DropPtraceCapability()) << strerror(errno);
          if (ctx.rank() == 1) MP_ASSERT_TRUE(ctx, prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0);
          const std::string log = CaptureLog([&] { InitSweepDestroy(ctx, {1, 1001, 70001}); });
          MP_EXPECT_NE(ctx, log.find(kRefused), std::string::npos) << "no refusal line";
          MP_EXPECT_EQ(ctx, log.find(kRefused), log.rfind(kRefused)) << "more than one line";
          MP_EXPECT_EQ(ctx, log.find(kTookCma), std::string::npos) << "a single-copy call ran";
          if (ctx.rank() != 1)
            MP_EXPECT_NE(ctx, log.find("Operation not permitted"), std::string::npos);
        },
        Forced());
  }
}

// BATON_CMA_COLL=0: the slots, without a probe.
TEST(SingleCopyOff, Switch) {
  Options options = Forced();
  options.env.push_back({"BATON_CMA_COLL", "0"});
  RunRanks(
      3,
      [](RankContext& ctx) {
        const std::string log = CaptureLog([&] { InitSweepDestroy(ctx, {1, 70001}); });
        MP_EXPECT_EQ(ctx, log.find(kTookCma), std::string::npos);
        MP_EXPECT_EQ(ctx, log.find(kRefused), std::string::npos);
      },
      options);
}

}  // namespace
