// batonRedOpCreatePreMulSum end to end: allreduce, reduce and reducescatter
// with a PreMulSum op whose scalar differs per rank, over shm and TCP, for
// float, integer, 16-bit and fp8 datatypes, against a reference computed
// here (sum over ranks of scalar_r * x_r, in double, on inputs for which
// every product and partial sum is exact in the datatype); device
// residence read at each call; and the argument errors (destroyed,
// foreign, wrong datatype).
#include <baton.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "algorithms/collective.h"
#include "common/mp_harness.h"
#include "common/reference.h"

namespace {

using baton_test::Options;
using baton_test::RankContext;
using baton_test::RunRanks;

constexpr batonDataType_t kTypes[] = {batonFloat32,  batonFloat64,    batonFloat16,
                                      batonBfloat16, batonFloat8e4m3, batonFloat8e5m2,
                                      batonInt32,    batonUint8,      batonInt64};

bool IsFp8(batonDataType_t t) {
  return t == batonFloat8e4m3 || t == batonFloat8e5m2;
}

// Rank r's scalar: 0.5, 1, 2 or -1 for the wider floats (products and
// 7-rank sums stay exact even in bf16), 1 or 2 for fp8, 1..3 for integers.
double Scalar(batonDataType_t t, int r) {
  if (IsFp8(t)) return r % 2 + 1;
  if (IsFloat(t)) {
    static const double kScalars[] = {0.5, 1, 2, -1};
    return kScalars[r % 4];
  }
  return r % 3 + 1;
}

// Element i of rank r's input: small integers; for fp8 only two ranks per
// element are nonzero (+-1), so partial sums stay within [-4, 4].
double Input(batonDataType_t t, int r, int n, size_t i) {
  if (IsFp8(t)) {
    const bool contributes = static_cast<int>(i % n) == r || static_cast<int>((i + 2) % n) == r;
    return contributes ? ((i / n + r) % 2 ? 1 : -1) : 0;
  }
  const double v = static_cast<double>((r * 5 + i * 3) % 5);
  return IsUnsigned(t) ? v : v - 2;
}

// The reference: plain loops in double.
double Expected(batonDataType_t t, int n, size_t i) {
  double acc = 0;
  for (int r = 0; r < n; ++r) acc += Scalar(t, r) * Input(t, r, n, i);
  return acc;
}

std::vector<uint8_t> Fill(batonDataType_t t, int r, int n, size_t count, size_t first = 0) {
  std::vector<uint8_t> v(count * SizeOf(t) + 1);
  for (size_t i = 0; i < count; ++i) Store(t, v.data(), i, Input(t, r, n, first + i));
  return v;
}

// Counts elements [0, count) of got that differ from Expected(first + i).
size_t Wrong(batonDataType_t t, int n, const uint8_t* got, size_t count, size_t first = 0) {
  std::vector<uint8_t> want(SizeOf(t));
  size_t wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    Store(t, want.data(), 0, Expected(t, n, first + i));
    wrong += memcmp(want.data(), got + i * SizeOf(t), SizeOf(t)) != 0;
  }
  return wrong;
}

batonRedOp_t MakeOp(RankContext& ctx, batonDataType_t t, batonScalarResidence_t residence,
                    void* scalar) {
  Store(t, static_cast<uint8_t*>(scalar), 0, Scalar(t, ctx.rank()));
  batonRedOp_t op = batonSum;
  MP_EXPECT_OK(ctx, batonRedOpCreatePreMulSum(&op, scalar, t, residence, ctx.comm()));
  MP_EXPECT_TRUE(ctx, static_cast<int>(op) >= batonNumOps);
  return op;
}

void Collectives(RankContext& ctx, batonStream_t stream) {
  const int rank = ctx.rank(), n = ctx.nranks();
  for (batonDataType_t t : kTypes) {
    uint64_t scalar = 0;  // storage for any datatype's scalar
    const batonRedOp_t op = MakeOp(ctx, t, batonScalarHostImmediate, &scalar);
    scalar = 0;  // read at creation: changing it now must not matter
    const size_t es = SizeOf(t);
    for (size_t count : {size_t{0}, size_t{7}, size_t{4099}}) {
      for (bool in_place : {false, true}) {
        const std::string what = "type " + std::to_string(t) + " count " + std::to_string(count) +
                                 (in_place ? " in place" : "");
        ctx.SetStep("premulsum " + what);
        // Allreduce.
        std::vector<uint8_t> send = Fill(t, rank, n, count), recv(count * es + 1);
        const void* src = in_place ? static_cast<const void*>(recv.data()) : send.data();
        if (in_place) recv = send;
        MP_EXPECT_OK(ctx, batonAllReduce(src, recv.data(), count, t, op, ctx.comm(), stream));
        // Reduce to the last rank.
        const int root = n - 1;
        std::vector<uint8_t> rsend = Fill(t, rank, n, count), rrecv(count * es + 1);
        if (in_place && rank == root) rrecv = rsend;
        const void* rsrc = in_place && rank == root ? rrecv.data() : rsend.data();
        MP_EXPECT_OK(ctx, batonReduce(rsrc, rrecv.data(), count, t, op, root, ctx.comm(), stream));
        // Reduce-scatter: count per rank.
        std::vector<uint8_t> ssend = Fill(t, rank, n, count * n), srecv(count * es + 1);
        void* sdst = in_place ? ssend.data() + rank * count * es : srecv.data();
        MP_EXPECT_OK(ctx, batonReduceScatter(ssend.data(), sdst, count, t, op, ctx.comm(), stream));
        if (stream != nullptr) MP_EXPECT_OK(ctx, batonStreamSynchronize(stream));
        MP_EXPECT_EQ(ctx, Wrong(t, n, recv.data(), count), 0u) << " allreduce " << what;
        if (rank == root)
          MP_EXPECT_EQ(ctx, Wrong(t, n, rrecv.data(), count), 0u) << " reduce " << what;
        if (!in_place || rank != root) {
          // The input is the caller's: scaling must not touch it.
          MP_EXPECT_EQ(ctx, memcmp(rsend.data(), Fill(t, rank, n, count).data(), count * es), 0)
              << " reduce input modified " << what;
        }
        MP_EXPECT_EQ(ctx, Wrong(t, n, static_cast<const uint8_t*>(sdst), count, rank * count), 0u)
            << " reducescatter " << what;
      }
    }
    MP_EXPECT_OK(ctx, batonRedOpDestroy(op, ctx.comm()));
  }
}

// batonScalarDevice: the scalar is read when each call runs (here host
// memory, which Baton accepts without a GPU), so a new value applies to
// the next call.
void DeviceResidence(RankContext& ctx) {
  const int rank = ctx.rank(), n = ctx.nranks();
  float scalar = 0;
  batonRedOp_t op = batonSum;
  MP_ASSERT_OK(
      ctx, batonRedOpCreatePreMulSum(&op, &scalar, batonFloat32, batonScalarDevice, ctx.comm()));
  for (float s : {1.0f, 3.0f, -0.5f}) {
    scalar = s;
    float x = static_cast<float>(rank + 1), out = 0;
    MP_EXPECT_OK(ctx, batonAllReduce(&x, &out, 1, batonFloat32, op, ctx.comm(), nullptr));
    MP_EXPECT_EQ(ctx, out, s * static_cast<float>(n * (n + 1) / 2)) << " scalar " << s;
  }
  MP_EXPECT_OK(ctx, batonRedOpDestroy(op, ctx.comm()));
}

class PreMulSumTest : public ::testing::TestWithParam<std::tuple<int, const char*>> {};

TEST_P(PreMulSumTest, AllReduceReduceReduceScatter) {
  const auto [nranks, transport] = GetParam();
  Options options;
  options.env = {{"BATON_TRANSPORT", transport}};
  RunRanks(
      nranks,
      [](RankContext& ctx) {
        batonStream_t stream = nullptr;
        MP_ASSERT_OK(ctx, batonStreamCreate(&stream));
        Collectives(ctx, ctx.rank() % 2 ? stream : nullptr);
        MP_EXPECT_OK(ctx, batonStreamDestroy(stream));
        DeviceResidence(ctx);
      },
      options);
}

INSTANTIATE_TEST_SUITE_P(Ranks, PreMulSumTest,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 7),
                                            ::testing::Values("shm", "tcp")),
                         [](const auto& info) {
                           return std::string(std::get<1>(info.param)) + "_" +
                                  std::to_string(std::get<0>(info.param)) + "ranks";
                         });

// Every algorithm family (BATON_ALGO) that implements allreduce, reduce or
// reduce-scatter, each on its own communicator: the scaling is fused into
// whichever steps of its schedule read the input (launch/premul.h), so each
// family is checked, at sizes 0, 1, odd and large (many chunks), in and
// out of place, against the same reference.
void EveryAlgorithm(RankContext& ctx, bool uniform_hosts) {
  const int rank = ctx.rank(), n = ctx.nranks();
  const char* kAlgos[] = {"ring", "rhd", "tree", "binomial", "hier"};
  const char* kColls[] = {"allreduce", "reduce", "reducescatter"};
  struct Shape {
    batonDataType_t type;
    size_t count;
  };
  const Shape kShapes[] = {{batonFloat32, 0},     {batonFloat32, 1}, {batonFloat32, 7},
                           {batonFloat32, 70001}, {batonInt32, 301}, {batonFloat16, 301},
                           {batonUint8, 33},      {batonBfloat16, 9}};
  for (size_t a = 0; a < std::size(kAlgos); ++a) {
    const std::string algo = kAlgos[a];
    if (algo == "hier" && !uniform_hosts) continue;
    setenv("BATON_ALGO", algo.c_str(), 1);
    batonComm_t comm = nullptr;
    MP_ASSERT_OK(ctx, batonCommInitRank(&comm, n, ctx.extra_id(static_cast<int>(a)), ctx.rank()));
    for (const char* coll : kColls) {
      baton::Collective c;
      baton::Algorithm al;
      if (!baton::CollectiveFromName(coll, &c) || !baton::AlgorithmFromName(algo.c_str(), &al) ||
          !baton::Implements(c, al))
        continue;
      for (const Shape& shape : kShapes) {
        const batonDataType_t t = shape.type;
        const size_t count = shape.count, es = SizeOf(t);
        uint64_t scalar = 0;
        Store(t, reinterpret_cast<uint8_t*>(&scalar), 0, Scalar(t, rank));
        batonRedOp_t op = batonSum;
        MP_ASSERT_OK(ctx,
                     batonRedOpCreatePreMulSum(&op, &scalar, t, batonScalarHostImmediate, comm));
        for (bool in_place : {false, true}) {
          const std::string what = std::string(coll) + "/" + algo + " type " + std::to_string(t) +
                                   " count " + std::to_string(count) +
                                   (in_place ? " in place" : "");
          ctx.SetStep(what);
          const std::string cs = coll;
          const int root = n / 2;
          const size_t total = count * (cs == "reducescatter" ? n : 1);
          std::vector<uint8_t> in = Fill(t, rank, n, total), out(count * es + 1, 0xee);
          const std::vector<uint8_t> original = in;
          uint8_t* recv =
              in_place ? in.data() + (cs == "reducescatter" ? rank * count * es : 0) : out.data();
          if (cs == "allreduce") {
            MP_EXPECT_OK(ctx, batonAllReduce(in.data(), recv, count, t, op, comm, nullptr)) << what;
          } else if (cs == "reduce") {
            MP_EXPECT_OK(ctx, batonReduce(in.data(), recv, count, t, op, root, comm, nullptr))
                << what;
          } else {
            MP_EXPECT_OK(ctx, batonReduceScatter(in.data(), recv, count, t, op, comm, nullptr))
                << what;
          }
          if (cs != "reduce" || rank == root)
            MP_EXPECT_EQ(ctx, Wrong(t, n, recv, count, cs == "reducescatter" ? rank * count : 0),
                         0u)
                << what;
          if (!in_place)
            MP_EXPECT_EQ(ctx, memcmp(in.data(), original.data(), total * es), 0)
                << what << ": input modified";
          if (ctx.failed()) return;
        }
        MP_EXPECT_OK(ctx, batonRedOpDestroy(op, comm));
      }
    }
    MP_EXPECT_OK(ctx, batonCommDestroy(comm));
  }
}

class PreMulSumAlgorithmsTest : public ::testing::TestWithParam<std::tuple<int, const char*>> {};

TEST_P(PreMulSumAlgorithmsTest, EveryFamily) {
  const auto [nranks, transport] = GetParam();
  const std::string where = transport;
  // "hostsK": rank r on simulated host r mod K, connected over TCP.
  const int hosts = where.rfind("hosts", 0) == 0 ? std::stoi(where.substr(5)) : 1;
  Options options;
  options.init_comm = false;
  options.unique_id = false;
  options.extra_ids = 5;
  options.env = {{"BATON_TRANSPORT", hosts > 1 ? "auto" : transport}};
  RunRanks(
      nranks,
      [&](RankContext& ctx) {
        if (hosts > 1) {
          const std::string host = "simulated-host-" + std::to_string(ctx.rank() % hosts);
          setenv("BATON_HOSTID", host.c_str(), 1);
        }
        EveryAlgorithm(ctx, nranks % hosts == 0);
      },
      options);
}

INSTANTIATE_TEST_SUITE_P(Ranks, PreMulSumAlgorithmsTest,
                         ::testing::Values(std::make_tuple(1, "shm"), std::make_tuple(2, "shm"),
                                           std::make_tuple(3, "shm"), std::make_tuple(4, "shm"),
                                           std::make_tuple(5, "shm"), std::make_tuple(6, "tcp"),
                                           std::make_tuple(7, "shm"), std::make_tuple(8, "shm"),
                                           std::make_tuple(9, "shm"), std::make_tuple(16, "shm"),
                                           std::make_tuple(4, "hosts2"),
                                           std::make_tuple(9, "hosts3")),
                         [](const auto& info) {
                           return std::string(std::get<1>(info.param)) + "_" +
                                  std::to_string(std::get<0>(info.param)) + "ranks";
                         });

// Bad handles and arguments: batonInvalidArgument with a message, and the
// communicator stays usable.
TEST(PreMulSumErrors, InvalidArguments) {
  RunRanks(2, [](RankContext& ctx) {
    float s = 2.0f, x = 1.0f, y = 0;
    batonComm_t other = nullptr;
    MP_ASSERT_OK(ctx, batonCommSplit(ctx.comm(), 0, ctx.rank(), &other, nullptr));
    batonRedOp_t op = batonSum, foreign = batonSum;
    MP_ASSERT_OK(ctx, batonRedOpCreatePreMulSum(&op, &s, batonFloat32, batonScalarHostImmediate,
                                                ctx.comm()));
    MP_ASSERT_OK(ctx, batonRedOpCreatePreMulSum(&foreign, &s, batonFloat32,
                                                batonScalarHostImmediate, other));
    MP_EXPECT_NE(ctx, op, foreign);
    // Another communicator's op, here and when destroying.
    MP_EXPECT_EQ(ctx, batonAllReduce(&x, &y, 1, batonFloat32, foreign, ctx.comm(), nullptr),
                 batonInvalidArgument);
    MP_EXPECT_NE(ctx, std::string(batonGetLastError(ctx.comm())).find("not a live op"),
                 std::string::npos)
        << batonGetLastError(ctx.comm());
    MP_EXPECT_EQ(ctx, batonRedOpDestroy(foreign, ctx.comm()), batonInvalidArgument);
    // The op's datatype only.
    double d = 1;
    MP_EXPECT_EQ(ctx, batonAllReduce(&d, &d, 1, batonFloat64, op, ctx.comm(), nullptr),
                 batonInvalidArgument);
    // Built-in ops cannot be destroyed; bad creation arguments.
    MP_EXPECT_EQ(ctx, batonRedOpDestroy(batonSum, ctx.comm()), batonInvalidArgument);
    MP_EXPECT_EQ(
        ctx,
        batonRedOpCreatePreMulSum(&op, nullptr, batonFloat32, batonScalarHostImmediate, ctx.comm()),
        batonInvalidArgument);
    MP_EXPECT_EQ(ctx,
                 batonRedOpCreatePreMulSum(&op, &s, batonFloat32,
                                           static_cast<batonScalarResidence_t>(7), ctx.comm()),
                 batonInvalidArgument);
    MP_EXPECT_EQ(
        ctx,
        batonRedOpCreatePreMulSum(nullptr, &s, batonFloat32, batonScalarHostImmediate, ctx.comm()),
        batonInvalidArgument);
    MP_EXPECT_EQ(ctx,
                 batonRedOpCreatePreMulSum(&foreign, &s, batonNumTypes, batonScalarHostImmediate,
                                           ctx.comm()),
                 batonInvalidArgument);
    // Still usable, on both communicators; then destroyed, the op is gone.
    MP_EXPECT_OK(ctx, batonAllReduce(&x, &y, 1, batonFloat32, op, ctx.comm(), nullptr));
    MP_EXPECT_EQ(ctx, y, 4.0f);
    MP_EXPECT_OK(ctx, batonRedOpDestroy(op, ctx.comm()));
    MP_EXPECT_EQ(ctx, batonAllReduce(&x, &y, 1, batonFloat32, op, ctx.comm(), nullptr),
                 batonInvalidArgument);
    MP_EXPECT_EQ(ctx, batonRedOpDestroy(op, ctx.comm()), batonInvalidArgument);
    MP_EXPECT_OK(ctx, batonCommDestroy(other));
  });
}

}  // namespace
