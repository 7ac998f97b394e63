// End-to-end tests of batonGather, batonScatter, batonAllGatherV,
// batonReduceScatterV and batonAlltoAllV: real ranks (one process each)
// over the shm and tcp transports, 1 to 9 and 16 ranks, compared bitwise
// with references computed here from the inputs (collective_data.h), not
// with Baton code. Every datatype runs at a few sizes and every size at two
// datatypes (not the full cross product, to bound the time); every root,
// uneven and zero counts, in place and out of place, the NULL stream and a
// host stream. Then the argument checks: every bad argument is
// batonInvalidArgument with a message, never a crash.
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
using baton_test::SecondsSince;

bool Ran(RankContext& ctx, batonResult_t r, const std::string& what) {
  MP_EXPECT_EQ(ctx, r, batonSuccess)
      << " (" << baton_test::ResultName(r) << ") from " << what << ": " << ctx.LastError();
  return r == batonSuccess;
}

bool Synced(RankContext& ctx, batonStream_t stream) {
  return stream == nullptr || Ran(ctx, batonStreamSynchronize(stream), "batonStreamSynchronize");
}

// The (datatype, count) pairs: every datatype at a few counts, every count
// at int8 and float64 (the narrowest and the widest element).
std::vector<std::pair<int, size_t>> TypeCounts() {
  std::vector<std::pair<int, size_t>> cases;
  for (int t = 0; t < batonNumTypes; ++t)
    for (size_t count : {size_t(0), size_t(3), size_t(1001)}) cases.push_back({t, count});
  for (int t : {0, 8})
    for (size_t count : {size_t(1), size_t(2), size_t(7), size_t(65537)})
      cases.push_back({t, count});
  return cases;
}

// Gather to every root in turn, then scatter from every root; in place at
// the root on odd roots, on the host stream for even case numbers.
void GatherScatter(RankContext& ctx, batonStream_t host_stream) {
  const int rank = ctx.rank(), n = ctx.nranks();
  int case_no = 0;
  for (auto [type_index, count] : TypeCounts()) {
    const TypeDesc& t = kTypes[type_index];
    const size_t block = count * t.size;
    // Large counts: a few roots only, to bound the time.
    std::vector<int> roots;
    for (int root = 0; root < n; ++root)
      if (count < 10000 || root == 0 || root == n - 1) roots.push_back(root);
    for (int root : roots) {
      const bool in_place = root % 2 == 1;
      batonStream_t stream = case_no++ % 2 == 0 ? host_stream : nullptr;
      const uint64_t seed =
          Seed({20, static_cast<uint64_t>(t.type), count, static_cast<uint64_t>(root)});
      // Gather.
      {
        GuardedBuffer send(block), recv(block * n);
        uint8_t* mine = in_place && rank == root ? recv.data() + rank * block : send.data();
        FillInput(t.type, mine, count, seed, rank, batonMax);
        const std::string what =
            Describe("gather", t, "", count, in_place, stream != nullptr, root);
        ctx.SetStep(what);
        if (!Ran(ctx,
                 batonGather(mine, rank == root ? recv.data() : nullptr, count, t.type, root,
                             ctx.comm(), stream),
                 what) ||
            !Synced(ctx, stream))
          return;
        if (rank == root) {
          for (int r = 0; r < n; ++r)
            CheckInput(ctx, what + " block " + std::to_string(r), t.type, batonMax, seed, r,
                       recv.data() + r * block, count);
        } else {
          for (size_t i = 0; i < recv.bytes(); ++i)
            if (recv.data()[i] != GuardedBuffer::kUnwrittenByte) {
              MP_ADD_FAILURE(ctx) << " non-root recvbuff written in " << what;
              break;
            }
        }
        MP_EXPECT_TRUE(ctx, recv.GuardsIntact()) << " guard overwritten in " << what;
        CheckInput(ctx, what + " (input modified)", t.type, batonMax, seed, rank, mine, count);
      }
      // Scatter.
      {
        GuardedBuffer send(block * n), recv(block);
        if (rank == root) FillInput(t.type, send.data(), count * n, seed, 0, batonMax);
        uint8_t* out = in_place && rank == root ? send.data() + rank * block : recv.data();
        const std::string what =
            Describe("scatter", t, "", count, in_place, stream != nullptr, root);
        ctx.SetStep(what);
        if (!Ran(ctx,
                 batonScatter(rank == root ? send.data() : nullptr, out, count, t.type, root,
                              ctx.comm(), stream),
                 what) ||
            !Synced(ctx, stream))
          return;
        // Block r of the root's input: elements r * count .. of rank 0's pattern.
        Dispatch(t.type, [&](auto tr) {
          using Tr = decltype(tr);
          CheckElements<Tr>(ctx, what, out, count, [&](size_t i) {
            return Tr::Input(batonMax, Bits(seed, 0, rank * count + i));
          });
        });
        MP_EXPECT_TRUE(ctx, recv.GuardsIntact() && send.GuardsIntact())
            << " guard overwritten in " << what;
        if (rank == root)
          CheckInput(ctx, what + " (root's input modified)", t.type, batonMax, seed, 0, send.data(),
                     count * n);
      }
    }
  }
}

// Rank r's block: uneven, every third rank empty, `scale` elements or so.
std::vector<size_t> Uneven(int n, size_t scale, int salt) {
  std::vector<size_t> c(n);
  for (int r = 0; r < n; ++r) c[r] = (r + salt) % 3 == 1 ? 0 : scale * ((r * 5 + salt) % 7 + 1) / 4;
  return c;
}

// Displacements in reverse rank order with a gap of 2 elements after each
// block (gapped), or packed in rank order; *extent: elements spanned.
std::vector<size_t> Place(const std::vector<size_t>& counts, bool gapped, size_t* extent) {
  const int n = static_cast<int>(counts.size());
  std::vector<size_t> d(n);
  size_t at = 0;
  for (int i = 0; i < n; ++i) {
    const int r = gapped ? n - 1 - i : i;
    d[r] = at;
    at += counts[r] + (gapped ? 2 : 0);
  }
  *extent = at;
  return d;
}

void VCollectives(RankContext& ctx, batonStream_t host_stream) {
  const int rank = ctx.rank(), n = ctx.nranks();
  int case_no = 0;
  for (auto [type_index, scale] : TypeCounts()) {
    const TypeDesc& t = kTypes[type_index];
    for (bool in_place : {false, true}) {
      batonStream_t stream = case_no++ % 2 == 0 ? host_stream : nullptr;
      const bool gapped = case_no % 3 != 0;
      const uint64_t seed = Seed({21, static_cast<uint64_t>(t.type), scale, in_place});
      // Allgatherv.
      {
        const std::vector<size_t> counts = Uneven(n, scale, static_cast<int>(scale % 5));
        size_t extent = 0;
        const std::vector<size_t> displs = Place(counts, gapped, &extent);
        GuardedBuffer send(counts[rank] * t.size), recv(extent * t.size);
        uint8_t* mine = in_place ? recv.data() + displs[rank] * t.size : send.data();
        FillInput(t.type, mine, counts[rank], seed, rank, batonMax);
        const std::string what = Describe("allgatherv", t, "", scale, in_place, stream != nullptr);
        ctx.SetStep(what);
        if (!Ran(ctx,
                 batonAllGatherV(mine, counts[rank], recv.data(), counts.data(), displs.data(),
                                 t.type, ctx.comm(), stream),
                 what) ||
            !Synced(ctx, stream))
          return;
        for (int r = 0; r < n; ++r)
          CheckInput(ctx, what + " block " + std::to_string(r), t.type, batonMax, seed, r,
                     recv.data() + displs[r] * t.size, counts[r]);
        // The gaps between blocks are not the call's to write.
        for (int r = 0; r < n && gapped; ++r)
          for (size_t g = 0; g < 2 * t.size; ++g)
            if (recv.data()[(displs[r] + counts[r]) * t.size + g] !=
                GuardedBuffer::kUnwrittenByte) {
              MP_ADD_FAILURE(ctx) << " gap after block " << r << " written in " << what;
              break;
            }
        MP_EXPECT_TRUE(ctx, recv.GuardsIntact()) << " guard overwritten in " << what;
      }
      // Reducescatterv, every op on the two datatypes of the size sweep,
      // sum elsewhere.
      for (batonRedOp_t op : kOps) {
        if (op != batonSum && type_index != 0 && type_index != 8) continue;
        // fp8 sums over more than 8 ranks leave the types' exact integers,
        // and then depend on the order of the partial sums; the kernel
        // tests check fp8 arithmetic over all bit patterns instead.
        if ((t.type == batonFloat8e4m3 || t.type == batonFloat8e5m2) && n > 8 &&
            (op == batonSum || op == batonAvg))
          continue;
        const std::vector<size_t> counts = Uneven(n, scale, 1);
        std::vector<size_t> at(n + 1, 0);
        for (int r = 0; r < n; ++r) at[r + 1] = at[r] + counts[r];
        const uint64_t s2 = seed + static_cast<uint64_t>(op);
        GuardedBuffer send(at[n] * t.size), recv(counts[rank] * t.size);
        FillInput(t.type, send.data(), at[n], s2, rank, op);
        uint8_t* out = in_place ? send.data() + at[rank] * t.size : recv.data();
        const std::string what =
            Describe("reducescatterv", t, OpName(op), scale, in_place, stream != nullptr);
        ctx.SetStep(what);
        if (!Ran(ctx,
                 batonReduceScatterV(send.data(), out, counts.data(), t.type, op, ctx.comm(),
                                     stream),
                 what) ||
            !Synced(ctx, stream))
          return;
        Dispatch(t.type, [&](auto tr) {
          using Tr = decltype(tr);
          CheckElements<Tr>(ctx, what, out, counts[rank],
                            [&](size_t i) { return ReferenceReduce<Tr>(op, s2, n, at[rank] + i); });
        });
        MP_EXPECT_TRUE(ctx, recv.GuardsIntact() && send.GuardsIntact())
            << " guard overwritten in " << what;
        if (!in_place)
          CheckInput(ctx, what + " (input modified)", t.type, op, s2, rank, send.data(), at[n]);
      }
      // Alltoallv: rank i sends (i + 2j) % 5 * scale / 4 elements to rank j
      // (zero for some pairs); in place as one buffer.
      {
        auto pair = [&](int i, int j) { return static_cast<size_t>((i + 2 * j) % 5) * scale / 4; };
        std::vector<size_t> sc(n), rc(n);
        for (int j = 0; j < n; ++j) sc[j] = pair(rank, j), rc[j] = pair(j, rank);
        size_t sext = 0, rext = 0;
        const std::vector<size_t> sd = Place(sc, gapped, &sext), rd = Place(rc, gapped, &rext);
        // Element k of the block for j is element j * 100000 + k of the pattern.
        GuardedBuffer send(sext * t.size), recv(std::max(sext, rext) * t.size);
        GuardedBuffer& src = in_place ? recv : send;
        for (int j = 0; j < n; ++j) {
          Dispatch(t.type, [&](auto tr) {
            using Tr = decltype(tr);
            auto* p = reinterpret_cast<typename Tr::Storage*>(src.data()) + sd[j];
            for (size_t k = 0; k < sc[j]; ++k)
              p[k] = Tr::Input(batonMax, Bits(seed, rank, j * 100000 + k));
          });
        }
        const std::string what = Describe("alltoallv", t, "", scale, in_place, stream != nullptr);
        ctx.SetStep(what);
        if (!Ran(ctx,
                 batonAlltoAllV(src.data(), sc.data(), sd.data(), recv.data(), rc.data(), rd.data(),
                                t.type, ctx.comm(), stream),
                 what) ||
            !Synced(ctx, stream))
          return;
        for (int i = 0; i < n; ++i) {
          Dispatch(t.type, [&](auto tr) {
            using Tr = decltype(tr);
            CheckElements<Tr>(
                ctx, what + " from rank " + std::to_string(i), recv.data() + rd[i] * t.size, rc[i],
                [&](size_t k) { return Tr::Input(batonMax, Bits(seed, i, rank * 100000 + k)); });
          });
        }
        MP_EXPECT_TRUE(ctx, recv.GuardsIntact()) << " guard overwritten in " << what;
      }
    }
  }
}

class GatherVTest : public ::testing::TestWithParam<std::tuple<int, const char*>> {};

TEST_P(GatherVTest, GatherScatterAndVariableCounts) {
  const auto [nranks, transport] = GetParam();
  Options options;
  options.env = {{"BATON_TRANSPORT", transport}};
  options.deadline = std::chrono::seconds(300);
  RunRanks(
      nranks,
      [](RankContext& ctx) {
        HostStream stream(ctx);
        Timed(ctx, "gather/scatter", [&] { GatherScatter(ctx, stream.get()); });
        Timed(ctx, "v-collectives", [&] { VCollectives(ctx, stream.get()); });
      },
      options);
}

INSTANTIATE_TEST_SUITE_P(Ranks, GatherVTest,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 5, 6, 7, 8, 9, 16),
                                            ::testing::Values("shm", "tcp")),
                         [](const auto& info) {
                           return std::string(std::get<1>(info.param)) + "_" +
                                  std::to_string(std::get<0>(info.param)) + "ranks";
                         });

// Each algorithm of each new collective, forced with BATON_ALGO, on 5 ranks.
class GatherVAlgorithmTest : public ::testing::TestWithParam<const char*> {};

TEST_P(GatherVAlgorithmTest, EveryAlgorithm) {
  Options options;
  options.env = {{"BATON_ALGO", GetParam()}};
  RunRanks(
      5,
      [](RankContext& ctx) {
        GatherScatter(ctx, nullptr);
        VCollectives(ctx, nullptr);
      },
      options);
}

INSTANTIATE_TEST_SUITE_P(Algorithms, GatherVAlgorithmTest,
                         ::testing::Values("gather:direct;scatter:direct;allgatherv:ring",
                                           "gather:binomial;scatter:binomial;allgatherv:rhd"),
                         [](const auto& info) {
                           return info.index == 0 ? std::string("direct_ring") : "binomial_rhd";
                         });

// Bad arguments: batonInvalidArgument and a message, nothing sent (every
// rank makes the same bad calls, so none waits for the others).
TEST(GatherVArgumentsTest, BadArgumentsAreInvalidArgument) {
  RunRanks(3, [](RankContext& ctx) {
    const int n = ctx.nranks(), rank = ctx.rank();
    std::vector<int32_t> buf(64, 0), out(64, 0);
    const size_t counts[3] = {2, 2, 2}, displs[3] = {0, 2, 4}, overlapping[3] = {0, 1, 4};
    const size_t huge[3] = {2, SIZE_MAX - 1, 2};
    auto expect_invalid = [&](batonResult_t r, const char* what, const char* words) {
      MP_EXPECT_EQ(ctx, r, batonInvalidArgument) << " from " << what;
      const std::string msg = ctx.LastError();
      MP_EXPECT_TRUE(ctx, msg.find(words) != std::string::npos)
          << " " << what << ": message '" << msg << "' lacks '" << words << "'";
    };
    batonComm_t c = ctx.comm();
    expect_invalid(batonGather(buf.data(), out.data(), 2, batonInt32, n, c, nullptr),
                   "gather root n", "root");
    expect_invalid(batonGather(buf.data(), out.data(), 2, batonInt32, -1, c, nullptr),
                   "gather root -1", "root");
    expect_invalid(batonScatter(buf.data(), out.data(), 2, batonInt32, 3, c, nullptr),
                   "scatter root 3", "root");
    expect_invalid(
        batonAllGatherV(buf.data(), 2, out.data(), nullptr, displs, batonInt32, c, nullptr),
        "allgatherv NULL recvcounts", "recvcounts is NULL");
    expect_invalid(
        batonAllGatherV(buf.data(), 2, out.data(), counts, nullptr, batonInt32, c, nullptr),
        "allgatherv NULL displs", "displs is NULL");
    expect_invalid(
        batonAllGatherV(buf.data(), 2, out.data(), counts, overlapping, batonInt32, c, nullptr),
        "allgatherv overlapping displs", "overlap");
    expect_invalid(
        batonAllGatherV(buf.data(), 3, out.data(), counts, displs, batonInt32, c, nullptr),
        "allgatherv sendcount != recvcounts[rank]", "differ");
    expect_invalid(batonAllGatherV(buf.data(), 2, out.data(), huge, displs, batonInt32, c, nullptr),
                   "allgatherv huge count", "overflows");
    const size_t far[3] = {0, SIZE_MAX - 1, 4};
    expect_invalid(batonAllGatherV(buf.data(), 2, out.data(), counts, far, batonInt32, c, nullptr),
                   "allgatherv displs overflow", "overflows");
    expect_invalid(
        batonAllGatherV(out.data() + 1, 2, out.data(), counts, displs, batonInt32, c, nullptr),
        "allgatherv sendbuff inside recvbuff", "overlaps");
    expect_invalid(
        batonReduceScatterV(buf.data(), out.data(), nullptr, batonInt32, batonSum, c, nullptr),
        "reducescatterv NULL recvcounts", "recvcounts is NULL");
    expect_invalid(
        batonReduceScatterV(buf.data(), out.data(), huge, batonInt32, batonSum, c, nullptr),
        "reducescatterv huge counts", "overflows");
    expect_invalid(batonReduceScatterV(buf.data(), out.data(), counts, batonInt32,
                                       static_cast<batonRedOp_t>(99), c, nullptr),
                   "reducescatterv bad op", "op");
    expect_invalid(batonAlltoAllV(buf.data(), counts, displs, out.data(), counts, nullptr,
                                  batonInt32, c, nullptr),
                   "alltoallv NULL rdispls", "rdispls is NULL");
    expect_invalid(batonAlltoAllV(buf.data(), nullptr, displs, out.data(), counts, displs,
                                  batonInt32, c, nullptr),
                   "alltoallv NULL sendcounts", "sendcounts is NULL");
    expect_invalid(batonAlltoAllV(buf.data(), counts, displs, out.data(), counts, overlapping,
                                  batonInt32, c, nullptr),
                   "alltoallv overlapping rdispls", "overlap");
    const size_t other[3] = {1, 1, 1};
    expect_invalid(batonAlltoAllV(buf.data(), counts, displs, out.data(), other, displs, batonInt32,
                                  c, nullptr),
                   "alltoallv own counts differ", "differ");
    expect_invalid(batonAlltoAllV(out.data() + 1, counts, displs, out.data(), counts, displs,
                                  batonInt32, c, nullptr),
                   "alltoallv partial overlap", "overlaps");
    expect_invalid(batonAllGatherV(buf.data(), 2, out.data(), counts, displs,
                                   static_cast<batonDataType_t>(42), c, nullptr),
                   "allgatherv bad datatype", "datatype");
    // Overlapping send blocks are fine (only read), and so is all of it
    // still working after the bad calls.
    const size_t same[3] = {0, 0, 0};
    std::vector<int32_t> src(2, rank), dst(6, -1);
    MP_EXPECT_OK(ctx, batonAlltoAllV(src.data(), counts, same, dst.data(), counts, displs,
                                     batonInt32, c, nullptr));
    for (int r = 0; r < n; ++r) MP_EXPECT_EQ(ctx, dst[2 * r], r);
  });
}

// Ranks that disagree about a call fail with batonInvalidUsage naming a
// mismatch, long before BATON_TIMEOUT: a gather with another root on one
// rank, an allgatherv whose recvcounts differ on one rank (its descriptor
// carries a hash of them), an alltoallv whose pair counts disagree (the
// transports see the sizes differ).
constexpr const char* kMismatchNames[] = {"gather_root", "allgatherv_counts", "alltoallv_sizes"};

class GatherVMismatchTest : public ::testing::TestWithParam<std::tuple<const char*, int>> {};

TEST_P(GatherVMismatchTest, EveryRankReportsIt) {
  const auto [transport, kind] = GetParam();
  Options options;
  options.env = {{"BATON_TRANSPORT", transport}, {"BATON_TIMEOUT", "20"}};
  options.deadline = std::chrono::seconds(60);
  RunRanks(
      4,
      [kind = kind](RankContext& ctx) {
        const int rank = ctx.rank();
        const bool odd = rank == 2;
        std::vector<int32_t> buf(64, rank), out(64, 0);
        // A matching call first. A rank still finishing it when a faster
        // one has found the mismatch in the next call may get that failure
        // here already (the note spreads to every rank): that is the report.
        const auto start = std::chrono::steady_clock::now();
        batonResult_t r =
            batonAllReduce(buf.data(), buf.data(), 8, batonInt32, batonSum, ctx.comm(), nullptr);
        if (r != batonSuccess) {
          // Reported in the first call (see above).
        } else if (kind == 0) {
          r = batonGather(buf.data(), out.data(), 4, batonInt32, odd ? 1 : 0, ctx.comm(), nullptr);
        } else if (kind == 1) {
          size_t counts[4] = {2, 2, 2, 2};
          if (odd) counts[0] = 3;
          const size_t displs[4] = {0, 8, 16, 24};
          r = batonAllGatherV(buf.data(), 2, out.data(), counts, displs, batonInt32, ctx.comm(),
                              nullptr);
        } else {
          size_t sc[4] = {2, 2, 2, 2}, rc[4] = {2, 2, 2, 2};
          if (odd) sc[0] = 3;  // rank 0 expects 2 from rank 2
          const size_t d[4] = {0, 8, 16, 24};
          r = batonAlltoAllV(buf.data(), sc, d, out.data(), rc, d, batonInt32, ctx.comm(), nullptr);
        }
        if (r == batonSuccess)  // this rank's part needed nothing from the odd one
          r = batonAllReduce(buf.data(), buf.data(), 8, batonInt32, batonSum, ctx.comm(), nullptr);
        const std::string message = ctx.LastError();
        MP_EXPECT_EQ(ctx, r, batonInvalidUsage) << " (" << ResultName(r) << "): " << message;
        MP_EXPECT_LT(ctx, SecondsSince(start), 5.0) << message;
        MP_EXPECT_NE(ctx, message.find("mismatch"), std::string::npos) << message;
        if (rank == 0) ctx.Log(message);
        MP_EXPECT_OK(ctx, batonCommAbort(ctx.TakeComm()));
      },
      options);
}

INSTANTIATE_TEST_SUITE_P(Kinds, GatherVMismatchTest,
                         ::testing::Combine(::testing::Values("shm", "tcp"),
                                            ::testing::Values(0, 1, 2)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param)) + "_" +
                                  kMismatchNames[std::get<1>(info.param)];
                         });

}  // namespace
