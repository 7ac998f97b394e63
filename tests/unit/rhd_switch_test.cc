// The rhd allreduce's two variants and the switch between them: the cost
// model puts the switch at the crossover of its own formulas for recursive
// doubling and Rabenseifner (checked here against the closed form from alpha,
// beta and gamma), the selection table carries it to the call's arguments
// (ApplyChoice, the path launch/call.cc takes), and the builder follows
// CollArgs::rhd_switch_bytes, giving correct results with either variant
// forced at sizes around any switch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "algorithms/rhd.h"
#include "base/datatype.h"
#include "exec/simulator.h"
#include "topology/comm_topology.h"
#include "tuning/cost_model.h"
#include "tuning/select.h"
#include "unit/schedule_checks.h"

namespace baton {
namespace {

int Log2Floor(int p) {
  int l = 0;
  while ((2 << l) <= p) ++l;
  return l;
}

// `hosts` x `per_host` ranks; `machine` != 0 puts every host on that one
// machine (simulated hosts sharing its cores).
CommTopology Layout(int hosts, int per_host, uint64_t machine = 0) {
  std::vector<RankPlace> places(hosts * per_host);
  for (int r = 0; r < hosts * per_host; ++r)
    places[r] = {static_cast<uint64_t>(r / per_host + 1), 0, 0, 1, 1, false, 2, 10000, machine};
  return CommTopology(places);
}

// The crossover of the two variants over p = 2^L ranks whose every step
// costs alpha + bytes (beta + gamma): recursive doubling L (alpha + n (beta +
// gamma)), Rabenseifner 2 L alpha + n (1 - 1/p) (2 beta + gamma).
double ClosedFormCrossover(int p, double alpha, double beta, double gamma) {
  const int l = Log2Floor(p);
  return l * alpha / (l * (beta + gamma) - (1.0 - 1.0 / p) * (2 * beta + gamma));
}

// Rank r's arguments of an int32 sum over n elements on p ranks.
CollArgs SumArgs(int r, int p, size_t n, const int32_t* send, int32_t* recv) {
  CollArgs a;
  a.rank = r;
  a.nranks = p;
  a.count = n;
  a.datatype = batonInt32;
  a.op = batonSum;
  a.send = send;
  a.recv = recv;
  return a;
}

// Sends of rank p - 1 (never folded out) in the rhd allreduce of `count`
// int32 with these arguments: L for recursive doubling, 2L for Rabenseifner.
size_t Sends(int p, size_t count, const CollArgs& with) {
  std::vector<int32_t> buf(count);
  CollArgs a = with;
  a.rank = p - 1;
  a.nranks = p;
  a.count = count;
  a.datatype = batonInt32;
  a.send = a.recv = buf.data();
  a.chunk_bytes = size_t{1} << 40;  // one message per step (Rabenseifner's pivot is chunked)
  Schedule s;
  BuildRhdAllReduce(a, &s);
  size_t n = 0;
  for (const Op& op : s.ops) n += op.kind == Op::Kind::kSend;
  return n;
}

struct Setting {
  const char* name;
  int hosts, per_host;
  uint64_t machine;
  CostParams params;
  double alpha, beta, gamma;  // what one rhd step costs in this setting
  // gamma for a vector of n bytes: kHotReduceShare of it up to
  // params.hot_reduce_bytes, unless ranks share cores (the simulated hosts).
  double GammaAt(size_t n) const {
    return machine == 0 && n <= params.hot_reduce_bytes ? gamma * CostModel::kHotReduceShare
                                                        : gamma;
  }
};

// The crossover with a gamma that grows past hot_reduce_bytes: the hot
// one's if it lies below that, else the larger gamma's, but not below it.
double Crossover(const Setting& s, int p) {
  const double hot = ClosedFormCrossover(p, s.alpha, s.beta, s.GammaAt(0));
  const size_t hot_bytes = s.params.hot_reduce_bytes;
  if (hot <= static_cast<double>(hot_bytes)) return hot;
  return std::max(ClosedFormCrossover(p, s.alpha, s.beta, s.gamma),
                  static_cast<double>(hot_bytes + 1));
}

// Shared memory (one host, plenty of cores) with the default figures and
// with steps of 5 us, TCP between real hosts, and TCP between simulated
// hosts on one 2-core machine (gamma scaled by ranks per core, a context
// switch per message; the network's latency is not the cores').
std::vector<Setting> Settings() {
  const CostParams d = DefaultCostParams(10000);
  CostParams slow = d;
  slow.link[static_cast<int>(LinkClass::kSameNuma)].alpha_us = 5;
  const LinkCost shm = d.link[static_cast<int>(LinkClass::kSameNuma)];
  const LinkCost net = d.link[static_cast<int>(LinkClass::kNetwork)];
  // Level-2 caches of 256 KiB (the 2-socket machine of tests/data): what
  // stays hot ends at 64 KiB, below the 2-rank hot crossover.
  CostParams small_l2 = d;
  small_l2.hot_reduce_bytes = HotReduceBytes(256 << 10);
  const double g = d.reduce_us_per_byte[batonFloat32];
  std::vector<Setting> out;
  for (int p : {2, 4, 8, 16}) {
    out.push_back({"shm", 1, p, 0, d, shm.alpha_us, shm.us_per_byte, g});
    out.push_back({"shm, 256 KiB L2", 1, p, 0, small_l2, shm.alpha_us, shm.us_per_byte, g});
    out.push_back({"shm, 5 us steps", 1, p, 0, slow, 5, shm.us_per_byte, g});
    out.push_back({"tcp", p, 1, 0, d, net.alpha_us, net.us_per_byte, g});
    if (p >= 4) {
      const double f = p / 2.0;  // ranks per core
      out.push_back(
          {"simulated hosts", p, 1, 7, d, net.alpha_us + d.switch_us, net.us_per_byte, g * f});
    }
  }
  return out;
}

// The switch is the crossover, but never below the old fixed 16 KiB (the
// shared-memory figures put it at 2-14 KiB, where recursive doubling
// measured no slower).
TEST(RhdSwitchTest, ModelPutsTheSwitchAtTheCrossover) {
  for (const Setting& s : Settings()) {
    const CommTopology topo = Layout(s.hosts, s.per_host, s.machine);
    const int p = topo.nranks();
    const std::vector<int> cores(topo.hosts(), s.machine != 0 ? 2 : 64);
    const CostModel model(topo, topo.RingOrder(), cores, s.params);
    const double cross = Crossover(s, p);
    const double want = std::max(cross, static_cast<double>(kRhdSmallMessageBytes));
    const size_t got = model.RhdSwitchBytes(batonFloat32);
    EXPECT_NEAR(static_cast<double>(got), want, want * 1e-6 + 1) << s.name << " p=" << p;
    // The model's prediction is the variant the switch picks, the cheaper
    // one on either side of the crossover.
    for (double scale : {0.5, 2.0}) {
      const auto n = static_cast<size_t>(want * scale) / 4 * 4;
      const Prediction pred = model.Predict(Collective::kAllReduce,
                                            Algorithm::kRecursiveHalvingDoubling, n, batonFloat32);
      EXPECT_EQ(pred.rhd_switch_bytes, got);
      const int l = Log2Floor(p);
      const double g = s.GammaAt(n);
      const double rd = l * (s.alpha + n * (s.beta + g));
      const double rab = 2 * l * s.alpha + n * (1.0 - 1.0 / p) * (2 * s.beta + g);
      EXPECT_NEAR(pred.us, n < got ? rd : rab, 1e-6 * rd) << s.name << " p=" << p << " n=" << n;
      if (cross > kRhdSmallMessageBytes) {
        EXPECT_NEAR(pred.us, std::min(rd, rab), 1e-6 * rd) << s.name << " p=" << p;
      }
    }
  }
}

// Where the default figures put it: shared memory at the 16 KiB floor, TCP
// between real hosts tens of KiB; simulated hosts sharing 2 cores at
// 10 Gbit/s where docs/performance.md measured the crossover ("The rhd
// switch from the cost model": 64-128 KiB on 4 hosts, 32-64 KiB on 8).
TEST(RhdSwitchTest, CrossoverFollowsAlphaOverBeta) {
  auto at = [](int hosts, int per_host, uint64_t machine, int cores) {
    const CommTopology topo = Layout(hosts, per_host, machine);
    const CostModel model(topo, topo.RingOrder(), std::vector<int>(topo.hosts(), cores),
                          DefaultCostParams(10000));
    return model.RhdSwitchBytes(batonFloat32);
  };
  for (int p : {4, 8, 16}) {
    EXPECT_EQ(at(1, p, 0, 64), kRhdSmallMessageBytes) << p;  // the floor
    EXPECT_EQ(at(1, p, 0, 2), kRhdSmallMessageBytes) << p;
  }
  for (int p : {2, 4, 8, 16}) EXPECT_GT(at(p, 1, 0, 64), 32u << 10) << p;
  // Two ranks: recursive doubling moves no more bytes than Rabenseifner, only
  // reduces twice as many, which in cache costs little: it wins up to 2
  // alpha / (kHotReduceShare gamma), about 117 KiB (docs/tuning.md,
  // "Reductions in cache").
  const CostParams defaults = DefaultCostParams(10000);
  const double two = 2 * defaults.link[static_cast<int>(LinkClass::kSameNuma)].alpha_us /
                     (defaults.reduce_us_per_byte[batonFloat32] * CostModel::kHotReduceShare);
  EXPECT_NEAR(static_cast<double>(at(1, 2, 0, 64)), two, 2);
  EXPECT_NEAR(static_cast<double>(at(1, 2, 0, 2)), two, 2);
  EXPECT_GT(at(4, 1, 7, 2), 64u << 10);
  EXPECT_LT(at(4, 1, 7, 2), 128u << 10);
  EXPECT_GT(at(8, 1, 7, 2), 32u << 10);
  EXPECT_LT(at(8, 1, 7, 2), 64u << 10);
  // A fold adds the same to both variants: 6 ranks switch where 4 do.
  const CommTopology six = Layout(6, 1), four = Layout(4, 1);
  const CostParams d = DefaultCostParams(10000);
  EXPECT_EQ(
      CostModel(six, six.RingOrder(), std::vector<int>(6, 64), d).RhdSwitchBytes(batonInt32),
      CostModel(four, four.RingOrder(), std::vector<int>(4, 64), d).RhdSwitchBytes(batonInt32));
  // A fixed switch (BATON_RHD_SWITCH) replaces the model's, flat and among
  // the hosts.
  CostParams fixed = d;
  fixed.rhd_switch_bytes = 12345;
  const CostModel forced(four, four.RingOrder(), std::vector<int>(4, 64), fixed);
  EXPECT_EQ(forced.RhdSwitchBytes(batonFloat32), 12345u);
  EXPECT_EQ(forced.RhdSwitchBytes(batonBfloat16, true), 12345u);
}

// BATON_ALGO=rhd leaves the variant to the model: the table's choice carries
// the switch to the call's arguments, and the builder follows it.
TEST(RhdSwitchTest, TableCarriesTheSwitchToTheBuilder) {
  AlgorithmFilter rhd;
  ASSERT_TRUE(AlgorithmFilter::Parse("rhd", &rhd).ok());
  for (const Setting& s : Settings()) {
    const CommTopology topo = Layout(s.hosts, s.per_host, s.machine);
    const int p = topo.nranks();
    const CostModel model(topo, topo.RingOrder(),
                          std::vector<int>(topo.hosts(), s.machine != 0 ? 2 : 64), s.params);
    SelectionTable table;
    table.Build(model, rhd, 0);
    const size_t cross = model.RhdSwitchBytes(batonInt32);
    const int l = Log2Floor(p);
    for (size_t bytes : {cross / 3, cross - 4, cross + 4, cross * 3}) {
      const size_t count = bytes / 4;
      const Choice& choice = table.Lookup(Collective::kAllReduce, batonInt32, count * 4);
      ASSERT_EQ(choice.algorithm, Algorithm::kRecursiveHalvingDoubling);
      EXPECT_EQ(choice.rhd_switch_bytes, cross);
      CollArgs args;
      ApplyChoice(choice, &args);
      const bool doubling = count * 4 < cross;
      EXPECT_EQ(Sends(p, count, args), static_cast<size_t>(doubling ? l : 2 * l))
          << s.name << " p=" << p << " bytes=" << count * 4;
    }
  }
}

// Hier's allreduce among the hosts has its own switch, from the steps among
// the hosts: 4 hosts of 2 ranks, both ranks of a host crossing the network
// at once (each stream half the NIC).
TEST(RhdSwitchTest, HierarchicalStageHasItsOwnSwitch) {
  const CommTopology topo = Layout(4, 2);
  const CostParams d = DefaultCostParams(10000);
  const CostModel model(topo, topo.RingOrder(), std::vector<int>(4, 64), d);
  const LinkCost net = d.link[static_cast<int>(LinkClass::kNetwork)];
  const Setting among_hosts{
      "hier", 4, 2, 0, d, net.alpha_us, 2 * net.us_per_byte, d.reduce_us_per_byte[batonFloat32]};
  const double want =
      std::max(static_cast<double>(kRhdSmallMessageBytes), Crossover(among_hosts, 4));
  const size_t inter = model.RhdSwitchBytes(batonFloat32, true);
  EXPECT_NEAR(static_cast<double>(inter), want, want * 1e-6 + 1);
  const Prediction hier =
      model.Predict(Collective::kAllReduce, Algorithm::kHierarchical, 1 << 20, batonFloat32);
  EXPECT_EQ(hier.rhd_switch_bytes, inter);
  AlgorithmFilter only_hier;
  ASSERT_TRUE(AlgorithmFilter::Parse("hier", &only_hier).ok());
  SelectionTable table;
  table.Build(model, only_hier, 0);
  CollArgs args;
  ApplyChoice(table.Lookup(Collective::kAllReduce, batonFloat32, 1 << 20), &args);
  EXPECT_EQ(args.rhd_switch_bytes, inter);
}

TEST(RhdSwitchTest, BuilderFollowsTheSwitch) {
  CollArgs a;
  EXPECT_EQ(a.rhd_switch_bytes, kRhdSmallMessageBytes);  // what callers get unless they set it
  EXPECT_EQ(Sends(8, kRhdSmallMessageBytes / 4 - 1, a), 3u);
  EXPECT_EQ(Sends(8, kRhdSmallMessageBytes / 4, a), 6u);
  a.rhd_switch_bytes = 0;  // Rabenseifner always...
  EXPECT_EQ(Sends(8, 8, a), 6u);
  EXPECT_EQ(Sends(8, 7, a), 3u);  // ...but for fewer elements than ranks
  a.rhd_switch_bytes = SIZE_MAX;
  EXPECT_EQ(Sends(8, 1 << 20, a), 3u);
  a.rhd_switch_bytes = 1000;
  EXPECT_EQ(Sends(16, 249, a), 4u);
  EXPECT_EQ(Sends(16, 250, a), 8u);
}

// Either variant, forced on either side of the switches the model and the
// default use, gives the reference result on 1..9 and 16 ranks.
TEST(RhdSwitchTest, ForcedVariantsAroundTheSwitchAreCorrect) {
  const CommTopology topo = Layout(4, 1);
  const size_t tcp_switch =
      CostModel(topo, topo.RingOrder(), std::vector<int>(4, 64), DefaultCostParams(10000))
          .RhdSwitchBytes(batonInt32);
  std::vector<int> ranks = {1, 2, 3, 4, 5, 6, 7, 8, 9, 16};
  for (int p : ranks) {
    for (size_t n :
         {size_t(p - 1), size_t(p), kRhdSmallMessageBytes / 4 - 1, kRhdSmallMessageBytes / 4,
          kRhdSmallMessageBytes / 4 + 3, tcp_switch / 4 - 1, tcp_switch / 4 + 1, size_t(24001)}) {
      std::vector<int32_t> want(n, 0);
      auto input = [](int r, size_t i) {
        return static_cast<int32_t>((static_cast<size_t>(r) * 7 + i * 13) % 11) - 5;
      };
      for (int r = 0; r < p; ++r)
        for (size_t i = 0; i < n; ++i) want[i] += input(r, i);
      for (size_t sw : {size_t(0), SIZE_MAX, kRhdSmallMessageBytes, tcp_switch}) {
        std::vector<std::vector<int32_t>> in(p, std::vector<int32_t>(n)), out(p);
        for (int r = 0; r < p; ++r) {
          for (size_t i = 0; i < n; ++i) in[r][i] = input(r, i);
          out[r].assign(n, 12345);
        }
        std::vector<SimRankStats> stats;
        ASSERT_TRUE(Simulate(
            p,
            [&](int r, Schedule* s) {
              // In place on odd ranks.
              CollArgs a = SumArgs(r, p, n, in[r].data(), r % 2 ? in[r].data() : out[r].data());
              a.rhd_switch_bytes = sw;
              BuildRhdAllReduce(a, s);
            },
            &stats))
            << "p=" << p << " n=" << n << " switch=" << sw;
        for (int r = 0; r < p; ++r)
          ASSERT_EQ(r % 2 ? in[r] : out[r], want)
              << "p=" << p << " n=" << n << " switch=" << sw << " rank " << r;
      }
    }
  }
}

// Rabenseifner's pivot in a call whose outputs stream: in place a rank
// reduces into its buffer with cached stores and sends from there (no
// stage), out of place it streams the output and sends from a stage; the
// messages are the same either way, so ranks that differ in that still
// meet, and every rank gets the reference result (1..9 ranks, folds
// included, in place on every rank, on none, or on alternate ones).
TEST(RhdSwitchTest, PivotInPlaceChangesOnlyThisRanksStores) {
  auto messages = [](const Schedule& s) {
    std::vector<std::pair<int, uint64_t>> m;  // (+peer+1 send / -peer-1 receive, bytes)
    for (const Op& op : s.ops)
      if (op.kind != Op::Kind::kCopy)
        m.emplace_back(op.kind == Op::Kind::kSend ? op.peer + 1 : -op.peer - 1, op.bytes);
    return m;
  };
  for (int p = 1; p <= 9; ++p) {
    for (size_t n : {size_t(1), size_t(p), size_t(37), size_t(1000), size_t(4099)}) {
      std::vector<int32_t> want(n, 0);
      auto input = [](int r, size_t i) {
        return static_cast<int32_t>((static_cast<size_t>(r) * 5 + i * 3) % 13) - 6;
      };
      for (int r = 0; r < p; ++r)
        for (size_t i = 0; i < n; ++i) want[i] += input(r, i);
      for (int pattern = 0; pattern < 3; ++pattern) {  // none, alternate, every rank in place
        auto in_place = [&](int r) { return pattern == 2 || (pattern == 1 && r % 2 == 1); };
        std::vector<std::vector<int32_t>> in(p, std::vector<int32_t>(n)), out(p);
        for (int r = 0; r < p; ++r) {
          for (size_t i = 0; i < n; ++i) in[r][i] = input(r, i);
          out[r].assign(n, 12345);
        }
        auto args = [&](int r, bool ip) {
          CollArgs a = SumArgs(r, p, n, in[r].data(), ip ? in[r].data() : out[r].data());
          a.rhd_switch_bytes = 0;  // Rabenseifner
          a.chunk_bytes = 64;
          a.stream_outputs = true;
          return a;
        };
        std::vector<SimRankStats> stats;
        ASSERT_TRUE(Simulate(
            p, [&](int r, Schedule* s) { BuildRhdAllReduce(args(r, in_place(r)), s); }, &stats))
            << "p=" << p << " n=" << n << " pattern=" << pattern;
        for (int r = 0; r < p; ++r)
          ASSERT_EQ(in_place(r) ? in[r] : out[r], want)
              << "p=" << p << " n=" << n << " pattern=" << pattern << " rank " << r;
        if (pattern != 1) continue;
        for (int r = 0; r < p; ++r) {
          Schedule oop, ip;
          BuildRhdAllReduce(args(r, false), &oop);
          BuildRhdAllReduce(args(r, true), &ip);
          EXPECT_EQ(messages(ip), messages(oop)) << "p=" << p << " n=" << n << " rank " << r;
          if (p != 2 || n < 64) continue;  // (only two ranks' pivot is final)
          for (const Op& op : ip.ops)
            EXPECT_TRUE(op.copy_to == nullptr && !(op.reduce_with != nullptr && op.stream_dst));
          size_t staged = 0;
          for (const Op& op : oop.ops) staged += op.copy_to != nullptr && op.stream_dst;
          EXPECT_GT(staged, 1u) << "n=" << n;
        }
      }
    }
  }
}

}  // namespace
}  // namespace baton
