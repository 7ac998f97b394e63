// Every algorithm's schedules, run for many rank counts in one process by
// the simulator, checked against a plain loop over all ranks' inputs, and
// their message counts checked against the theory.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "algorithms/barrier.h"
#include "algorithms/chain.h"
#include "algorithms/hierarchical.h"
#include "algorithms/pairwise.h"
#include "algorithms/ring.h"
#include "exec/simulator.h"
#include "kernels/cpu_reduce.h"
#include "unit/schedule_checks.h"

namespace baton {
namespace {

std::vector<int> IdentityRing(int p) {
  std::vector<int> r(p);
  std::iota(r.begin(), r.end(), 0);
  return r;
}

// A ring order that is not rank order, as on a multi-host job.
std::vector<int> ShuffledRing(int p) {
  std::vector<int> r;
  for (int i = 0; i < p; i += 2) r.push_back(i);
  for (int i = 1; i < p; i += 2) r.push_back(i);
  return r;
}

// Input of rank r: small integers, so every reduction order is exact.
int32_t Input(int r, size_t i) {
  return static_cast<int32_t>((r * 7 + i * 13) % 11) - 5;
}

struct Case {
  int p;
  size_t count;
  bool shuffled;
};

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (int p : {1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 64, 100, 129})
    for (size_t count : {size_t(0), size_t(1), size_t(p - 1), size_t(p + 1), size_t(1009)})
      for (bool shuffled : {false, true}) cases.push_back({p, count, shuffled});
  return cases;
}

CollArgs Args(int r, int p, size_t count, const std::vector<int>* ring) {
  CollArgs a;
  a.rank = r;
  a.nranks = p;
  a.count = count;
  a.datatype = batonInt32;
  a.op = batonSum;
  a.ring = ring;
  a.chunk_bytes = 64;  // many chunks, to exercise pipelining
  return a;
}

TEST(ScheduleTest, RingAllReduceMatchesReference) {
  for (const Case& c : Cases()) {
    // `variant`: in place or not; sends the transport holds or not (where
    // it holds them, an allgather receive waits for its own send).
    for (int variant = 0; variant < 4; ++variant) {
      const bool in_place = variant & 1, buffered = variant & 2;
      auto ring = c.shuffled ? ShuffledRing(c.p) : IdentityRing(c.p);
      std::vector<std::vector<int32_t>> in(c.p), out(c.p);
      std::vector<Schedule> sched(c.p);
      for (int r = 0; r < c.p; ++r) {
        in[r].resize(c.count);
        for (size_t i = 0; i < c.count; ++i) in[r][i] = Input(r, i);
        out[r].assign(c.count, 12345);
        CollArgs a = Args(r, c.p, c.count, &ring);
        a.send = in[r].data();
        a.recv = in_place ? in[r].data() : out[r].data();
        a.stream_outputs = c.shuffled;
        if (buffered) a.sends_buffered_bytes = SIZE_MAX;
        BuildRingAllReduce(a, &sched[r]);
        if (c.p <= 17) {
          ASSERT_TRUE(CheckSchedule(sched[r])) << "p=" << c.p << " rank " << r;
        }
      }
      std::vector<SimRankStats> stats;
      Status st = SimulateSchedules(sched, &stats);
      ASSERT_TRUE(st.ok()) << "p=" << c.p << " count=" << c.count << " buffered=" << buffered
                           << ": " << st.message();
      for (size_t i = 0; i < c.count; ++i) {
        int32_t want = 0;
        for (int r = 0; r < c.p; ++r) want += Input(r, i);
        for (int r = 0; r < c.p; ++r)
          ASSERT_EQ((in_place ? in[r] : out[r])[i], want)
              << "p=" << c.p << " count=" << c.count << " rank " << r << " i " << i;
      }
    }
  }
}

// Where the transport holds all of a rank's sends of the call, each
// allgather receive waits for the same step's send (it runs to its end
// first); where it does not, for the receive before it and the send that
// read its bytes only.
TEST(ScheduleTest, RingAllGatherReceivesWaitForTheirSendWhereSendsAreHeld) {
  for (int p : {2, 3, 5}) {
    auto ring = IdentityRing(p);
    const size_t count = 1000;  // p - 1 steps each way of at most 1000 / p + 1 elements
    const size_t held = 2 * (p - 1) * ((count + p - 1) / p) * sizeof(int32_t);
    for (const size_t buffered : {size_t{0}, held - 1, held}) {
      std::vector<int32_t> in(count), out(count);
      CollArgs a = Args(0, p, count, &ring);
      a.chunk_bytes = SIZE_MAX;
      a.send = in.data();
      a.recv = out.data();
      a.sends_buffered_bytes = buffered;
      Schedule s;
      BuildRingAllReduce(a, &s);
      int allgather_recvs = 0, waiting_for_send = 0, last_send = -1;
      for (int i = 0; i < static_cast<int>(s.ops.size()); ++i) {
        const Op& op = s.ops[i];
        if (op.kind == Op::Kind::kSend) last_send = i;
        if (op.kind != Op::Kind::kRecv || op.reduce_with != nullptr) continue;
        ++allgather_recvs;
        waiting_for_send += op.deps[0] == last_send || op.deps[1] == last_send;
      }
      EXPECT_EQ(allgather_recvs, p - 1) << "p=" << p;
      EXPECT_EQ(waiting_for_send, buffered >= held ? p - 1 : 0)
          << "p=" << p << " buffered " << buffered << " of " << held;
    }
  }
}

TEST(ScheduleTest, RingAllReduceAtThousandRanks) {
  for (int p : {127, 1000, 1024}) {
    for (size_t count : {size_t(1), size_t(p + 1)}) {
      auto ring = ShuffledRing(p);
      std::vector<std::vector<int32_t>> buf(p);
      std::vector<Schedule> sched(p);
      for (int r = 0; r < p; ++r) {
        buf[r].resize(count);
        for (size_t i = 0; i < count; ++i) buf[r][i] = Input(r, i);
        CollArgs a = Args(r, p, count, &ring);
        a.send = a.recv = buf[r].data();
        BuildRingAllReduce(a, &sched[r]);
      }
      std::vector<SimRankStats> stats;
      Status st = SimulateSchedules(sched, &stats);
      ASSERT_TRUE(st.ok()) << "p=" << p << ": " << st.message();
      for (size_t i = 0; i < count; ++i) {
        int32_t want = 0;
        for (int r = 0; r < p; ++r) want += Input(r, i);
        for (int r = 0; r < p; ++r) ASSERT_EQ(buf[r][i], want) << "p=" << p << " rank " << r;
      }
    }
  }
}

TEST(ScheduleTest, RingAllReduceAvgDividesOnce) {
  for (int p : {2, 3, 5, 8}) {
    auto ring = IdentityRing(p);
    const size_t n = 37;
    std::vector<std::vector<float>> in(p, std::vector<float>(n)), out(p, std::vector<float>(n));
    std::vector<Schedule> sched(p);
    for (int r = 0; r < p; ++r) {
      for (size_t i = 0; i < n; ++i) in[r][i] = static_cast<float>(Input(r, i));
      CollArgs a = Args(r, p, n, &ring);
      a.datatype = batonFloat32;
      a.op = batonAvg;
      a.send = in[r].data();
      a.recv = out[r].data();
      BuildRingAllReduce(a, &sched[r]);
    }
    std::vector<SimRankStats> stats;
    ASSERT_TRUE(SimulateSchedules(sched, &stats).ok());
    for (size_t i = 0; i < n; ++i) {
      float sum = 0;
      for (int r = 0; r < p; ++r) sum += in[r][i];
      for (int r = 0; r < p; ++r) ASSERT_EQ(out[r][i], sum / p) << "p=" << p << " i=" << i;
    }
  }
}

TEST(ScheduleTest, RingAllReduceMessageCountsMatchTheory) {
  // Ring: 2(p-1) steps per chunk and 2(p-1)/p * n bytes sent per rank.
  for (int p : {2, 3, 4, 7, 16, 64, 128}) {
    auto ring = IdentityRing(p);
    const size_t n = size_t(p) * 1000;
    std::vector<std::vector<int32_t>> buf(p, std::vector<int32_t>(n, 1));
    std::vector<Schedule> sched(p);
    for (int r = 0; r < p; ++r) {
      CollArgs a = Args(r, p, n, &ring);
      a.chunk_bytes = 1 << 20;  // one chunk per segment
      a.send = a.recv = buf[r].data();
      BuildRingAllReduce(a, &sched[r]);
    }
    std::vector<SimRankStats> stats;
    ASSERT_TRUE(SimulateSchedules(sched, &stats).ok());
    for (int r = 0; r < p; ++r) {
      EXPECT_EQ(stats[r].sends, size_t(2 * (p - 1)));
      EXPECT_EQ(stats[r].bytes_sent, 2 * (p - 1) * n / p * sizeof(int32_t));
      EXPECT_EQ(stats[r].bytes_reduced, (p - 1) * n / p * sizeof(int32_t));
    }
  }
}

TEST(ScheduleTest, ChainBroadcastEveryRoot) {
  for (const Case& c : Cases()) {
    if (c.p > 17) continue;
    for (int root = 0; root < c.p; ++root) {
      auto ring = c.shuffled ? ShuffledRing(c.p) : IdentityRing(c.p);
      std::vector<std::vector<int32_t>> buf(c.p, std::vector<int32_t>(c.count, -1));
      std::vector<int32_t> src(c.count);
      for (size_t i = 0; i < c.count; ++i) src[i] = Input(root, i) * 3 + 1;
      std::vector<Schedule> sched(c.p);
      for (int r = 0; r < c.p; ++r) {
        CollArgs a = Args(r, c.p, c.count, &ring);
        a.root = root;
        a.send = r == root ? src.data() : nullptr;
        a.recv = buf[r].data();
        a.stream_outputs = c.shuffled;
        BuildChainBroadcast(a, &sched[r]);
        ASSERT_TRUE(CheckSchedule(sched[r])) << "p=" << c.p << " rank " << r;
      }
      std::vector<SimRankStats> stats;
      Status st = SimulateSchedules(sched, &stats);
      ASSERT_TRUE(st.ok()) << st.message();
      for (int r = 0; r < c.p; ++r) ASSERT_EQ(buf[r], src) << "p=" << c.p << " root " << root;
    }
  }
}

TEST(ScheduleTest, ChainReduceEveryRoot) {
  for (const Case& c : Cases()) {
    if (c.p > 17) continue;
    for (int root : {0, c.p - 1, c.p / 2}) {
      auto ring = c.shuffled ? ShuffledRing(c.p) : IdentityRing(c.p);
      std::vector<std::vector<int32_t>> in(c.p);
      std::vector<int32_t> out(c.count, 777);
      std::vector<Schedule> sched(c.p);
      for (int r = 0; r < c.p; ++r) {
        in[r].resize(c.count);
        for (size_t i = 0; i < c.count; ++i) in[r][i] = Input(r, i);
        CollArgs a = Args(r, c.p, c.count, &ring);
        a.root = root;
        a.send = in[r].data();
        a.recv = r == root ? out.data() : nullptr;
        a.stream_outputs = c.shuffled;
        BuildChainReduce(a, &sched[r]);
        ASSERT_TRUE(CheckSchedule(sched[r])) << "p=" << c.p << " rank " << r;
      }
      std::vector<SimRankStats> stats;
      Status st = SimulateSchedules(sched, &stats);
      ASSERT_TRUE(st.ok()) << st.message();
      for (size_t i = 0; i < c.count; ++i) {
        int32_t want = 0;
        for (int r = 0; r < c.p; ++r) want += Input(r, i);
        ASSERT_EQ(out[i], want) << "p=" << c.p << " root " << root << " i " << i;
      }
    }
  }
}

// Hierarchical compositions stream only in their last stage: an earlier
// stage's output is sent on (CheckSchedule fails on a streamed range that
// is read again). Allreduce with both inter-host algorithms, broadcast and
// reduce, H hosts of L ranks, checked against the plain sums.
TEST(ScheduleTest, HierarchicalStreamsOnlyItsLastStage) {
  for (int hosts : {2, 3, 4}) {
    for (int per_host : {1, 2, 3}) {
      const int p = hosts * per_host;
      HostLayout layout;
      layout.hosts = hosts;
      layout.per_host = per_host;
      layout.ranks = IdentityRing(p);
      layout.slot_of = IdentityRing(p);
      const auto ring = IdentityRing(p);
      for (int kind = 0; kind < 4; ++kind) {
        const size_t n = 257;
        const int root = p - 1;
        std::vector<std::vector<int32_t>> in(p, std::vector<int32_t>(n)), out(p);
        for (int r = 0; r < p; ++r) {
          for (size_t i = 0; i < n; ++i) in[r][i] = Input(r, i);
          out[r].assign(n, -7);
        }
        std::vector<SimRankStats> stats;
        ASSERT_TRUE(Simulate(
            p,
            [&](int r, Schedule* s) {
              CollArgs a = Args(r, p, n, &ring);
              a.hosts = &layout;
              a.root = root;
              a.send = in[r].data();
              a.recv = out[r].data();
              a.stream_outputs = true;
              if (kind <= 1) {
                a.inter_host = kind == 0 ? Algorithm::kRing : Algorithm::kRecursiveHalvingDoubling;
                a.rhd_switch_bytes = 0;
                BuildHierarchicalAllReduce(a, s);
              } else if (kind == 2) {
                BuildHierarchicalBroadcast(a, s);
              } else {
                BuildHierarchicalReduce(a, s);
              }
            },
            &stats))
            << "hosts=" << hosts << " per_host=" << per_host << " kind=" << kind;
        for (int r = 0; r < p; ++r) {
          if (kind == 3 && r != root) continue;
          for (size_t i = 0; i < n; ++i) {
            int32_t want = 0;
            for (int o = 0; o < p; ++o) want += Input(o, i);
            if (kind == 2) want = Input(root, i);
            ASSERT_EQ(out[r][i], want) << "hosts=" << hosts << " per_host=" << per_host
                                       << " kind=" << kind << " rank " << r << " i " << i;
          }
        }
      }
    }
  }
}

TEST(ScheduleTest, RingAllGatherAndReduceScatter) {
  for (const Case& c : Cases()) {
    auto ring = c.shuffled ? ShuffledRing(c.p) : IdentityRing(c.p);
    const size_t n = c.count;
    std::vector<std::vector<int32_t>> in(c.p), out(c.p);
    std::vector<Schedule> ag(c.p), rs(c.p);
    std::vector<std::vector<int32_t>> rs_in(c.p), rs_out(c.p);
    for (int r = 0; r < c.p; ++r) {
      in[r].resize(n);
      for (size_t i = 0; i < n; ++i) in[r][i] = Input(r, i);
      out[r].assign(n * c.p, -9);
      CollArgs a = Args(r, c.p, n, &ring);
      a.send = in[r].data();
      a.recv = out[r].data();
      a.stream_outputs = c.shuffled;
      BuildRingAllGather(a, &ag[r]);
      if (c.p <= 17) {
        ASSERT_TRUE(CheckSchedule(ag[r])) << "p=" << c.p << " rank " << r;
      }
      rs_in[r].resize(n * c.p);
      for (size_t i = 0; i < n * c.p; ++i) rs_in[r][i] = Input(r, i);
      rs_out[r].assign(n, -9);
      CollArgs b = Args(r, c.p, n, &ring);
      b.send = rs_in[r].data();
      b.recv = rs_out[r].data();
      b.stream_outputs = c.shuffled;
      BuildRingReduceScatter(b, &rs[r]);
      if (c.p <= 17) {
        ASSERT_TRUE(CheckSchedule(rs[r])) << "p=" << c.p << " rank " << r;
      }
    }
    std::vector<SimRankStats> stats;
    Status st = SimulateSchedules(ag, &stats);
    ASSERT_TRUE(st.ok()) << st.message();
    st = SimulateSchedules(rs, &stats);
    ASSERT_TRUE(st.ok()) << st.message();
    for (int r = 0; r < c.p; ++r) {
      for (int o = 0; o < c.p; ++o)
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[r][o * n + i], Input(o, i));
      for (size_t i = 0; i < n; ++i) {
        int32_t want = 0;
        for (int s = 0; s < c.p; ++s) want += Input(s, r * n + i);
        ASSERT_EQ(rs_out[r][i], want) << "p=" << c.p << " n=" << n << " rank " << r;
      }
    }
  }
}

TEST(ScheduleTest, AlltoAllAndBarrier) {
  for (int p : {1, 2, 3, 5, 8, 13}) {
    for (size_t n : {size_t(0), size_t(1), size_t(7)}) {
      auto ring = IdentityRing(p);
      std::vector<std::vector<int32_t>> in(p), out(p);
      std::vector<Schedule> sched(p), barrier(p);
      for (int r = 0; r < p; ++r) {
        in[r].resize(n * p);
        for (size_t i = 0; i < n * p; ++i) in[r][i] = r * 1000 + static_cast<int32_t>(i);
        out[r].assign(n * p, -1);
        CollArgs a = Args(r, p, n, &ring);
        a.send = in[r].data();
        a.recv = out[r].data();
        a.stream_outputs = (p + n) % 2 == 0;
        BuildPairwiseAlltoAll(a, &sched[r]);
        ASSERT_TRUE(CheckSchedule(sched[r])) << "p=" << p << " rank " << r;
        BuildDisseminationBarrier(a, &barrier[r]);
      }
      std::vector<SimRankStats> stats;
      ASSERT_TRUE(SimulateSchedules(sched, &stats).ok());
      for (int r = 0; r < p; ++r)
        for (int s = 0; s < p; ++s)
          for (size_t i = 0; i < n; ++i)
            ASSERT_EQ(out[r][s * n + i], s * 1000 + static_cast<int32_t>(r * n + i));
      ASSERT_TRUE(SimulateSchedules(barrier, &stats).ok());
      int rounds = 0;
      for (int k = 1; k < p; k *= 2) ++rounds;
      for (int r = 0; r < p; ++r) EXPECT_EQ(stats[r].sends, size_t(rounds));
    }
  }
}

TEST(ScheduleTest, SimulatorDetectsMismatch) {
  auto ring = IdentityRing(2);
  std::vector<int32_t> a(10), b(10);
  std::vector<Schedule> sched(2);
  CollArgs x = Args(0, 2, 10, &ring);
  x.send = x.recv = a.data();
  BuildRingAllReduce(x, &sched[0]);
  CollArgs y = Args(1, 2, 8, &ring);  // disagrees on the count
  y.send = y.recv = b.data();
  BuildRingAllReduce(y, &sched[1]);
  std::vector<SimRankStats> stats;
  EXPECT_FALSE(SimulateSchedules(sched, &stats).ok());
}

// The checker of unit/schedule_checks.h: a schedule that overwrites what it is still sending
// must be caught.
TEST(ScheduleCheckTest, CatchesRaces) {
  std::vector<uint8_t> buf(16);
  Schedule s;
  Op send;
  send.kind = Op::Kind::kSend;
  send.peer = 1;
  send.src = buf.data();
  send.bytes = 16;
  s.Add(send);
  Op recv;
  recv.kind = Op::Kind::kRecv;
  recv.peer = 2;
  recv.dst = buf.data() + 8;
  recv.bytes = 8;
  s.Add(recv);
  EXPECT_FALSE(CheckSchedule(s));
  s.ops[1].deps[0] = 0;
  EXPECT_TRUE(CheckSchedule(s));
  s.ops[1].bytes = 0;
  EXPECT_FALSE(CheckSchedule(s));
}

}  // namespace
}  // namespace baton
