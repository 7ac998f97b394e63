// Every (collective, algorithm) pair in real processes: 1 to 9 and 16 ranks,
// over shared memory and TCP, and on simulated hosts (BATON_HOSTID: rank r
// on host r mod K, so hosts hold interleaved ranks, the same number each or
// not). Each algorithm gets its own communicator made with BATON_ALGO naming
// it; a collective the algorithm does not implement (or hier on hosts of
// different sizes) must fail with batonInvalidUsage (and leave the
// communicator usable), never hang. Results are compared bitwise with a plain loop over all ranks'
// inputs, which are small integers so that every reduction order is exact.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "algorithms/collective.h"
#include "common/mp_harness.h"
#include "common/reference.h"
#include "kernels/reduce_copy.h"

namespace {

using baton_test::Options;
using baton_test::RankContext;
using baton_test::RunRanks;

// The algorithms (BATON_ALGO names) and which collective each implements
// come from the library's one table of them, algorithms/collective.h.
using baton::kAlgorithmNames;

bool Implements(const std::string& coll, const std::string& algo) {
  baton::Collective c;
  baton::Algorithm a;
  return baton::CollectiveFromName(coll.c_str(), &c) &&
         baton::AlgorithmFromName(algo.c_str(), &a) && baton::Implements(c, a);
}

std::vector<uint8_t> Fill(batonDataType_t t, batonRedOp_t op, int r, int n, size_t count,
                          size_t first = 0) {
  std::vector<uint8_t> v(count * SizeOf(t) + 1);
  for (size_t i = 0; i < count; ++i)
    Store(t, v.data(), i, ExactInput(t, op, r, n, first + i));
  return v;
}

std::vector<uint8_t> Reference(batonDataType_t t, batonRedOp_t op, int n, size_t count,
                               size_t first = 0) {
  std::vector<uint8_t> v(count * SizeOf(t) + 1);
  for (size_t i = 0; i < count; ++i) Store(t, v.data(), i, ExactExpected(t, op, n, first + i));
  return v;
}

struct Shape {
  batonDataType_t type;
  batonRedOp_t op;
  size_t count;
};

// The datatype/op/count grid: every datatype with every op at count p+1
// (not divisible by p), a prime count, the edge counts 0, 1 and p-1, and
// one large float sum (1M+3 elements).
std::vector<Shape> Shapes(int n) {
  std::vector<Shape> s;
  for (int t = 0; t < batonNumTypes; ++t)
    for (int op = 0; op < batonNumOps; ++op)
      s.push_back({batonDataType_t(t), batonRedOp_t(op), size_t(n + 1)});
  for (size_t c : {size_t(0), size_t(1), size_t(n > 1 ? n - 1 : 0), size_t(1009)})
    s.push_back({batonInt32, batonSum, c});
  s.push_back({batonFloat32, batonSum, (size_t(1) << 20) + 3});
  return s;
}

std::string Describe(const std::string& coll, const std::string& algo, const Shape& s,
                     bool in_place, int root = -1) {
  return coll + "/" + algo + " type " + std::to_string(s.type) + " op " + std::to_string(s.op) +
         " count " + std::to_string(s.count) + (in_place ? " in-place" : " out-of-place") +
         (root >= 0 ? " root " + std::to_string(root) : "");
}

// Runs one collective with one algorithm over the grid; false to stop.
// `uniform_hosts`: every host holds as many ranks (hier needs it).
void CheckCollective(RankContext& ctx, batonComm_t comm, const std::string& coll,
                     const std::string& algo, bool uniform_hosts) {
  const int rank = ctx.rank(), n = ctx.nranks();
  if (!Implements(coll, algo) || (algo == "hier" && !uniform_hosts)) {
    // An impossible request is a clear error, and the communicator lives on.
    std::vector<float> x(4, 1.0f), y(4 * n);
    batonResult_t r = batonInvalidUsage;
    if (coll == "allreduce")
      r = batonAllReduce(x.data(), x.data(), 4, batonFloat, batonSum, comm, nullptr);
    if (coll == "broadcast")
      r = batonBroadcast(x.data(), x.data(), 4, batonFloat, 0, comm, nullptr);
    if (coll == "reduce")
      r = batonReduce(x.data(), y.data(), 4, batonFloat, batonSum, 0, comm, nullptr);
    if (coll == "allgather") r = batonAllGather(x.data(), y.data(), 4, batonFloat, comm, nullptr);
    if (coll == "reducescatter")
      r = batonReduceScatter(y.data(), x.data(), 4, batonFloat, batonSum, comm, nullptr);
    if (coll == "alltoall") r = batonAlltoAll(y.data(), y.data(), 4, batonFloat, comm, nullptr);
    MP_EXPECT_EQ(ctx, r, batonInvalidUsage) << " " << coll << " with BATON_ALGO=" << algo;
    MP_EXPECT_TRUE(ctx,
                   std::string(batonGetLastError(comm)).find("BATON_ALGO") != std::string::npos)
        << " message: " << batonGetLastError(comm);
    return;
  }
  for (const Shape& s : Shapes(n)) {
    const size_t es = SizeOf(s.type), count = s.count;
    const bool reduces = coll != "broadcast" && coll != "allgather" && coll != "alltoall";
    if (!reduces && s.op != batonSum) continue;
    // Large buffers only on one transport-independent path per collective.
    if (count > 100000 && coll != "allreduce" && coll != "broadcast") continue;
    for (bool in_place : {false, true}) {
      const std::string what = Describe(coll, algo, s, in_place);
      ctx.SetStep(what);
      if (coll == "allreduce") {
        auto buf = Fill(s.type, s.op, rank, n, count);
        std::vector<uint8_t> out(buf.size(), 0xee);
        uint8_t* recv = in_place ? buf.data() : out.data();
        MP_EXPECT_OK(ctx, batonAllReduce(buf.data(), recv, count, s.type, s.op, comm, nullptr))
            << what;
        MP_EXPECT_TRUE(ctx, memcmp(recv, Reference(s.type, s.op, n, count).data(), count * es) == 0)
            << what;
      } else if (coll == "broadcast" || coll == "reduce") {
        for (int root : {0, n - 1, n / 2}) {
          const std::string w = Describe(coll, algo, s, in_place, root);
          auto buf = Fill(s.type, coll == "reduce" ? s.op : batonSum, rank, n, count);
          std::vector<uint8_t> out(buf.size(), 0xee);
          uint8_t* recv = in_place ? buf.data() : out.data();
          if (coll == "broadcast") {
            MP_EXPECT_OK(ctx, batonBroadcast(buf.data(), recv, count, s.type, root, comm, nullptr))
                << w;
            auto want = Fill(s.type, batonSum, root, n, count);
            MP_EXPECT_TRUE(ctx, memcmp(recv, want.data(), count * es) == 0) << w;
          } else {
            MP_EXPECT_OK(ctx,
                         batonReduce(buf.data(), recv, count, s.type, s.op, root, comm, nullptr))
                << w;
            if (rank == root)
              MP_EXPECT_TRUE(
                  ctx, memcmp(recv, Reference(s.type, s.op, n, count).data(), count * es) == 0)
                  << w;
          }
        }
      } else if (coll == "allgather") {
        std::vector<uint8_t> out(count * es * n + 1, 0xee);
        auto mine = Fill(s.type, batonSum, rank, n, count);
        uint8_t* send = mine.data();
        if (in_place) {
          memcpy(out.data() + rank * count * es, mine.data(), count * es);
          send = out.data() + rank * count * es;
        }
        MP_EXPECT_OK(ctx, batonAllGather(send, out.data(), count, s.type, comm, nullptr)) << what;
        for (int r = 0; r < n; ++r) {
          auto want = Fill(s.type, batonSum, r, n, count);
          MP_EXPECT_TRUE(ctx, memcmp(out.data() + r * count * es, want.data(), count * es) == 0)
              << what << " block " << r;
        }
      } else if (coll == "reducescatter") {
        auto in = Fill(s.type, s.op, rank, n, count * n);
        std::vector<uint8_t> out(count * es + 1, 0xee);
        uint8_t* recv = in_place ? in.data() + rank * count * es : out.data();
        MP_EXPECT_OK(ctx, batonReduceScatter(in.data(), recv, count, s.type, s.op, comm, nullptr))
            << what;
        auto want = Reference(s.type, s.op, n, count, rank * count);
        MP_EXPECT_TRUE(ctx, memcmp(recv, want.data(), count * es) == 0) << what;
      } else if (coll == "alltoall") {
        // Block b of rank r's input is element values r*1000 + b*count + i.
        std::vector<int32_t> in(count * n), out(count * n, -1);
        for (size_t i = 0; i < in.size(); ++i) in[i] = rank * 1000 + static_cast<int32_t>(i);
        int32_t* recv = in_place ? in.data() : out.data();
        MP_EXPECT_OK(ctx, batonAlltoAll(in.data(), recv, count, batonInt32, comm, nullptr)) << what;
        for (int r = 0; r < n; ++r)
          for (size_t i = 0; i < count; ++i)
            if (recv[r * count + i] != r * 1000 + static_cast<int32_t>(rank * count + i)) {
              MP_ADD_FAILURE(ctx) << what << " block " << r << " element " << i;
              break;
            }
      }
      if (ctx.failed()) return;
    }
  }
}

class AlgorithmsTest : public ::testing::TestWithParam<std::tuple<int, const char*>> {};

TEST_P(AlgorithmsTest, EveryCollectiveWithEveryAlgorithm) {
  const int n = std::get<0>(GetParam());
  const std::string transport = std::get<1>(GetParam());
  Options options;
  options.init_comm = false;
  options.unique_id = false;
  options.extra_ids = static_cast<int>(std::size(kAlgorithmNames));
  // "hostsK": rank r on simulated host r mod K, connected over TCP.
  const int hosts = transport.rfind("hosts", 0) == 0 ? std::stoi(transport.substr(5)) : 1;
  options.env = {{"BATON_TRANSPORT", hosts > 1 ? "auto" : transport}};
  options.deadline = std::chrono::seconds(400);
  const bool uniform = n % hosts == 0;
  RunRanks(
      n,
      [&](RankContext& ctx) {
        if (hosts > 1) {
          const std::string host = "simulated-host-" + std::to_string(ctx.rank() % hosts);
          setenv("BATON_HOSTID", host.c_str(), 1);
        }
        for (size_t a = 0; a < std::size(kAlgorithmNames); ++a) {
          const std::string algo = kAlgorithmNames[a];
          setenv("BATON_ALGO", algo.c_str(), 1);
          batonComm_t comm = nullptr;
          MP_ASSERT_OK(ctx, batonCommInitRank(&comm, ctx.nranks(),
                                              ctx.extra_id(static_cast<int>(a)), ctx.rank()));
          for (const char* coll :
               {"allreduce", "broadcast", "reduce", "allgather", "reducescatter", "alltoall"})
            CheckCollective(ctx, comm, coll, algo, uniform);
          MP_EXPECT_OK(ctx, batonCommDestroy(comm));
          if (ctx.failed()) return;
        }
      },
      options);
}

std::string TestName(const ::testing::TestParamInfo<std::tuple<int, const char*>>& info) {
  return std::string(std::get<1>(info.param)) + "_" + std::to_string(std::get<0>(info.param)) +
         "ranks";
}

INSTANTIATE_TEST_SUITE_P(Ranks, AlgorithmsTest,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 5, 6, 7, 8, 9, 16),
                                            ::testing::Values("shm", "tcp")),
                         TestName);
// Hosts of 2, 3 and 4 ranks, one rank per host, and hosts of 3 and 2 ranks.
INSTANTIATE_TEST_SUITE_P(SimulatedHosts, AlgorithmsTest,
                         ::testing::Values(std::make_tuple(4, "hosts2"), std::make_tuple(9, "hosts3"),
                                           std::make_tuple(8, "hosts2"), std::make_tuple(3, "hosts3"),
                                           std::make_tuple(5, "hosts2")),
                         TestName);

}  // namespace
