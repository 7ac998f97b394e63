// Gather, scatter and the variable-count collectives in the simulator, for
// rank counts no machine here could launch (up to 257): every rank's
// schedule is checked for races (schedule_checks.h), all are run together,
// and the results are compared with plain loops over the inputs. Message
// counts are checked against the theory (direct: p - 1 at the root;
// binomial: ceil(log2 p) at the root when nothing is chunked, one more
// when a subtree wraps past rank 0).
#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "algorithms/gather_scatter.h"
#include "algorithms/pairwise.h"
#include "algorithms/rhd.h"
#include "algorithms/ring.h"
#include "unit/schedule_checks.h"

namespace baton {
namespace {

constexpr int32_t kUnwritten = -12345;

int32_t Input(int r, size_t i) {
  return static_cast<int32_t>((r * 7 + i * 13) % 11) - 5 + r * 100;
}

std::vector<int> Ring(int p, bool shuffled) {
  std::vector<int> r;
  if (!shuffled) {
    r.resize(p);
    std::iota(r.begin(), r.end(), 0);
    return r;
  }
  for (int i = 0; i < p; i += 2) r.push_back(i);
  for (int i = 1; i < p; i += 2) r.push_back(i);
  return r;
}

CollArgs Args(int r, int p, size_t count, const std::vector<int>* ring, size_t chunk) {
  CollArgs a;
  a.rank = r;
  a.nranks = p;
  a.count = count;
  a.datatype = batonInt32;
  a.op = batonSum;
  a.ring = ring;
  a.chunk_bytes = chunk;
  return a;
}

int CeilLog2(int p) {
  int l = 0;
  while ((1 << l) < p) ++l;
  return l;
}

using RootedFn = void (*)(const CollArgs&, Schedule*);

struct Rooted {
  const char* name;
  RootedFn build;
  bool binomial;
};

// Gather: the root's output holds every rank's block in rank order; the
// other ranks' outputs are not touched (null here); inputs stay as they were.
TEST(GatherTest, MatchesReference) {
  for (Rooted alg :
       {Rooted{"direct", BuildDirectGather, false}, Rooted{"binomial", BuildBinomialGather, true}})
    for (int p : {1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 64, 257})
      for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(100)})
        for (size_t chunk : {size_t(512 << 10), size_t(20)})
          for (int root : {0, p / 2, p - 1})
            for (bool in_place : {false, true}) {
              if (p > 64 && (count > 7 || chunk < 100)) continue;
              const std::string what =
                  std::string(alg.name) + " p=" + std::to_string(p) +
                  " count=" + std::to_string(count) + " chunk=" + std::to_string(chunk) +
                  " root=" + std::to_string(root) + (in_place ? " in place" : "");
              const std::vector<int> ring = Ring(p, false);
              std::vector<std::vector<int32_t>> send(p, std::vector<int32_t>(count));
              std::vector<int32_t> out(count * p + 1, kUnwritten);
              for (int r = 0; r < p; ++r)
                for (size_t i = 0; i < count; ++i) send[r][i] = Input(r, i);
              if (in_place)
                std::copy(send[root].begin(), send[root].end(), out.begin() + root * count);
              std::vector<SimRankStats> stats;
              ASSERT_TRUE(Simulate(
                  p,
                  [&](int r, Schedule* s) {
                    CollArgs a = Args(r, p, count, &ring, chunk);
                    a.root = root;
                    a.send = r == root && in_place ? out.data() + root * count : send[r].data();
                    a.recv = r == root ? out.data() : nullptr;
                    alg.build(a, s);
                  },
                  &stats))
                  << what;
              for (int r = 0; r < p; ++r)
                for (size_t i = 0; i < count; ++i)
                  ASSERT_EQ(out[r * count + i], Input(r, i)) << what << " block " << r;
              ASSERT_EQ(out.back(), kUnwritten) << what;
              if (count > 0 && chunk > count * 4 * p && p > 1) {
                const size_t expected =
                    alg.binomial ? static_cast<size_t>(CeilLog2(p)) : static_cast<size_t>(p - 1);
                // The subtree that wraps past rank 0 comes in two pieces.
                EXPECT_LE(stats[root].recvs, expected + (alg.binomial && root > 0)) << what;
                EXPECT_GE(stats[root].recvs, expected) << what;
              }
            }
}

TEST(ScatterTest, MatchesReference) {
  for (Rooted alg : {Rooted{"direct", BuildDirectScatter, false},
                     Rooted{"binomial", BuildBinomialScatter, true}})
    for (int p : {1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 64, 257})
      for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(100)})
        for (size_t chunk : {size_t(512 << 10), size_t(20)})
          for (int root : {0, p / 2, p - 1})
            for (bool in_place : {false, true}) {
              if (p > 64 && (count > 7 || chunk < 100)) continue;
              const std::string what =
                  std::string(alg.name) + " p=" + std::to_string(p) +
                  " count=" + std::to_string(count) + " chunk=" + std::to_string(chunk) +
                  " root=" + std::to_string(root) + (in_place ? " in place" : "");
              const std::vector<int> ring = Ring(p, false);
              std::vector<int32_t> in(count * p);
              for (int r = 0; r < p; ++r)
                for (size_t i = 0; i < count; ++i) in[r * count + i] = Input(r, i);
              const std::vector<int32_t> before = in;
              std::vector<std::vector<int32_t>> out(p, std::vector<int32_t>(count + 1, kUnwritten));
              std::vector<SimRankStats> stats;
              ASSERT_TRUE(Simulate(
                  p,
                  [&](int r, Schedule* s) {
                    CollArgs a = Args(r, p, count, &ring, chunk);
                    a.root = root;
                    a.send = r == root ? in.data() : nullptr;
                    a.recv = r == root && in_place ? in.data() + root * count : out[r].data();
                    alg.build(a, s);
                  },
                  &stats))
                  << what;
              for (int r = 0; r < p; ++r) {
                const int32_t* got =
                    r == root && in_place ? in.data() + root * count : out[r].data();
                for (size_t i = 0; i < count; ++i)
                  ASSERT_EQ(got[i], Input(r, i)) << what << " rank " << r;
                ASSERT_EQ(out[r][count], kUnwritten) << what;
              }
              ASSERT_EQ(in, before) << what << ": the root's input changed";
              if (count > 0 && chunk > count * 4 * p && p > 1) {
                const size_t expected =
                    alg.binomial ? static_cast<size_t>(CeilLog2(p)) : static_cast<size_t>(p - 1);
                EXPECT_LE(stats[root].sends, expected + (alg.binomial && root > 0)) << what;
                EXPECT_GE(stats[root].sends, expected) << what;
              }
            }
}

// Uneven counts with zeros: rank r's count depends on r and the pattern.
std::vector<size_t> UnevenCounts(int p, int pattern) {
  std::vector<size_t> c(p);
  for (int r = 0; r < p; ++r) {
    switch (pattern) {
      case 0:  // every third rank empty, the others 1..9 elements
        c[r] = r % 3 == 1 ? 0 : (r * 5) % 9 + 1;
        break;
      case 1:  // one rank has everything
        c[r] = r == p / 2 ? 37 : 0;
        break;
      case 2:  // all empty
        c[r] = 0;
        break;
      default:  // large and uneven, to chunk
        c[r] = 50 + (r * 37) % 200;
        break;
    }
  }
  return c;
}

// Displacements: packed, reversed with gaps (the blocks in reverse rank
// order, one element apart).
std::vector<size_t> Displs(const std::vector<size_t>& counts, bool gapped, size_t* extent) {
  const int p = static_cast<int>(counts.size());
  std::vector<size_t> d(p);
  size_t at = 0;
  for (int i = 0; i < p; ++i) {
    const int r = gapped ? p - 1 - i : i;
    d[r] = at;
    at += counts[r] + (gapped ? 1 : 0);
  }
  *extent = at;
  return d;
}

TEST(AllGatherVTest, MatchesReference) {
  for (int alg = 0; alg < 2; ++alg)
    for (int p : {1, 2, 3, 4, 5, 7, 8, 9, 16, 64, 257})
      for (int pattern = 0; pattern < 4; ++pattern)
        for (bool gapped : {false, true})
          for (bool in_place : {false, true})
            for (bool shuffled : {false, true}) {
              if (p > 64 && pattern == 3) continue;
              const std::string what =
                  std::string(alg ? "rhd" : "ring") + " p=" + std::to_string(p) +
                  " pattern=" + std::to_string(pattern) + (gapped ? " gapped" : "") +
                  (in_place ? " in place" : "") + (shuffled ? " shuffled" : "");
              const std::vector<int> ring = Ring(p, shuffled);
              const std::vector<size_t> counts = UnevenCounts(p, pattern);
              size_t extent = 0;
              const std::vector<size_t> displs = Displs(counts, gapped, &extent);
              std::vector<std::vector<int32_t>> send(p), out(p);
              for (int r = 0; r < p; ++r) {
                for (size_t i = 0; i < counts[r]; ++i) send[r].push_back(Input(r, i));
                out[r].assign(extent + 1, kUnwritten);
                if (in_place) std::copy(send[r].begin(), send[r].end(), out[r].begin() + displs[r]);
              }
              std::vector<SimRankStats> stats;
              ASSERT_TRUE(Simulate(
                  p,
                  [&](int r, Schedule* s) {
                    CollArgs a = Args(r, p, counts[r], &ring, 40);
                    a.counts = counts.data();
                    a.displs = displs.data();
                    a.send = in_place ? out[r].data() + displs[r] : send[r].data();
                    a.recv = out[r].data();
                    (alg ? BuildRecursiveDoublingAllGatherV : BuildRingAllGatherV)(a, s);
                  },
                  &stats))
                  << what;
              for (int r = 0; r < p; ++r) {
                std::vector<int32_t> want(extent + 1, kUnwritten);
                for (int q = 0; q < p; ++q)
                  for (size_t i = 0; i < counts[q]; ++i) want[displs[q] + i] = Input(q, i);
                ASSERT_EQ(out[r], want) << what << " rank " << r;
              }
            }
}

TEST(ReduceScatterVTest, MatchesReference) {
  for (int p : {1, 2, 3, 4, 5, 7, 8, 9, 16, 64, 257})
    for (int pattern = 0; pattern < 4; ++pattern)
      for (batonRedOp_t op : {batonSum, batonMax, batonAvg})
        for (bool in_place : {false, true})
          for (bool shuffled : {false, true}) {
            if (p > 64 && pattern == 3) continue;
            const std::string what = "p=" + std::to_string(p) +
                                     " pattern=" + std::to_string(pattern) +
                                     " op=" + std::to_string(op) + (in_place ? " in place" : "") +
                                     (shuffled ? " shuffled" : "");
            const std::vector<int> ring = Ring(p, shuffled);
            const std::vector<size_t> counts = UnevenCounts(p, pattern);
            std::vector<size_t> at(p + 1, 0);
            for (int r = 0; r < p; ++r) at[r + 1] = at[r] + counts[r];
            const size_t total = at[p];
            std::vector<std::vector<int32_t>> in(p), out(p);
            for (int r = 0; r < p; ++r) {
              for (size_t i = 0; i < total; ++i) in[r].push_back(Input(r, i));
              out[r].assign(counts[r] + 1, kUnwritten);
            }
            std::vector<std::vector<int32_t>> before = in;
            std::vector<SimRankStats> stats;
            ASSERT_TRUE(Simulate(
                p,
                [&](int r, Schedule* s) {
                  CollArgs a = Args(r, p, counts[r], &ring, 40);
                  a.op = op;
                  a.counts = counts.data();
                  a.send = in[r].data();
                  a.recv = in_place ? in[r].data() + at[r] : out[r].data();
                  BuildRingReduceScatterV(a, s);
                },
                &stats))
                << what;
            for (int r = 0; r < p; ++r) {
              const int32_t* got = in_place ? in[r].data() + at[r] : out[r].data();
              for (size_t i = 0; i < counts[r]; ++i) {
                const size_t e = at[r] + i;
                int64_t acc = Input(0, e);
                for (int q = 1; q < p; ++q)
                  acc = op == batonMax ? std::max<int64_t>(acc, Input(q, e)) : acc + Input(q, e);
                if (op == batonAvg) acc = static_cast<int32_t>(acc) / p;
                ASSERT_EQ(got[i], static_cast<int32_t>(acc))
                    << what << " rank " << r << " [" << i << "]";
              }
              if (!in_place) {
                ASSERT_EQ(out[r].back(), kUnwritten) << what;
                ASSERT_EQ(in[r], before[r]) << what << ": input changed";
              }
            }
          }
}

TEST(AlltoAllVTest, MatchesReference) {
  for (int p : {1, 2, 3, 5, 8, 9, 16, 64})
    for (int pattern = 0; pattern < 3; ++pattern)
      for (bool gapped : {false, true})
        for (bool in_place : {false, true}) {
          const std::string what = "p=" + std::to_string(p) +
                                   " pattern=" + std::to_string(pattern) +
                                   (gapped ? " gapped" : "") + (in_place ? " in place" : "");
          // Block i -> j: (i + 2j) % 5 elements, or 0 for every pair with pattern 1
          // unless i == 0, all zero with pattern 2.
          auto n = [&](int i, int j) -> size_t {
            if (pattern == 2) return 0;
            if (pattern == 1) return i == 0 ? 3 : 0;
            return (i + 2 * j) % 5;
          };
          std::vector<std::vector<size_t>> sc(p), sd(p), rc(p), rd(p);
          std::vector<std::vector<int32_t>> send(p), out(p);
          std::vector<size_t> send_extent(p), recv_extent(p);
          for (int r = 0; r < p; ++r) {
            for (int j = 0; j < p; ++j) sc[r].push_back(n(r, j));
            for (int i = 0; i < p; ++i) rc[r].push_back(n(i, r));
            sd[r] = Displs(sc[r], gapped, &send_extent[r]);
            rd[r] = Displs(rc[r], gapped, &recv_extent[r]);
            send[r].assign(send_extent[r], kUnwritten);
            for (int j = 0; j < p; ++j)
              for (size_t k = 0; k < sc[r][j]; ++k) send[r][sd[r][j] + k] = Input(r, j * 1000 + k);
            out[r].assign(std::max(recv_extent[r], send_extent[r]) + 1, kUnwritten);
            if (in_place) std::copy(send[r].begin(), send[r].end(), out[r].begin());
          }
          std::vector<SimRankStats> stats;
          ASSERT_TRUE(Simulate(
              p,
              [&](int r, Schedule* s) {
                CollArgs a = Args(r, p, 0, nullptr, 40);
                a.counts = rc[r].data();
                a.displs = rd[r].data();
                a.send_counts = sc[r].data();
                a.send_displs = sd[r].data();
                a.send = in_place ? out[r].data() : send[r].data();
                a.recv = out[r].data();
                a.stream_outputs = r % 2 == 0;
                BuildPairwiseAlltoAllV(a, s);
              },
              &stats))
              << what;
          for (int r = 0; r < p; ++r) {
            for (int i = 0; i < p; ++i)
              for (size_t k = 0; k < rc[r][i]; ++k)
                ASSERT_EQ(out[r][rd[r][i] + k], Input(i, r * 1000 + k))
                    << what << " rank " << r << " from " << i;
            ASSERT_EQ(out[r].back(), kUnwritten) << what;
          }
        }
}

}  // namespace
}  // namespace baton
