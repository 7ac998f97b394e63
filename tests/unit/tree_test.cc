// The tree algorithms, run for many rank counts in one process by the
// simulator and checked against a plain loop over all ranks' inputs, and the
// depth of their schedules (O(log p) steps). The shapes of the trees are
// checked in tree_shape_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "algorithms/tree.h"
#include "base/datatype.h"
#include "common/reference.h"
#include "exec/simulator.h"
#include "kernels/cpu_reduce.h"

namespace baton {
namespace {

enum class Algo { kAllReduce, kBinomialBroadcast, kBinomialReduce, kTreeBroadcast, kTreeReduce };

const char* AlgoName(Algo algo) {
  switch (algo) {
    case Algo::kAllReduce:
      return "DoubleBinaryTreeAllReduce";
    case Algo::kBinomialBroadcast:
      return "BinomialBroadcast";
    case Algo::kBinomialReduce:
      return "BinomialReduce";
    case Algo::kTreeBroadcast:
      return "DoubleBinaryTreeBroadcast";
    case Algo::kTreeReduce:
      return "DoubleBinaryTreeReduce";
  }
  return "?";
}

bool IsBroadcast(Algo algo) {
  return algo == Algo::kBinomialBroadcast || algo == Algo::kTreeBroadcast;
}
bool IsReduce(Algo algo) {
  return algo == Algo::kBinomialReduce || algo == Algo::kTreeReduce;
}

void Build(Algo algo, const CollArgs& a, Schedule* s) {
  switch (algo) {
    case Algo::kAllReduce:
      return BuildDoubleBinaryTreeAllReduce(a, s);
    case Algo::kBinomialBroadcast:
      return BuildBinomialBroadcast(a, s);
    case Algo::kBinomialReduce:
      return BuildBinomialReduce(a, s);
    case Algo::kTreeBroadcast:
      return BuildDoubleBinaryTreeBroadcast(a, s);
    case Algo::kTreeReduce:
      return BuildDoubleBinaryTreeReduce(a, s);
  }
}

constexpr Algo kAllAlgos[] = {Algo::kAllReduce, Algo::kBinomialBroadcast, Algo::kBinomialReduce,
                              Algo::kTreeBroadcast, Algo::kTreeReduce};

int CeilLog2(int n) {
  int k = 0;
  while ((1 << k) < n) ++k;
  return k;
}

// ---- Values -----------------------------------------------------------------

// Input of rank r, element i: small integers, so every reduction order is
// exact in every datatype for the rank counts it is used with (|sum| <= 5p,
// products of +-1 with a 2 for every 11th rank).
double InputValue(int r, size_t i, batonDataType_t dt, batonRedOp_t op) {
  const int k = static_cast<int>((static_cast<size_t>(r) * 7 + i * 13) % 11);
  if (op == batonProd) return k == 0 ? 2 : (IsUnsigned(dt) || k % 2 ? 1 : -1);
  if ((dt == batonFloat8e4m3 || dt == batonFloat8e5m2) && op != batonMax && op != batonMin) {
    // fp8 counts exactly only to 8 (E5M2): every 4th rank contributes a
    // value in [-2, 2], so partial sums stay within [-6, 6] up to p = 9.
    return (static_cast<size_t>(r) + i) % 4 == 0 ? k % 5 - 2 : 0;
  }
  return IsUnsigned(dt) ? k : k - 5;
}

// The expected result of element i: a plain loop over the ranks' inputs.
double ReferenceValue(int p, size_t i, batonDataType_t dt, batonRedOp_t op) {
  double acc = InputValue(0, i, dt, op);
  for (int r = 1; r < p; ++r) acc = CombineReference(op, acc, InputValue(r, i, dt, op));
  if (op != batonAvg) return acc;
  // Sum, then one division: C integer division, or in the accumulation type
  // (float for fp16/bf16, which then rounds once).
  if (!IsFloat(dt)) return static_cast<double>(static_cast<int64_t>(acc) / p);
  if (dt == batonFloat64) return acc / p;
  return static_cast<float>(acc) / static_cast<float>(p);
}

// ---- Running one collective ------------------------------------------------

struct Case {
  Algo algo = Algo::kAllReduce;
  int p = 1;
  size_t count = 0;
  batonDataType_t dt = batonInt32;
  batonRedOp_t op = batonSum;
  int root = 0;
  bool in_place = false;
  size_t chunk_bytes = 256;
};

std::string Describe(const Case& c) {
  return std::string(AlgoName(c.algo)) + " p=" + std::to_string(c.p) +
         " count=" + std::to_string(c.count) + " " + DatatypeName(c.dt) + " " + RedOpName(c.op) +
         " root=" + std::to_string(c.root) + (c.in_place ? " in-place" : " out-of-place") +
         " chunk=" + std::to_string(c.chunk_bytes);
}

struct Outcome {
  std::vector<Schedule> sched;
  std::vector<SimRankStats> stats;
};

// Builds every rank's schedule, simulates them and checks every output
// against the reference: all ranks for allreduce and broadcast (bitwise equal
// to it, hence to each other), the root for reduce. Also checks that no
// message is empty, that dependencies point backwards, and that
// out-of-place calls leave the inputs alone.
void RunAndCheck(const Case& c, Outcome* outcome = nullptr) {
  SCOPED_TRACE(Describe(c));
  const size_t es = DatatypeSize(c.dt), bytes = c.count * es;
  const bool bcast = IsBroadcast(c.algo), reduce = IsReduce(c.algo);
  // A broadcast is the root's data; input of rank r otherwise.
  auto make_input = [&](int r) {
    std::vector<uint8_t> v(bytes);
    for (size_t i = 0; i < c.count; ++i)
      Store(c.dt, v.data(), i, InputValue(bcast ? 3 * r + 1 : r, i, c.dt, c.op));
    return v;
  };
  std::vector<std::vector<uint8_t>> in(c.p), out(c.p);
  std::vector<Schedule> sched(c.p);
  for (int r = 0; r < c.p; ++r) {
    const bool has_input = !bcast || r == c.root;
    const bool has_output = !reduce || r == c.root;
    if (has_input) in[r] = make_input(r);
    if (has_output && !(c.in_place && has_input)) out[r].assign(bytes, 0xa5);
    CollArgs a;
    a.rank = r;
    a.nranks = c.p;
    a.count = c.count;
    a.datatype = c.dt;
    a.op = c.op;
    a.root = c.root;
    a.chunk_bytes = c.chunk_bytes;
    a.send = has_input ? in[r].data() : nullptr;
    a.recv = !has_output ? nullptr : (c.in_place && has_input ? in[r].data() : out[r].data());
    Build(c.algo, a, &sched[r]);
  }
  for (int r = 0; r < c.p; ++r) {
    const auto& ops = sched[r].ops;
    for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
      ASSERT_GT(ops[i].bytes, 0u) << "rank " << r << " op " << i;
      for (int d : ops[i].deps) ASSERT_LT(d, i) << "rank " << r << " op " << i;
    }
  }
  std::vector<SimRankStats> stats;
  Status st = SimulateSchedules(sched, &stats);
  ASSERT_TRUE(st.ok()) << st.message();

  std::vector<uint8_t> want(bytes);
  for (size_t i = 0; i < c.count; ++i) {
    const double v =
        bcast ? InputValue(3 * c.root + 1, i, c.dt, c.op) : ReferenceValue(c.p, i, c.dt, c.op);
    Store(c.dt, want.data(), i, v);
  }
  for (int r = 0; r < c.p; ++r) {
    const bool has_input = !bcast || r == c.root;
    if (!reduce || r == c.root) {
      const auto& got = c.in_place && has_input ? in[r] : out[r];
      if (got != want) {
        size_t i = 0;
        while (memcmp(&got[i * es], &want[i * es], es) == 0) ++i;
        FAIL() << "rank " << r << " differs from the reference at element " << i;
      }
    }
    if (has_input && !(c.in_place && (!reduce || r == c.root))) {
      ASSERT_EQ(in[r], make_input(r)) << "rank " << r << " input modified";
    }
  }
  if (outcome) {
    outcome->sched = std::move(sched);
    outcome->stats = std::move(stats);
  }
}

// The roots worth trying: the first, the last and one in the middle.
std::vector<int> Roots(Algo algo, int p) {
  if (algo == Algo::kAllReduce) return {0};
  std::vector<int> roots = {0, p - 1, p / 2};
  std::sort(roots.begin(), roots.end());
  roots.erase(std::unique(roots.begin(), roots.end()), roots.end());
  return roots;
}

// Longest chain of dependent messages in a set of schedules: an op can
// start once its dependencies, the op before it in its (peer, direction)
// queue and, for a receive, the matching send are done; a send takes one
// step, other ops none. SIZE_MAX if the ops wait on each other in a cycle.
size_t CriticalPath(const std::vector<Schedule>& sched) {
  const int p = static_cast<int>(sched.size());
  std::vector<size_t> base(p + 1, 0);
  for (int r = 0; r < p; ++r) base[r + 1] = base[r] + sched[r].ops.size();
  std::vector<std::vector<size_t>> succ(base[p]);
  std::vector<int> indeg(base[p], 0);
  auto edge = [&](size_t from, size_t to) {
    succ[from].push_back(to);
    ++indeg[to];
  };
  std::map<std::pair<int, int>, std::vector<size_t>> sends, recvs;  // (src, dst) -> ops
  for (int r = 0; r < p; ++r) {
    std::map<std::pair<int, int>, size_t> last;  // (peer, kind) -> previous op
    for (size_t i = 0; i < sched[r].ops.size(); ++i) {
      const Op& op = sched[r].ops[i];
      const size_t id = base[r] + i;
      for (int d : op.deps)
        if (d >= 0) edge(base[r] + d, id);
      auto key = std::make_pair(op.peer, static_cast<int>(op.kind));
      if (auto it = last.find(key); it != last.end()) edge(it->second, id);
      last[key] = id;
      if (op.kind == Op::Kind::kSend) sends[{r, op.peer}].push_back(id);
      if (op.kind == Op::Kind::kRecv) recvs[{op.peer, r}].push_back(id);
    }
  }
  for (auto& [key, s] : sends) {
    const auto& rv = recvs[key];
    for (size_t k = 0; k < std::min(s.size(), rv.size()); ++k) edge(s[k], rv[k]);
  }
  auto is_send = [&](size_t id) {
    const int r =
        static_cast<int>(std::upper_bound(base.begin(), base.end(), id) - base.begin()) - 1;
    return sched[r].ops[id - base[r]].kind == Op::Kind::kSend;
  };
  std::vector<size_t> ready, finish(base[p], 0);
  for (size_t id = 0; id < base[p]; ++id)
    if (indeg[id] == 0) ready.push_back(id);
  size_t done = 0, longest = 0;
  while (!ready.empty()) {
    const size_t id = ready.back();
    ready.pop_back();
    ++done;
    if (is_send(id)) ++finish[id];
    longest = std::max(longest, finish[id]);
    for (size_t next : succ[id]) {
      finish[next] = std::max(finish[next], finish[id]);
      if (--indeg[next] == 0) ready.push_back(next);
    }
  }
  return done == base[p] ? longest : SIZE_MAX;
}

// ---- Results -----------------------------------------------------------------

TEST(TreeTest, AllAlgorithmsMatchReferenceUpTo64Ranks) {
  for (int p = 1; p <= 64; ++p) {
    for (size_t count : {size_t(0), size_t(1), size_t(p - 1), size_t(p + 1), size_t(1009)}) {
      for (Algo algo : kAllAlgos) {
        for (int root : Roots(algo, p)) {
          for (bool in_place : {false, true}) {
            Case c;
            c.algo = algo;
            c.p = p;
            c.count = count;
            c.root = root;
            c.in_place = in_place;
            // Many chunks for the small p, fewer for the larger ones (time).
            c.chunk_bytes = p <= 16 ? 64 : 1024;
            RunAndCheck(c);
            if (HasFatalFailure()) return;
            if (IsBroadcast(algo)) continue;  // the op does not matter
            c.dt = batonFloat32;
            c.op = batonAvg;
            RunAndCheck(c);
            if (HasFatalFailure()) return;
          }
        }
      }
    }
  }
}

TEST(TreeTest, AllAlgorithmsMatchReferenceAtLargeRankCounts) {
  for (int p : {100, 127, 128, 129, 1000, 1024}) {
    for (size_t count : {size_t(1), size_t(7), size_t(p + 1)}) {
      for (Algo algo : kAllAlgos) {
        for (int root : Roots(algo, p)) {
          Case c;
          c.algo = algo;
          c.p = p;
          c.count = count;
          c.root = root;
          c.in_place = root % 2 == 1;
          c.chunk_bytes = p <= 129 ? 128 : 1 << 20;
          RunAndCheck(c);
          if (HasFatalFailure()) return;
          if (IsBroadcast(algo) || count != 7) continue;
          c.dt = batonFloat32;
          c.op = batonAvg;
          RunAndCheck(c);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

TEST(TreeTest, LargeCountsPipelineInChunks) {
  for (int p : {2, 3, 5}) {
    for (Algo algo : kAllAlgos) {
      Case c;
      c.algo = algo;
      c.p = p;
      c.count = (1 << 20) + 3;
      c.root = p - 1;
      c.in_place = p == 3;
      c.chunk_bytes = 512 << 10;  // the default: 4 chunks per half
      RunAndCheck(c);
      if (HasFatalFailure()) return;
    }
  }
}

TEST(TreeTest, EveryDatatypeAndOpBitwiseEqual) {
  for (int p : {1, 2, 3, 5, 8, 9}) {
    for (int dt = 0; dt < batonNumTypes; ++dt) {
      for (int op = 0; op < batonNumOps; ++op) {
        for (Algo algo : kAllAlgos) {
          if (IsBroadcast(algo) && op != batonSum) continue;
          Case c;
          c.algo = algo;
          c.p = p;
          c.count = 37;
          c.dt = static_cast<batonDataType_t>(dt);
          c.op = static_cast<batonRedOp_t>(op);
          c.root = (dt + op) % p;
          c.in_place = (dt + op) % 2 == 1;
          c.chunk_bytes = 24;
          RunAndCheck(c);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

// Inputs whose sum depends on the order of the additions: ranks can only
// agree bit for bit because all of them receive the tree root's bytes.
TEST(TreeTest, AllReduceBitwiseEqualOnEveryRankWhenOrderMatters) {
  for (int p : {2, 3, 7, 16, 33, 64}) {
    for (batonDataType_t dt : {batonFloat32, batonFloat16, batonBfloat16}) {
      for (bool in_place : {false, true}) {
        const size_t n = 301, es = DatatypeSize(dt);
        std::vector<std::vector<uint8_t>> in(p, std::vector<uint8_t>(n * es)), out(p);
        std::vector<Schedule> sched(p);
        for (int r = 0; r < p; ++r) {
          for (size_t i = 0; i < n; ++i)
            Store(dt, in[r].data(), i, 1.0 / (1 + r + 3 * static_cast<double>(i)) + (r % 3) * 1e3);
          out[r].assign(n * es, 0);
          CollArgs a;
          a.rank = r;
          a.nranks = p;
          a.count = n;
          a.datatype = dt;
          a.op = batonSum;
          a.chunk_bytes = 40;
          a.send = in[r].data();
          a.recv = in_place ? in[r].data() : out[r].data();
          BuildDoubleBinaryTreeAllReduce(a, &sched[r]);
        }
        std::vector<SimRankStats> stats;
        ASSERT_TRUE(SimulateSchedules(sched, &stats).ok());
        const auto& result = in_place ? in : out;
        for (int r = 1; r < p; ++r)
          ASSERT_EQ(result[r], result[0]) << "p=" << p << " " << DatatypeName(dt) << " rank " << r;
      }
    }
  }
}

TEST(TreeTest, EmptyAndSingleRank) {
  for (Algo algo : kAllAlgos) {
    for (int p : {1, 2, 7}) {
      std::vector<int32_t> buf(4, 1);
      for (int r = 0; r < p; ++r) {
        CollArgs a;
        a.rank = r;
        a.nranks = p;
        a.count = 0;
        a.send = a.recv = buf.data();
        Schedule s;
        Build(algo, a, &s);
        EXPECT_TRUE(s.ops.empty()) << AlgoName(algo);
      }
    }
    // One rank: a single copy out of place, nothing in place.
    std::vector<int32_t> in = {1, 2, 3}, out(3, 0);
    CollArgs a;
    a.count = 3;
    a.datatype = batonInt32;
    a.send = in.data();
    a.recv = out.data();
    Schedule s;
    Build(algo, a, &s);
    ASSERT_EQ(s.ops.size(), 1u) << AlgoName(algo);
    EXPECT_EQ(s.ops[0].kind, Op::Kind::kCopy);
    s.Clear();
    a.recv = in.data();
    Build(algo, a, &s);
    EXPECT_TRUE(s.ops.empty()) << AlgoName(algo);
  }
}

// ---- Cost ------------------------------------------------------------------

// With one chunk per tree the longest chain of dependent messages is one
// pass over the tree height h <= ceil(log2 p) per phase: allreduce goes up
// and down (2h), broadcast and reduce once (h; the binomial tree's deepest
// relative rank has floor(log2 p) bits set). Both trees of a double tree run
// side by side, but a pair of ranks linked in both trees has one queue per
// direction, whose fixed order can hold a message of one tree behind the
// other's: that costs at most one step per phase (measured: p = 3 for the
// allreduce, p = 2 for the rooted trees). Hence chain <= 2h + 2 and h + 1,
// and with c = 3 the generic bound c * ceil(log2(p + 1)) + c holds with room
// to spare for both the chain and the simulator's rounds per rank (which
// count the op after the last arrival too, so they can be chain + 1).
TEST(TreeTest, DepthIsLogarithmic) {
  for (int p = 2; p <= 1100; p += (p < 64 ? 1 : 61)) {
    const size_t h = CeilLog2(p), bound = 3 * CeilLog2(p + 1) + 3;
    for (Algo algo : kAllAlgos) {
      Case c;
      c.algo = algo;
      c.p = p;
      c.count = 2 * static_cast<size_t>(p) + 1;
      c.root = p / 3;
      c.chunk_bytes = 1 << 30;  // one chunk per tree
      Outcome o;
      RunAndCheck(c, &o);
      if (HasFatalFailure()) return;
      const size_t chain = CriticalPath(o.sched);
      const size_t passes = algo == Algo::kAllReduce ? 2 : 1;
      EXPECT_LE(chain, passes * (h + 1)) << Describe(c);
      EXPECT_GE(chain, passes * (CeilLog2(p + 1) - 1)) << Describe(c);  // floor(log2 p)
      EXPECT_LE(chain, bound) << Describe(c);
      for (const SimRankStats& s : o.stats) EXPECT_LE(s.rounds, bound) << Describe(c);
      // Bandwidth: in a double tree each rank is an inner node (two
      // children) in at most one tree, so per half it sends at most: up 1 +
      // down 2 there, up 1 as a leaf in the other: 4 halves = 2n bytes for
      // allreduce, and 2 halves = n bytes for one pass (the root: 1 + 1).
      if (algo == Algo::kAllReduce || algo == Algo::kTreeBroadcast || algo == Algo::kTreeReduce) {
        const size_t half = (c.count + 1) / 2 * sizeof(int32_t);
        for (const SimRankStats& s : o.stats)
          EXPECT_LE(s.bytes_sent, 2 * passes * half) << Describe(c);
      }
    }
  }
}

// Many chunks: chunks flow through the tree levels one behind the other, so
// the chain grows by about one step per chunk, not by the depth per chunk.
TEST(TreeTest, ChunksPipeline) {
  for (int p : {2, 3, 8, 13, 64, 100}) {
    for (Algo algo : kAllAlgos) {
      const size_t chunks = 64;
      Case c;
      c.algo = algo;
      c.p = p;
      c.count = 2 * chunks * 4;
      c.chunk_bytes = 16;  // 4 int32 per chunk: `chunks` chunks per tree
      c.root = p - 1;
      Outcome o;
      RunAndCheck(c, &o);
      if (HasFatalFailure()) return;
      // The busiest queue carries 2 * chunks messages: the binomial tree's
      // (one tree, all the data) or, in the double tree, those of a pair of
      // ranks linked in both trees. Without pipelining (or with the down
      // steps of the allreduce keyed like the up steps, which stalls each up
      // chunk behind the previous one's round trip) this would be several
      // times larger.
      EXPECT_LE(CriticalPath(o.sched), 2 * chunks + 8 * CeilLog2(p + 1)) << Describe(c);
    }
  }
}

}  // namespace
}  // namespace baton
