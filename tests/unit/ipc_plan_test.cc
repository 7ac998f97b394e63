// The CUDA IPC plans (collectives/ipc_plan.h), run on host memory: all ranks
// of a plan live in this process, each with its own send and receive
// buffers, and every step runs through the CPU reduce-copy kernels, exactly
// as the CUDA executor runs it through the CUDA kernels on mapped peer
// memory. Results are checked against plain loops over all ranks' inputs
// (tests/reference.h) for 1 to 20 ranks (one to three reduction passes),
// every collective, datatype and op, counts 0, 1, odd and not divisible by
// the rank count, in place and out of place.
//
// Ranks of one phase run concurrently on GPUs. Here they run one after the
// other, so every phase runs twice from the same state (ranks in increasing
// and in decreasing order) with identical results required, and a static
// check fails any phase in which one rank writes bytes another rank touches.
#include "algorithms/ipc_plan.h"
#include "algorithms/ipc_bounce_layout.h"
#include "algorithms/ipc_record.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "common/reference.h"
#include "cuda/cuda_device.h"
#include "kernels/cpu_reduce.h"

namespace baton {
namespace {

constexpr Collective kAllCollectives[] = {Collective::kAllReduce,     Collective::kBroadcast,
                                          Collective::kReduce,        Collective::kAllGather,
                                          Collective::kReduceScatter, Collective::kAlltoAll};

// Elements in each rank's send and receive buffer for a per-call count.
size_t SendElements(Collective c, size_t count, int n) {
  return c == Collective::kReduceScatter || c == Collective::kAlltoAll ? count * n : count;
}
size_t RecvElements(Collective c, size_t count, int n) {
  return c == Collective::kAllGather || c == Collective::kAlltoAll ? count * n : count;
}

// The buffers of all ranks. In place, the send buffer lies inside the
// receive buffer where the API puts it (allgather: block r; reduce-scatter:
// the receive buffer is block r of the send buffer; others: the same).
struct World {
  int n = 1;
  size_t count = 0;
  batonDataType_t dt = batonFloat32;
  Collective collective = Collective::kAllReduce;
  int root = 0;
  bool in_place = false;
  std::vector<std::vector<uint8_t>> storage;  // one per rank
  std::vector<uint8_t*> send, recv;

  World(Collective c, int nranks, size_t per_call, batonDataType_t type, int root_rank,
        bool inplace)
      : n(nranks), count(per_call), dt(type), collective(c), root(root_rank), in_place(inplace) {
    const size_t es = SizeOf(dt);
    const size_t sbytes = SendElements(c, count, n) * es, rbytes = RecvElements(c, count, n) * es;
    storage.resize(n);
    send.resize(n);
    recv.resize(n);
    for (int r = 0; r < n; ++r) {
      if (!in_place) {
        storage[r].assign(sbytes + rbytes + 1, 0xA5);  // a poison value in every unwritten byte
        send[r] = storage[r].data();
        recv[r] = storage[r].data() + sbytes;
      } else if (c == Collective::kAllGather) {
        storage[r].assign(rbytes + 1, 0xA5);
        recv[r] = storage[r].data();
        send[r] = recv[r] + r * count * es;
      } else if (c == Collective::kReduceScatter) {
        storage[r].assign(sbytes + 1, 0xA5);
        send[r] = storage[r].data();
        recv[r] = send[r] + r * count * es;
      } else {
        storage[r].assign(std::max(sbytes, rbytes) + 1, 0xA5);
        send[r] = recv[r] = storage[r].data();
      }
    }
  }

  uint8_t* Resolve(const IpcRef& ref) const {
    return (ref.buffer == IpcBuffer::kSend ? send : recv)[ref.rank] + ref.offset;
  }
};

// Rank r's input: block b (of a send buffer with several blocks) gets the
// inputs of element b * count + i, so every block differs.
void FillInputs(World* w, batonRedOp_t op) {
  const size_t elems = SendElements(w->collective, w->count, w->n);
  for (int r = 0; r < w->n; ++r) {
    if (w->collective == Collective::kBroadcast && r != w->root) continue;
    for (size_t i = 0; i < elems; ++i)
      Store(w->dt, w->send[r], i, ExactInput(w->dt, op, r, w->n, i));
  }
}

// Bytes one step reads and writes, as address ranges.
struct Range {
  uintptr_t begin, end;
  int rank;
};

bool Overlap(const Range& a, const Range& b) {
  return a.begin < a.end && b.begin < b.end && a.begin < b.end && b.begin < a.end;
}

// Fails when, within one phase, a rank writes bytes that another rank reads
// or writes: those would race on a GPU.
::testing::AssertionResult PhasesAreRaceFree(const World& w, const std::vector<IpcPlan>& plans) {
  const size_t es = SizeOf(w.dt);
  const size_t phases = plans[0].phases.size();
  for (size_t p = 0; p < phases; ++p) {
    std::vector<Range> reads, writes;
    for (int r = 0; r < w.n; ++r) {
      for (const IpcStep& step : plans[r].phases[p]) {
        if (IsNoOpStep(step, w.Resolve(step.srcs[0]), w.Resolve(step.dst))) continue;
        const size_t bytes = step.count * es;
        auto at = [&](const IpcRef& ref) {
          const auto b = reinterpret_cast<uintptr_t>(w.Resolve(ref));
          return Range{b, b + bytes, r};
        };
        for (int s = 0; s < step.nsrcs; ++s) reads.push_back(at(step.srcs[s]));
        writes.push_back(at(step.dst));
      }
    }
    for (const Range& wr : writes) {
      for (const Range& rd : reads)
        if (rd.rank != wr.rank && Overlap(wr, rd))
          return ::testing::AssertionFailure() << "phase " << p << ": rank " << wr.rank
                                               << " writes bytes rank " << rd.rank << " reads";
      for (const Range& other : writes)
        if (other.rank != wr.rank && Overlap(wr, other))
          return ::testing::AssertionFailure() << "phase " << p << ": ranks " << wr.rank << " and "
                                               << other.rank << " write the same bytes";
    }
  }
  return ::testing::AssertionSuccess();
}

// Runs every rank's plan, phase by phase (a phase of all ranks, then the
// next: the barrier), ranks in increasing or decreasing order.
void Execute(World* w, const std::vector<IpcPlan>& plans, batonRedOp_t op, bool reverse) {
  const size_t phases = plans[0].phases.size();
  for (size_t p = 0; p < phases; ++p) {
    for (int k = 0; k < w->n; ++k) {
      const int r = reverse ? w->n - 1 - k : k;
      for (const IpcStep& step : plans[r].phases[p]) {
        if (IsNoOpStep(step, w->Resolve(step.srcs[0]), w->Resolve(step.dst))) continue;
        ReduceCopyArgs args;
        args.nsrcs = step.nsrcs;
        for (int s = 0; s < step.nsrcs; ++s) args.srcs[s] = w->Resolve(step.srcs[s]);
        args.ndsts = 1;
        args.dsts[0] = w->Resolve(step.dst);
        args.count = step.count;
        args.datatype = w->dt;
        args.op = op;
        args.post_divisor = step.post_divisor;
        ReduceCopy(args);
      }
    }
  }
}

// Checks every rank's output (and that nothing outside it changed where
// nothing should be written) against plain loops over the inputs.
void CheckOutputs(const World& w, batonRedOp_t op, const std::string& what) {
  const size_t es = SizeOf(w.dt);
  const int n = w.n;
  int failures = 0;
  auto expect = [&](int r, size_t elem, double exact) {
    uint8_t rounded[8];
    Store(w.dt, rounded, 0, exact);  // the reference's value in the datatype
    const double want = Load(w.dt, rounded, 0), got = Load(w.dt, w.recv[r], elem);
    if (got != want && ++failures <= 5)
      ADD_FAILURE() << what << ": rank " << r << " element " << elem << " got " << got << " want "
                    << want;
  };
  for (int r = 0; r < n; ++r) {
    switch (w.collective) {
      case Collective::kAllReduce:
        for (size_t i = 0; i < w.count; ++i) expect(r, i, ExactExpected(w.dt, op, n, i));
        break;
      case Collective::kReduce:
        if (r == w.root) {
          for (size_t i = 0; i < w.count; ++i) expect(r, i, ExactExpected(w.dt, op, n, i));
        } else if (!w.in_place && w.count > 0) {
          EXPECT_EQ(w.recv[r][0], 0xA5) << what << ": non-root rank " << r << " wrote its output";
        }
        break;
      case Collective::kReduceScatter:
        for (size_t i = 0; i < w.count; ++i)
          expect(r, i, ExactExpected(w.dt, op, n, r * w.count + i));
        break;
      case Collective::kBroadcast:
        for (size_t i = 0; i < w.count; ++i) expect(r, i, ExactInput(w.dt, op, w.root, n, i));
        break;
      case Collective::kAllGather:
        for (int q = 0; q < n; ++q)
          for (size_t i = 0; i < w.count; ++i)
            expect(r, q * w.count + i, ExactInput(w.dt, op, q, n, i));
        break;
      case Collective::kAlltoAll:
        for (int q = 0; q < n; ++q)
          for (size_t i = 0; i < w.count; ++i)
            expect(r, q * w.count + i, ExactInput(w.dt, op, q, n, r * w.count + i));
        break;
      default:  // no plan (ipc_plan.h)
        break;
    }
    // The guard byte after each rank's buffers is never written.
    EXPECT_EQ(w.storage[r].back(), 0xA5) << what << ": rank " << r << " wrote past its buffers";
  }
  (void)es;
}

std::string Describe(Collective c, int n, size_t count, batonDataType_t dt, batonRedOp_t op,
                     int root, bool in_place) {
  return std::string(CollectiveName(c)) + " n=" + std::to_string(n) +
         " count=" + std::to_string(count) + " dtype=" + std::to_string(dt) +
         " op=" + std::to_string(op) + " root=" + std::to_string(root) +
         (in_place ? " in place" : "");
}

void RunCase(Collective c, int n, size_t count, batonDataType_t dt, batonRedOp_t op, int root,
             bool in_place) {
  const std::string what = Describe(c, n, count, dt, op, root, in_place);
  std::vector<IpcPlan> plans(n);
  for (int r = 0; r < n; ++r) {
    IpcCall call{c, count, dt, op, root, r, n};
    BuildIpcPlan(call, &plans[r]);
    ASSERT_EQ(plans[r].phases.size(), plans[0].phases.size())
        << what << ": ranks disagree on the number of phases (barriers)";
    for (const auto& phase : plans[r].phases)
      for (const IpcStep& step : phase) {
        ASSERT_GE(step.nsrcs, 1) << what;
        ASSERT_LE(step.nsrcs, kMaxReduceSrcs) << what;
        ASSERT_GT(step.count, 0u) << what << ": empty step";
        ASSERT_EQ(step.dst.rank, r) << what << ": a rank writes a peer's buffer";
        for (int s = 0; s < step.nsrcs; ++s) {
          ASSERT_GE(step.srcs[s].rank, 0) << what;
          ASSERT_LT(step.srcs[s].rank, n) << what;
        }
      }
  }
  World forward(c, n, count, dt, root, in_place), backward(c, n, count, dt, root, in_place);
  FillInputs(&forward, op);
  FillInputs(&backward, op);
  ASSERT_TRUE(PhasesAreRaceFree(forward, plans)) << what;
  Execute(&forward, plans, op, false);
  Execute(&backward, plans, op, true);
  CheckOutputs(forward, op, what);
  for (int r = 0; r < n; ++r)
    ASSERT_EQ(forward.storage[r], backward.storage[r])
        << what << ": the result depends on the order ranks ran in (rank " << r << ")";
}

std::vector<size_t> Counts(int n) {
  return {0, 1, 7, size_t(n) + 1, size_t(3 * n + 1), 257};
}

TEST(IpcPlanTest, EveryCollectiveDatatypeAndOp) {
  for (Collective c : kAllCollectives)
    for (int n : {1, 2, 3, 5, 8, 9, 16, 17})
      for (batonDataType_t dt : kAllTypes)
        for (batonRedOp_t op : kAllOps) {
          if (!Reduces(c) && op != batonSum) continue;  // ops only matter to reductions
          for (size_t count : {size_t(0), size_t(1), size_t(3 * n + 1)})
            for (bool in_place : {false, true}) {
              if (in_place && c == Collective::kAlltoAll) continue;  // see ipc_plan.h
              RunCase(c, n, count, dt, op, (n - 1) / 2, in_place);
            }
        }
}

TEST(IpcPlanTest, EveryRankCountCountAndRoot) {
  for (Collective c : kAllCollectives)
    for (int n = 1; n <= 20; ++n)
      for (size_t count : Counts(n))
        for (int root : {0, n - 1})
          for (bool in_place : {false, true}) {
            if (in_place && c == Collective::kAlltoAll) continue;  // see ipc_plan.h
            RunCase(c, n, count, batonFloat32, batonAvg, root, in_place);
            RunCase(c, n, count, batonInt32, batonSum, root, in_place);
          }
}

// Buffers CUDA IPC cannot share run through scratch (cuda/ipc_bounce.h): the
// ranks in `bounced` copy in what PlanIpcBounce says, run the plan on their
// scratch, copy out, and the user's buffers must hold what they hold without
// scratch, untouched bytes included.
void RunBouncedCase(Collective c, int n, size_t count, int root, bool in_place,
                    const std::vector<bool>& bounced) {
  const batonDataType_t dt = batonInt32;
  const batonRedOp_t op = batonSum;
  const std::string what = Describe(c, n, count, dt, op, root, in_place) + " bounced";
  std::vector<IpcPlan> plans(n);
  for (int r = 0; r < n; ++r) BuildIpcPlan({c, count, dt, op, root, r, n}, &plans[r]);
  World w(c, n, count, dt, root, in_place);
  FillInputs(&w, op);
  std::vector<uint8_t*> user_send = w.send, user_recv = w.recv;
  std::vector<IpcBounceLayout> layouts(n);
  std::vector<std::vector<uint8_t>> scratch(n);
  for (int r = 0; r < n; ++r) {
    if (!bounced[r]) continue;
    const CudaCallBuffers b =
        CudaBuffersFor(c, w.send[r], w.recv[r], count, SizeOf(dt), n, r, root);
    const IpcBounceLayout& l = layouts[r] =
        PlanIpcBounce(b.send_bytes, b.recv_bytes, b.send == b.recv, true, true, false);
    scratch[r].assign(l.bytes, 0x5A);  // not the World's poison: copied-out garbage shows
    if (l.send) {
      std::memcpy(scratch[r].data() + l.send_offset, w.send[r], l.copy_in_send);
      w.send[r] = scratch[r].data() + l.send_offset;
    }
    if (l.recv) {
      std::memcpy(scratch[r].data() + l.recv_offset, w.recv[r], l.copy_in_recv);
      w.recv[r] = scratch[r].data() + l.recv_offset;
    }
  }
  Execute(&w, plans, op, false);
  for (int r = 0; r < n; ++r) {
    if (bounced[r] && layouts[r].recv)
      std::memcpy(user_recv[r], w.recv[r], layouts[r].copy_out_recv);
  }
  w.send = user_send;
  w.recv = user_recv;
  CheckOutputs(w, op, what);
}

TEST(IpcBounceTest, EveryCollectiveThroughScratch) {
  for (Collective c : kAllCollectives)
    for (int n : {1, 2, 3, 4, 5, 9})
      for (size_t count : {size_t(0), size_t(1), size_t(2 * n + 1), size_t(257)})
        for (bool in_place : {false, true}) {
          if (in_place && c == Collective::kAlltoAll) continue;  // falls back (ipc_plan.h)
          for (int root : {0, n - 1}) {
            RunBouncedCase(c, n, count, root, in_place, std::vector<bool>(n, true));
            std::vector<bool> first(n, false);
            first[0] = true;  // one rank's buffers from a pool, its peers' shareable
            RunBouncedCase(c, n, count, root, in_place, first);
          }
        }
}

// The layout itself: regions apart and aligned, one region in place.
TEST(IpcBounceTest, Layout) {
  IpcBounceLayout l = PlanIpcBounce(1000, 4000, false, true, true, false);
  EXPECT_TRUE(l.send && l.recv);
  EXPECT_EQ(l.send_offset, 0u);
  EXPECT_EQ(l.recv_offset, 1024u);
  EXPECT_EQ(l.bytes, 5024u);
  EXPECT_EQ(l.copy_in_send, 1000u);
  EXPECT_EQ(l.copy_in_recv, 0u);
  EXPECT_EQ(l.copy_out_recv, 4000u);
  l = PlanIpcBounce(1000, 4000, false, false, true, true);  // only the output, gaps kept
  EXPECT_FALSE(l.send);
  EXPECT_EQ(l.recv_offset, 0u);
  EXPECT_EQ(l.copy_in_recv, 4000u);
  l = PlanIpcBounce(4000, 1000, true, true, true, false);  // reduce-scatter in place, rank 0
  EXPECT_EQ(l.send_offset, l.recv_offset);
  EXPECT_EQ(l.bytes, 4000u);
  EXPECT_EQ(l.copy_in_send, 4000u);
  EXPECT_EQ(l.copy_out_recv, 1000u);
  l = PlanIpcBounce(0, 1000, true, true, true, false);  // broadcast in place, not the root
  EXPECT_FALSE(l.send);
  EXPECT_EQ(l.copy_out_recv, 1000u);
  l = PlanIpcBounce(1000, 1000, false, false, false, false);
  EXPECT_FALSE(l.send || l.recv);
  EXPECT_EQ(l.bytes, 0u);
}

// Reductions take passes of at most kMaxReduceSrcs sources; avg divides once.
TEST(IpcPlanTest, ReductionPassesAndDivisor) {
  for (int n : {1, 8, 9, 15, 16, 22}) {
    IpcPlan plan;
    BuildIpcPlan({Collective::kReduceScatter, 10, batonFloat32, batonAvg, 0, 0, n}, &plan);
    ASSERT_EQ(plan.phases.size(), 1u);
    const auto& steps = plan.phases[0];
    const size_t passes = n <= kMaxReduceSrcs ? 1 : 1 + (n - kMaxReduceSrcs + 6) / 7;
    ASSERT_EQ(steps.size(), passes) << "n=" << n;
    for (size_t k = 0; k < steps.size(); ++k) {
      EXPECT_EQ(steps[k].post_divisor, k + 1 == steps.size() ? uint32_t(n) : 0u)
          << "n=" << n << " pass " << k;
      if (k > 0) {
        EXPECT_EQ(steps[k].srcs[0].buffer, IpcBuffer::kRecv) << "accumulates";
      }
    }
    EXPECT_EQ(steps[0].srcs[0].rank, 0) << "own input first";
  }
}

// The allreduce plan moves each input byte once per reader: 2 phases, the
// reduction of one part and n - 1 copies.
TEST(IpcPlanTest, AllReduceShape) {
  IpcPlan plan;
  BuildIpcPlan({Collective::kAllReduce, 1000, batonFloat32, batonSum, 0, 2, 4}, &plan);
  ASSERT_EQ(plan.phases.size(), 2u);
  ASSERT_EQ(plan.phases[0].size(), 1u);
  EXPECT_EQ(plan.phases[0][0].nsrcs, 4);
  EXPECT_EQ(plan.phases[0][0].count, 250u);
  EXPECT_EQ(plan.phases[0][0].dst.offset, 500u * 4);
  ASSERT_EQ(plan.phases[1].size(), 3u);
  EXPECT_EQ(plan.phases[1][0].srcs[0].rank, 3) << "staggered: starts after its own part";
}

// The exchange's verdict: ranks that disagree on the call are an error with
// the same message on every rank; a rank that cannot serve IPC makes all
// fall back; records that are not IPC records (a rank on another path) are
// an error.
std::vector<IpcRecord> Records(int n, const IpcCall& call) {
  std::vector<IpcRecord> all;
  for (int r = 0; r < n; ++r) {
    IpcCall mine = call;
    mine.rank = r;
    all.push_back(MakeIpcRecord(mine, 1000 + r));
    std::snprintf(all.back().bus_id, sizeof(all.back().bus_id), "0000:%02x:00.0", r);
  }
  return all;
}

TEST(IpcRecordTest, AgreeingRanksRun) {
  const IpcCall call{Collective::kAllReduce, 1000, batonFloat32, batonSum, 0, 0, 4};
  const auto all = Records(4, call);
  EXPECT_EQ(JudgeIpcRecords(all).kind, IpcVerdict::Kind::kRun);
  EXPECT_EQ(IpcPeerSetKey(all),
            "1000@0000:00:00.0;1001@0000:01:00.0;1002@0000:02:00.0;"
            "1003@0000:03:00.0;");
}

TEST(IpcRecordTest, DisagreeingRanksAllGetTheSameError) {
  const IpcCall call{Collective::kAllReduce, 1000, batonFloat32, batonSum, 0, 0, 4};
  auto all = Records(4, call);
  all[2].count = 999;
  const IpcVerdict v = JudgeIpcRecords(all);
  ASSERT_EQ(v.kind, IpcVerdict::Kind::kError);
  EXPECT_EQ(v.error.code(), batonInvalidUsage);
  EXPECT_EQ(v.error.message(),
            "ranks disagree on the call: rank 0 called allreduce (1000 x float, sum), rank 2 "
            "called allreduce (999 x float, sum)");
  for (auto change : {+[](IpcRecord* r) { r->collective = 3; }, +[](IpcRecord* r) { r->op = 2; },
                      +[](IpcRecord* r) { r->root = 1; }, +[](IpcRecord* r) { r->datatype = 2; }}) {
    auto other = Records(3, call);
    change(&other[1]);
    EXPECT_EQ(JudgeIpcRecords(other).kind, IpcVerdict::Kind::kError);
  }
}

TEST(IpcRecordTest, ARankThatCannotServeIpcMakesAllFallBack) {
  const IpcCall call{Collective::kAlltoAll, 10, batonInt32, batonSum, 0, 0, 3};
  auto all = Records(3, call);
  SetIpcNotReady(&all[1], "in-place alltoall");
  const IpcVerdict v = JudgeIpcRecords(all);
  EXPECT_EQ(v.kind, IpcVerdict::Kind::kFallback);
  EXPECT_EQ(v.reason, "rank 1: in-place alltoall");
  // A reason longer than the field is cut, not overflowed.
  SetIpcNotReady(&all[0], std::string(500, 'x'));
  EXPECT_EQ(JudgeIpcRecords(all).reason.size(), std::string("rank 0: ").size() + 95);
}

TEST(IpcRecordTest, ForeignBytesAreAnError) {
  const IpcCall call{Collective::kBroadcast, 10, batonInt8, batonSum, 1, 0, 2};
  auto all = Records(2, call);
  all[1].magic = 0;
  const IpcVerdict v = JudgeIpcRecords(all);
  ASSERT_EQ(v.kind, IpcVerdict::Kind::kError);
  EXPECT_NE(v.error.message().find("rank 1 is not in the same CUDA IPC call"), std::string::npos);
}

}  // namespace
}  // namespace baton
