// The recursive halving / doubling schedules, run for many rank counts in one
// process by the simulator. Results are checked against plain loops over all
// ranks' inputs (never against the library's own reduction kernels), for
// bitwise equality across ranks, and message counts against the theory.
// Every schedule is also checked statically: no zero-byte messages, deps
// point backwards, and no two ops that may run at once touch the same bytes
// while one of them writes (the simulator alone would not catch that: it
// copies a message the moment it is sent: unit/schedule_checks.h).
#include "algorithms/rhd.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include "base/datatype.h"
#include "common/reference.h"
#include "exec/simulator.h"
#include "kernels/cpu_reduce.h"
#include "unit/schedule_checks.h"

namespace baton {
namespace {

using Builder = void (*)(const CollArgs&, Schedule*);

struct Algo {
  const char* name;
  Builder build;
};

const Algo kAllReduceAlgos[] = {
    {"rhd", BuildRhdAllReduce},
    {"rabenseifner", BuildRabenseifnerAllReduce},
    {"recursive_doubling", BuildRecursiveDoublingAllReduce},
};

int Log2Floor(int p) {
  int l = 0;
  while ((2 << l) <= p) ++l;
  return l;
}

// 1..64 and the larger counts around powers of two.
std::vector<int> RankCounts() {
  std::vector<int> ps;
  for (int p = 1; p <= 64; ++p) ps.push_back(p);
  for (int p : {100, 127, 128, 129, 1000, 1024}) ps.push_back(p);
  return ps;
}

// Counts for an allreduce over p ranks: empty, fewer than p (empty blocks),
// more than p, and a prime (uneven blocks). Large p gets no prime, to keep
// the test fast.
std::vector<size_t> Counts(int p) {
  std::vector<size_t> counts = {0, 1, size_t(p - 1), size_t(p + 1)};
  if (p <= 129) counts.push_back(1009);
  return counts;
}

// Per-rank counts for reduce-scatter and allgather, whose buffers hold p
// blocks: the same grid, but small counts only for large p.
std::vector<size_t> BlockCounts(int p) {
  if (p >= 1000) return {0, 1, 2};
  std::vector<size_t> counts = {0, 1, size_t(p - 1), size_t(p + 1)};
  if (p <= 64) counts.push_back(1009);
  return counts;
}

// Input of rank r: small integers, so every reduction order is exact.
int32_t Input(int r, size_t i) {
  return static_cast<int32_t>((static_cast<size_t>(r) * 7 + i * 13) % 11) - 5;
}

CollArgs Args(int r, int p, size_t count, batonDataType_t dt, batonRedOp_t op) {
  CollArgs a;
  a.rank = r;
  a.nranks = p;
  a.count = count;
  a.datatype = dt;
  a.op = op;
  return a;
}

// --- Allreduce --------------------------------------------------------------

TEST(RhdAllReduceTest, Int32SumMatchesReference) {
  for (const Algo& algo : kAllReduceAlgos) {
    for (int p : RankCounts()) {
      for (size_t n : Counts(p)) {
        std::vector<int32_t> want(n, 0);
        for (int r = 0; r < p; ++r)
          for (size_t i = 0; i < n; ++i) want[i] += Input(r, i);
        // In place or not; with Rabenseifner's pivot in one piece, or in
        // chunks of 16 elements with the final copies streamed; with sends
        // the transport holds (a receive may then wait for its own send).
        for (int variant = 0; variant < 8; ++variant) {
          const bool in_place = variant & 1, chunked = variant & 2, buffered = variant & 4;
          std::vector<std::vector<int32_t>> in(p, std::vector<int32_t>(n)), out(p);
          for (int r = 0; r < p; ++r) {
            for (size_t i = 0; i < n; ++i) in[r][i] = Input(r, i);
            out[r].assign(n, 12345);
          }
          std::vector<SimRankStats> stats;
          ASSERT_TRUE(Simulate(
              p,
              [&](int r, Schedule* s) {
                CollArgs a = Args(r, p, n, batonInt32, batonSum);
                a.send = in[r].data();
                a.recv = in_place ? in[r].data() : out[r].data();
                if (chunked) {
                  a.chunk_bytes = 64;
                  a.stream_outputs = true;
                }
                if (buffered) a.sends_buffered_bytes = SIZE_MAX;
                algo.build(a, s);
              },
              &stats))
              << algo.name << " p=" << p << " n=" << n << " in_place=" << in_place
              << " chunked=" << chunked << " buffered=" << buffered;
          for (int r = 0; r < p; ++r) {
            ASSERT_EQ(in_place ? in[r] : out[r], want) << algo.name << " p=" << p << " n=" << n
                                                       << " in_place=" << in_place << " rank " << r;
            if (in_place) continue;
            for (size_t i = 0; i < n; ++i)
              ASSERT_EQ(in[r][i], Input(r, i)) << algo.name << ": send buffer modified";
          }
        }
      }
    }
  }
}

// Two ranks in place: one exchange, reduced straight into the buffer once
// the transport holds the send, else through scratch and a copy back.
TEST(RhdAllReduceTest, InPlaceExchangeSkipsTheCopyWhereSendsAreHeld) {
  for (const size_t held : {size_t{0}, size_t{4000}, size_t{4096}}) {
    std::vector<int32_t> buf(1024);
    CollArgs a = Args(0, 2, buf.size(), batonInt32, batonSum);
    a.send = a.recv = buf.data();
    a.sends_buffered_bytes = held;
    Schedule s;
    BuildRecursiveDoublingAllReduce(a, &s);
    size_t copies = 0;
    for (const Op& op : s.ops) copies += op.kind == Op::Kind::kCopy;
    EXPECT_EQ(copies, held >= 4096 ? 0u : 1u) << "held " << held;
  }
}

TEST(RhdAllReduceTest, FloatAvgDividesOnceAndIsBitwiseIdentical) {
  for (const Algo& algo : kAllReduceAlgos) {
    for (int p : RankCounts()) {
      for (size_t n : Counts(p)) {
        if (n == 0) continue;
        for (bool in_place : {false, true}) {
          std::vector<std::vector<float>> in(p, std::vector<float>(n)), out(p);
          for (int r = 0; r < p; ++r) {
            // Halves keep every partial sum exact, whatever the order.
            for (size_t i = 0; i < n; ++i) in[r][i] = Input(r, i) * 0.5f;
            out[r].assign(n, -1.0f);
          }
          std::vector<float> want(n);
          for (size_t i = 0; i < n; ++i) {
            float sum = 0;
            for (int r = 0; r < p; ++r) sum += in[r][i];
            want[i] = sum / static_cast<float>(p);
          }
          std::vector<SimRankStats> stats;
          ASSERT_TRUE(Simulate(
              p,
              [&](int r, Schedule* s) {
                CollArgs a = Args(r, p, n, batonFloat32, batonAvg);
                a.send = in[r].data();
                a.recv = in_place ? in[r].data() : out[r].data();
                algo.build(a, s);
              },
              &stats))
              << algo.name << " p=" << p << " n=" << n;
          const auto& res = in_place ? in : out;
          for (int r = 0; r < p; ++r) {
            ASSERT_EQ(memcmp(res[r].data(), res[0].data(), n * sizeof(float)), 0)
                << algo.name << " p=" << p << " n=" << n << ": rank " << r << " differs";
            for (size_t i = 0; i < n; ++i)
              ASSERT_EQ(res[r][i], want[i])
                  << algo.name << " p=" << p << " n=" << n << " rank " << r << " i " << i;
          }
        }
      }
    }
  }
}

TEST(RhdAllReduceTest, LargeCounts) {
  const size_t n = (size_t{1} << 20) + 3;
  for (int p : {2, 3, 4}) {
    std::vector<int32_t> want(n, 0);
    for (int r = 0; r < p; ++r)
      for (size_t i = 0; i < n; ++i) want[i] += Input(r, i);
    for (const Algo& algo : kAllReduceAlgos) {
      for (bool in_place : {false, true}) {
        std::vector<std::vector<int32_t>> in(p, std::vector<int32_t>(n)), out(p);
        for (int r = 0; r < p; ++r) {
          for (size_t i = 0; i < n; ++i) in[r][i] = Input(r, i);
          if (!in_place) out[r].assign(n, 7);
        }
        std::vector<SimRankStats> stats;
        ASSERT_TRUE(Simulate(
            p,
            [&](int r, Schedule* s) {
              CollArgs a = Args(r, p, n, batonInt32, batonSum);
              a.send = in[r].data();
              a.recv = in_place ? in[r].data() : out[r].data();
              algo.build(a, s);
            },
            &stats));
        for (int r = 0; r < p; ++r)
          ASSERT_TRUE((in_place ? in[r] : out[r]) == want)
              << algo.name << " p=" << p << " in_place=" << in_place << " rank " << r;
      }
    }
  }
}

// --- Every datatype and op -----------------------------------------------

// Input of rank r, element i, for a test of (dt, op) over p ranks: small
// enough that no result overflows any type. Products use +-1 with one 2 per
// element; floats under max/min get mixed +0 and -0, whose order decides the
// sign of the result; fp16/bf16 under avg get inputs whose sum divides by p,
// so the average is exact without modelling their rounding.
double Value(batonDataType_t dt, batonRedOp_t op, int p, int r, size_t i) {
  const bool is_signed = !IsUnsigned(dt), is_float = IsFloat(dt);
  if (op == batonProd) {
    double v = static_cast<size_t>(r) == i % p ? 2 : 1;
    return is_signed && (r + i) % 3 == 0 ? -v : v;
  }
  if ((op == batonMax || op == batonMin) && is_float && i % 3 == 0) return (r + i) % 2 ? -0.0 : 0.0;
  const bool fp8 = dt == batonFloat8e4m3 || dt == batonFloat8e5m2;
  if (fp8 && (op == batonSum || op == batonAvg)) {
    // Few significant bits: two ranks contribute to each element (see
    // ExactInput in common/reference.h); avg then rounds once, as modelled
    // by Reference and the reference's Store.
    const bool contributes =
        static_cast<size_t>(r) == i % p || static_cast<size_t>(r) == (i + 3) % p;
    return contributes ? static_cast<double>((r * 7 + i * 13) % 5) - 2 : 0.0;
  }
  if (op == batonAvg && (dt == batonFloat16 || dt == batonBfloat16)) {
    double v = static_cast<double>(i % 7);
    if (r == p - 1 && p % 2 == 1) return v;
    return r % 2 == 0 ? v + 1 : v - 1;
  }
  const double v = static_cast<double>((static_cast<size_t>(r) * 7 + i * 13) % 11);
  return is_signed ? v - 5 : v;
}

// The expected value of element i, by plain loops in double (every input
// and partial result is a small integer, exact in double).
double Reference(batonDataType_t dt, batonRedOp_t op, int p, size_t i) {
  double acc = Value(dt, op, p, 0, i);
  for (int r = 1; r < p; ++r) {
    const double v = Value(dt, op, p, r, i);
    acc = CombineReference(op, acc, v);
  }
  if (op != batonAvg) return acc;
  if (!IsFloat(dt)) return static_cast<double>(static_cast<int64_t>(acc) / p);  // C division
  if (dt == batonFloat32) return static_cast<float>(acc) / static_cast<float>(p);
  if (dt == batonFloat8e4m3 || dt == batonFloat8e5m2) {
    // The float quotient, rounded once to fp8 by the reference's Store.
    uint8_t q = 0;
    Store(dt, &q, 0, static_cast<float>(acc) / static_cast<float>(p));
    return Load(dt, &q, 0);
  }
  return acc / p;  // fp64; fp16/bf16 sums divide by p exactly
}

// Runs `build` over p ranks for every element of (dt, op) and checks each
// rank's `out_elems` elements at `out_offset(r)` of its output: equal to
// the reference at element `ref_index(r, j)` and, where `same_on_all`,
// bitwise equal on every rank.
void CheckTyped(const char* name, Builder build, batonDataType_t dt, batonRedOp_t op, int p,
                size_t count, size_t in_elems, size_t out_elems, bool in_place,
                const std::function<size_t(int, size_t)>& ref_index, bool same_on_all) {
  const size_t es = DatatypeSize(dt);
  std::vector<std::vector<uint8_t>> in(p, std::vector<uint8_t>(in_elems * es)), out(p);
  for (int r = 0; r < p; ++r) {
    for (size_t i = 0; i < in_elems; ++i) Store(dt, in[r].data(), i, Value(dt, op, p, r, i));
    out[r].assign(out_elems * es, 0xa5);
  }
  const std::vector<std::vector<uint8_t>> original = in;
  std::vector<SimRankStats> stats;
  // In place, reduce-scatter writes block r of its input.
  auto result = [&](int r) {
    return in_place ? in[r].data() + (in_elems == out_elems ? 0 : r * count * es) : out[r].data();
  };
  ASSERT_TRUE(Simulate(
      p,
      [&](int r, Schedule* s) {
        CollArgs a = Args(r, p, count, dt, op);
        a.send = in[r].data();
        a.recv = result(r);
        build(a, s);
      },
      &stats));
  const std::string what = std::string(name) + " " + DatatypeName(dt) + " " + RedOpName(op) +
                           " p=" + std::to_string(p) + " in_place=" + std::to_string(in_place);
  for (int r = 0; r < p; ++r) {
    if (!in_place) {
      ASSERT_EQ(in[r], original[r]) << what << ": send buffer modified";
    }
    for (size_t j = 0; j < out_elems; ++j)
      ASSERT_EQ(Load(dt, result(r), j), Reference(dt, op, p, ref_index(r, j)))
          << what << " rank " << r << " element " << j;
    if (same_on_all) {
      ASSERT_EQ(memcmp(result(r), result(0), out_elems * es), 0) << what << " rank " << r;
    }
  }
}

TEST(RhdAllReduceTest, EveryDatatypeAndOp) {
  for (int dt = 0; dt < batonNumTypes; ++dt) {
    for (int op = 0; op < batonNumOps; ++op) {
      for (int p : {1, 2, 3, 6, 8, 13}) {
        // 3 < p leaves Rabenseifner blocks empty; 37 does not.
        for (size_t n : {size_t(3), size_t(37)}) {
          for (const Algo& algo : kAllReduceAlgos) {
            for (bool in_place : {false, true}) {
              CheckTyped(
                  algo.name, algo.build, static_cast<batonDataType_t>(dt),
                  static_cast<batonRedOp_t>(op), p, n, n, n, in_place,
                  [](int, size_t j) { return j; }, true);
            }
          }
        }
      }
    }
  }
}

TEST(RhdReduceScatterTest, EveryDatatypeAndOp) {
  for (int dt = 0; dt < batonNumTypes; ++dt) {
    for (int op = 0; op < batonNumOps; ++op) {
      for (int p : {1, 2, 3, 6, 8}) {
        const size_t n = 5;
        for (bool in_place : {false, true}) {
          CheckTyped(
              "reduce_scatter", BuildRecursiveHalvingReduceScatter,
              static_cast<batonDataType_t>(dt), static_cast<batonRedOp_t>(op), p, n, n * p, n,
              in_place, [n](int r, size_t j) { return r * n + j; }, false);
        }
      }
    }
  }
}

// Rabenseifner and recursive doubling reduce every element in the same
// order, so switching between them at kRhdSmallMessageBytes does not change
// a single bit, even with rounding (inputs here are not exact).
TEST(RhdAllReduceTest, RabenseifnerAndRecursiveDoublingAgreeBitwise) {
  for (batonRedOp_t op : {batonSum, batonAvg, batonProd}) {
    for (int p : {2, 3, 5, 6, 7, 8, 12, 13, 16, 31, 100}) {
      const size_t n = 257;
      std::vector<std::vector<float>> in(p, std::vector<float>(n));
      for (int r = 0; r < p; ++r)
        for (size_t i = 0; i < n; ++i) in[r][i] = 1.0f + 1.0f / static_cast<float>(3 + r + i % 5);
      std::vector<std::vector<float>> out_rab(p, std::vector<float>(n)), out_rd = out_rab;
      std::vector<SimRankStats> stats;
      for (bool rab : {true, false}) {
        auto& out = rab ? out_rab : out_rd;
        ASSERT_TRUE(Simulate(
            p,
            [&](int r, Schedule* s) {
              CollArgs a = Args(r, p, n, batonFloat32, op);
              a.send = in[r].data();
              a.recv = out[r].data();
              (rab ? BuildRabenseifnerAllReduce : BuildRecursiveDoublingAllReduce)(a, s);
            },
            &stats));
      }
      for (int r = 0; r < p; ++r) {
        ASSERT_EQ(memcmp(out_rab[r].data(), out_rd[0].data(), n * sizeof(float)), 0)
            << RedOpName(op) << " p=" << p << " rank " << r;
        ASSERT_EQ(memcmp(out_rd[r].data(), out_rd[0].data(), n * sizeof(float)), 0)
            << RedOpName(op) << " p=" << p << " rank " << r;
      }
    }
  }
}

// --- Message counts -------------------------------------------------------

// Sends expected of rank r for an algorithm of `steps(L)` steps over p ranks
// folded to p' = 2^L: one for a folded-out rank, one more for its partner.
size_t FoldedSends(int r, int p, size_t power_of_two_sends) {
  const int extra = p - (1 << Log2Floor(p));
  if (r < 2 * extra) return r % 2 == 0 ? 1 : power_of_two_sends + 1;
  return power_of_two_sends;
}

TEST(RhdAllReduceTest, MessageCountsMatchTheory) {
  for (int p : {2, 3, 4, 5, 6, 7, 8, 12, 16, 64, 100, 128, 1000, 1024}) {
    const size_t L = Log2Floor(p);
    const size_t n = size_t(1 << L) * 8;  // divisible by p' (and by p for powers of two)
    std::vector<std::vector<int32_t>> buf(p, std::vector<int32_t>(n, 1));
    for (const Algo& algo : kAllReduceAlgos) {
      if (algo.build == BuildRhdAllReduce) continue;
      const bool rab = algo.build == BuildRabenseifnerAllReduce;
      std::vector<SimRankStats> stats;
      ASSERT_TRUE(Simulate(
          p,
          [&](int r, Schedule* s) {
            CollArgs a = Args(r, p, n, batonInt32, batonSum);
            a.send = a.recv = buf[r].data();
            algo.build(a, s);
          },
          &stats));
      for (int r = 0; r < p; ++r) {
        const size_t sends = FoldedSends(r, p, rab ? 2 * L : L);
        EXPECT_EQ(stats[r].sends, sends) << algo.name << " p=" << p << " rank " << r;
        EXPECT_EQ(stats[r].recvs, sends) << algo.name << " p=" << p << " rank " << r;
        if ((p & (p - 1)) != 0) continue;
        const size_t bytes = n * sizeof(int32_t);
        if (rab) {
          EXPECT_EQ(stats[r].bytes_sent, 2 * (p - 1) * bytes / p) << "p=" << p;
          EXPECT_EQ(stats[r].bytes_reduced, (p - 1) * bytes / p) << "p=" << p;
        } else {
          EXPECT_EQ(stats[r].bytes_sent, L * bytes) << "p=" << p;
        }
      }
    }
  }
}

TEST(RhdAllReduceTest, PicksAlgorithmBySize) {
  auto sends = [](int p, size_t count, batonDataType_t dt) {
    std::vector<uint8_t> buf(count * DatatypeSize(dt));
    CollArgs a = Args(p - 1, p, count, dt, batonSum);  // never a folded rank
    a.send = a.recv = buf.data();
    Schedule s;
    BuildRhdAllReduce(a, &s);
    size_t n = 0;
    for (const Op& op : s.ops) n += op.kind == Op::Kind::kSend;
    return n;
  };
  const size_t small = kRhdSmallMessageBytes / 4;
  EXPECT_EQ(sends(8, small - 1, batonInt32), 3u);  // recursive doubling
  EXPECT_EQ(sends(8, small, batonInt32), 6u);      // Rabenseifner
  // Fewer elements than ranks: recursive doubling however large.
  EXPECT_EQ(sends(4096, 4095, batonFloat64), 12u);
  EXPECT_EQ(sends(4096, 4096, batonFloat64), 24u);
}

// --- Reduce-scatter and allgather -------------------------------------------

TEST(RhdReduceScatterTest, MatchesReference) {
  for (int p : RankCounts()) {
    for (size_t n : BlockCounts(p)) {
      for (bool in_place : {false, true}) {
        std::vector<std::vector<int32_t>> in(p, std::vector<int32_t>(n * p)), out(p);
        for (int r = 0; r < p; ++r) {
          for (size_t i = 0; i < n * p; ++i) in[r][i] = Input(r, i);
          out[r].assign(n, -9);
        }
        const auto original = in;
        std::vector<SimRankStats> stats;
        auto result = [&](int r) { return in_place ? in[r].data() + r * n : out[r].data(); };
        ASSERT_TRUE(Simulate(
            p,
            [&](int r, Schedule* s) {
              CollArgs a = Args(r, p, n, batonInt32, batonSum);
              a.send = in[r].data();
              a.recv = result(r);
              a.stream_outputs = (p + n) % 2 == 0;  // half the cases
              BuildRecursiveHalvingReduceScatter(a, s);
            },
            &stats))
            << "p=" << p << " n=" << n << " in_place=" << in_place;
        for (int r = 0; r < p; ++r) {
          if (!in_place) {
            ASSERT_EQ(in[r], original[r]) << "send buffer modified";
          }
          for (size_t i = 0; i < n; ++i) {
            int32_t want = 0;
            for (int s = 0; s < p; ++s) want += Input(s, r * n + i);
            ASSERT_EQ(result(r)[i], want)
                << "p=" << p << " n=" << n << " in_place=" << in_place << " rank " << r;
          }
        }
      }
    }
  }
}

TEST(RhdReduceScatterTest, FloatAvgDividesOnce) {
  for (int p = 1; p <= 33; ++p) {
    const size_t n = 7;
    std::vector<std::vector<float>> in(p, std::vector<float>(n * p)), out(p);
    for (int r = 0; r < p; ++r) {
      for (size_t i = 0; i < n * p; ++i) in[r][i] = Input(r, i) * 0.5f;
      out[r].assign(n, -1);
    }
    std::vector<SimRankStats> stats;
    ASSERT_TRUE(Simulate(
        p,
        [&](int r, Schedule* s) {
          CollArgs a = Args(r, p, n, batonFloat32, batonAvg);
          a.send = in[r].data();
          a.recv = out[r].data();
          BuildRecursiveHalvingReduceScatter(a, s);
        },
        &stats));
    for (int r = 0; r < p; ++r)
      for (size_t i = 0; i < n; ++i) {
        float sum = 0;
        for (int s = 0; s < p; ++s) sum += in[s][r * n + i];
        ASSERT_EQ(out[r][i], sum / static_cast<float>(p)) << "p=" << p << " rank " << r;
      }
  }
}

TEST(RhdAllGatherTest, MatchesReference) {
  for (int p : RankCounts()) {
    for (size_t n : BlockCounts(p)) {
      for (bool in_place : {false, true}) {
        std::vector<std::vector<int32_t>> in(p, std::vector<int32_t>(n)), out(p);
        for (int r = 0; r < p; ++r) {
          for (size_t i = 0; i < n; ++i) in[r][i] = Input(r, i);
          out[r].assign(n * p, -9);
          if (in_place) std::copy(in[r].begin(), in[r].end(), out[r].begin() + r * n);
        }
        std::vector<SimRankStats> stats;
        ASSERT_TRUE(Simulate(
            p,
            [&](int r, Schedule* s) {
              CollArgs a = Args(r, p, n, batonInt32, batonSum);
              a.send = in_place ? out[r].data() + r * n : in[r].data();
              a.recv = out[r].data();
              a.stream_outputs = (p + n) % 2 == 0;  // half the cases
              BuildRecursiveDoublingAllGather(a, s);
            },
            &stats))
            << "p=" << p << " n=" << n << " in_place=" << in_place;
        for (int r = 0; r < p; ++r) {
          for (int o = 0; o < p; ++o)
            for (size_t i = 0; i < n; ++i)
              ASSERT_EQ(out[r][o * n + i], Input(o, i))
                  << "p=" << p << " n=" << n << " in_place=" << in_place << " rank " << r;
          for (size_t i = 0; i < n; ++i) ASSERT_EQ(in[r][i], Input(r, i)) << "send modified";
        }
      }
    }
  }
}

// Allgather moves bytes only: check odd element sizes too.
TEST(RhdAllGatherTest, ByteAndWordTypes) {
  for (batonDataType_t dt : {batonInt8, batonFloat16, batonFloat64}) {
    for (int p = 1; p <= 13; ++p) {
      const size_t n = 3, es = DatatypeSize(dt), blk = n * es;
      std::vector<std::vector<uint8_t>> in(p, std::vector<uint8_t>(blk)), out(p);
      for (int r = 0; r < p; ++r) {
        for (size_t b = 0; b < blk; ++b) in[r][b] = static_cast<uint8_t>(r * 31 + b);
        out[r].assign(blk * p, 0);
      }
      std::vector<SimRankStats> stats;
      ASSERT_TRUE(Simulate(
          p,
          [&](int r, Schedule* s) {
            CollArgs a = Args(r, p, n, dt, batonSum);
            a.send = in[r].data();
            a.recv = out[r].data();
            BuildRecursiveDoublingAllGather(a, s);
          },
          &stats));
      for (int r = 0; r < p; ++r)
        for (int o = 0; o < p; ++o)
          ASSERT_EQ(memcmp(out[r].data() + o * blk, in[o].data(), blk), 0)
              << DatatypeName(dt) << " p=" << p << " rank " << r << " block " << o;
    }
  }
}

TEST(RhdReduceScatterAllGatherTest, MessageCountsMatchTheory) {
  for (int p : {2, 3, 4, 5, 6, 7, 8, 12, 16, 64, 100, 128, 1000, 1024}) {
    const size_t L = Log2Floor(p), n = 3, blk = n * sizeof(int32_t);
    const bool pow2 = (p & (p - 1)) == 0;
    std::vector<std::vector<int32_t>> big(p, std::vector<int32_t>(n * p, 1)), small(p);
    std::vector<SimRankStats> stats;
    ASSERT_TRUE(Simulate(
        p,
        [&](int r, Schedule* s) {
          CollArgs a = Args(r, p, n, batonInt32, batonSum);
          a.send = big[r].data();
          a.recv = big[r].data() + r * n;
          BuildRecursiveHalvingReduceScatter(a, s);
        },
        &stats));
    for (int r = 0; r < p; ++r) {
      EXPECT_EQ(stats[r].sends, FoldedSends(r, p, L)) << "reduce-scatter p=" << p << " r" << r;
      // p/2 + p/4 + ... + 1 blocks.
      if (pow2) {
        EXPECT_EQ(stats[r].bytes_sent, (p - 1) * blk) << "p=" << p;
      }
    }
    ASSERT_TRUE(Simulate(
        p,
        [&](int r, Schedule* s) {
          CollArgs a = Args(r, p, n, batonInt32, batonSum);
          a.send = big[r].data() + r * n;
          a.recv = big[r].data();
          BuildRecursiveDoublingAllGather(a, s);
        },
        &stats));
    for (int r = 0; r < p; ++r) {
      EXPECT_EQ(stats[r].sends, FoldedSends(r, p, L)) << "allgather p=" << p << " r" << r;
      if (pow2) {
        EXPECT_EQ(stats[r].bytes_sent, (p - 1) * blk) << "p=" << p;
      }
    }
  }
}

}  // namespace
}  // namespace baton
