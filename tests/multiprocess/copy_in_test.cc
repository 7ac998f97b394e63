// The copy-in allreduce on ordinary buffers (comm/copy_in.cc): every rank
// copies its input into a stage of shared memory its peers map, they reduce
// there and each copies the result out. Forced on for every size
// (BATON_COPY_IN=1, BATON_COPY_IN_MIN_BYTES=1): 1 to 9 and 16 ranks, every
// datatype and op, counts 0, 1, odd and past the default range, in place and
// out of place, against a reference computed here in double; a stage that
// grows and shrinks between calls; ranks that mix registered and ordinary
// buffers; a rank whose stage its peers cannot map (the slots then carry
// every call); the defaults and the switch off; a peer killed mid-call.
// Each rank's log (BATON_DEBUG=INFO, set for this test) tells its path.
#include <baton.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <bit>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/mp_harness.h"
#include "common/rank_log.h"
#include "common/reference.h"
#include "multiprocess/failure_common.h"

namespace {

using baton_test::CaptureLog;
using baton_test::DropPtraceCapability;
using baton_test::Options;
using baton_test::RankContext;
using baton_test::RunRanks;

constexpr char kTookCopyIn[] = "copy-in allreduce:";
constexpr char kNotMapped[] = "they are not mapped";

const batonDataType_t kAllTypes[] = {batonInt8,    batonUint8,    batonInt32,      batonUint32,
                                     batonInt64,   batonUint64,   batonFloat16,    batonFloat32,
                                     batonFloat64, batonBfloat16, batonFloat8e4m3, batonFloat8e5m2};

// One allreduce on fresh vectors; *wrong counts the elements that differ
// from the reference. `send` and `recv` may be given (registered memory).
batonResult_t RunAllReduce(RankContext& ctx, batonDataType_t type, batonRedOp_t op, size_t count,
                           bool in_place, size_t* wrong, uint8_t* send = nullptr,
                           uint8_t* recv = nullptr) {
  const int n = ctx.nranks(), r = ctx.rank();
  const size_t es = SizeOf(type);
  std::vector<uint8_t> send_mem, recv_mem;
  if (send == nullptr) {
    send_mem.resize((count + 1) * es);
    recv_mem.resize((count + 1) * es, 0xab);
    send = send_mem.data();
    recv = recv_mem.data();
  }
  if (in_place) recv = send;
  for (size_t i = 0; i < count; ++i) Store(type, send, i, SmallInput(type, r, i));
  const batonResult_t res = batonAllReduce(send, recv, count, type, op, ctx.comm(), nullptr);
  *wrong = 0;
  if (res != batonSuccess) return res;
  for (size_t i = 0; i < count; ++i)
    *wrong += !CloseInType(type, Load(type, recv, i), SmallReduced(type, op, n, i));
  // Nothing past the end is written.
  if (!in_place && !recv_mem.empty()) *wrong += recv[count * es] != 0xab;
  return res;
}

std::string Describe(batonDataType_t type, batonRedOp_t op, size_t count, bool in_place) {
  return "allreduce type=" + std::to_string(type) + " op=" + std::to_string(op) +
         " count=" + std::to_string(count) + (in_place ? " in place" : " out of place");
}

bool OpApplies(batonDataType_t type, batonRedOp_t op) {
  if (op == batonAvg) return IsFloat(type);
  // Products of 16 small inputs overflow the 8-bit and fp8 types.
  if (op == batonProd) return SizeOf(type) > 1;
  return true;
}

void Sweep(RankContext& ctx, const std::vector<batonDataType_t>& types,
           const std::vector<size_t>& counts) {
  for (batonDataType_t t : types) {
    for (batonRedOp_t op : {batonSum, batonProd, batonMax, batonMin, batonAvg}) {
      if (!OpApplies(t, op)) continue;
      for (size_t count : counts) {
        for (bool in_place : {false, true}) {
          size_t wrong = 0;
          const batonResult_t res = RunAllReduce(ctx, t, op, count, in_place, &wrong);
          MP_ASSERT_OK(ctx, res) << Describe(t, op, count, in_place) << ": " << ctx.LastError();
          MP_ASSERT_TRUE(ctx, wrong == 0)
              << wrong << " wrong elements in " << Describe(t, op, count, in_place);
        }
      }
    }
  }
}

// The communicator made inside the capture, so its creation's lines count;
// from the test's unique id, or from its extra id `extra` (>= 0).
template <typename Body>
std::string WithComm(RankContext& ctx, Body body, int extra = -1) {
  return CaptureLog([&] {
    batonComm_t comm = nullptr;
    const batonUniqueId& id = extra < 0 ? ctx.id() : ctx.extra_id(extra);
    MP_ASSERT_OK(ctx, batonCommInitRank(&comm, ctx.nranks(), id, ctx.rank()));
    ctx.set_comm(comm);
    body();
    MP_EXPECT_OK(ctx, batonCommDestroy(ctx.TakeComm()));
  });
}

Options Forced() {
  Options options;
  options.init_comm = false;
  // Every size, whatever the ranks per core (the default: where they
  // outnumber the cores, from 16 KiB).
  options.env = {
      {"BATON_COPY_IN", "1"}, {"BATON_COPY_IN_MIN_BYTES", "1"}, {"BATON_COPY_IN_MAX_BYTES", "1G"}};
  return options;
}

class CopyIn : public ::testing::TestWithParam<int> {};

TEST_P(CopyIn, EveryTypeAndOp) {
  RunRanks(
      GetParam(),
      [](RankContext& ctx) {
        const int n = ctx.nranks();
        // Every type up to 4 ranks; the kernels are the same at every rank
        // count, and 9 or 16 processes on a small machine are slow.
        std::vector<batonDataType_t> types(std::begin(kAllTypes), std::end(kAllTypes));
        if (n > 4) types = {batonFloat32, batonInt32, batonBfloat16};
        if (n > 9) types = {batonFloat32};
        // 2 MiB + 12 B of float (three segments of the stage) up to 4 ranks.
        const std::vector<size_t> counts =
            n <= 4 ? std::vector<size_t>{0, 1, 1001, 70001, (size_t{1} << 19) + 3}
                   : std::vector<size_t>{0, 1, 1001, 70001};
        const std::string log = WithComm(ctx, [&] { Sweep(ctx, types, counts); });
        if (n > 1) MP_EXPECT_NE(ctx, log.find(kTookCopyIn), std::string::npos) << "no copy-in call";
        MP_EXPECT_EQ(ctx, log.find(kNotMapped), std::string::npos);
      },
      Forced());
}

INSTANTIATE_TEST_SUITE_P(Ranks, CopyIn, ::testing::Values(1, 2, 3, 4, 5, 6, 7, 8, 9, 16));

// One communicator, sizes up and down: the stage grows (peers map the new
// one) and later calls reuse it.
TEST(CopyInStage, GrowsAndIsReused) {
  RunRanks(
      3,
      [](RankContext& ctx) {
        WithComm(ctx, [&] {
          for (size_t count : {size_t{5}, size_t{70001}, size_t{1001}, (size_t{1} << 20) + 7,
                               size_t{3}, (size_t{1} << 18) + 1}) {
            for (int repeat = 0; repeat < 3; ++repeat) {
              size_t wrong = 0;
              MP_ASSERT_OK(ctx,
                           RunAllReduce(ctx, batonFloat32, batonSum, count, repeat == 1, &wrong))
                  << ctx.LastError();
              MP_ASSERT_TRUE(ctx, wrong == 0) << wrong << " wrong at count " << count;
            }
          }
        });
      },
      Forced());
}

// Rank 0 passes registered memory (read in place), the others ordinary
// buffers (copied into their stages): one call over both kinds where it
// fits one segment of the stages, the slots for a larger one.
TEST(CopyInMixed, OneRankRegistered) {
  Options options = Forced();
  options.env.push_back({"BATON_REGISTERED_MIN_BYTES", "1"});
  RunRanks(
      3,
      [](RankContext& ctx) {
        WithComm(ctx, [&] {
          const size_t count = (size_t{1} << 20) + 7, bytes = count * sizeof(float);
          void* send = nullptr;
          void* recv = nullptr;
          void* hs = nullptr;
          void* hr = nullptr;
          const bool registered = ctx.rank() == 0;
          std::vector<uint8_t> send_mem(bytes + 4), recv_mem(bytes + 4);
          if (registered) {
            MP_ASSERT_OK(ctx, batonMemAlloc(&send, bytes));
            MP_ASSERT_OK(ctx, batonMemAlloc(&recv, bytes));
            MP_ASSERT_OK(ctx, batonCommRegister(ctx.comm(), send, bytes, &hs));
            MP_ASSERT_OK(ctx, batonCommRegister(ctx.comm(), recv, bytes, &hr));
          } else {
            send = send_mem.data();
            recv = recv_mem.data();
          }
          for (size_t part : {size_t{70001}, count}) {
            for (bool in_place : {false, true, false}) {
              size_t wrong = 0;
              MP_ASSERT_OK(ctx,
                           RunAllReduce(ctx, batonFloat32, batonSum, part, in_place, &wrong,
                                        static_cast<uint8_t*>(send), static_cast<uint8_t*>(recv)))
                  << ctx.LastError();
              MP_ASSERT_TRUE(ctx, wrong == 0) << wrong << " wrong at count " << part;
            }
          }
          if (registered) {
            MP_EXPECT_OK(ctx, batonCommDeregister(ctx.comm(), hs));
            MP_EXPECT_OK(ctx, batonCommDeregister(ctx.comm(), hr));
            MP_EXPECT_OK(ctx, batonMemFree(send));
            MP_EXPECT_OK(ctx, batonMemFree(recv));
          }
        });
      },
      options);
}

// Rank 1 is not dumpable and nobody holds CAP_SYS_PTRACE, so its peers
// cannot open its stage through /proc: the first call settles that on every
// rank, one line each, and every call takes the slots with right results.
TEST(CopyInRefused, NonDumpableRank) {
  for (int n : {2, 4}) {
    RunRanks(
        n,
        [](RankContext& ctx) {
          MP_ASSERT_TRUE(ctx, DropPtraceCapability()) << strerror(errno);
          if (ctx.rank() == 1) MP_ASSERT_TRUE(ctx, prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0);
          const std::string log = WithComm(ctx, [&] {
            Sweep(ctx, {batonFloat32, batonInt64}, {1, 1001, 70001});
          });
          MP_EXPECT_NE(ctx, log.find(kNotMapped), std::string::npos) << "no refusal line";
          MP_EXPECT_EQ(ctx, log.find(kNotMapped), log.rfind(kNotMapped)) << "more than one line";
          MP_EXPECT_EQ(ctx, log.find(kTookCopyIn), std::string::npos) << "a copy-in call ran";
        },
        Forced());
  }
}

// The defaults: copy-in only where the ranks outnumber the cores, and only
// from 16 KiB (below: the slots). With twice the largest power of two of
// the cores, rhd's fold leaves more ranks than cores too (below).
TEST(CopyInDefault, WhereRanksOutnumberCores) {
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  const int crowded = 2 * static_cast<int>(std::bit_floor(static_cast<unsigned long>(cores)));
  for (int n : {2, crowded}) {
    Options options;
    options.init_comm = false;
    options.extra_ids = 1;
    RunRanks(
        n,
        [cores](RankContext& ctx) {
          // Up to 4 KiB of float: below the range.
          std::string log = WithComm(ctx, [&] { Sweep(ctx, {batonFloat32}, {1, 1001}); });
          MP_EXPECT_EQ(ctx, log.find(kTookCopyIn), std::string::npos) << "below the range";
          // 280 KiB and 4 MiB (several segments): inside, which has no end.
          log = WithComm(
              ctx,
              [&] {
                Sweep(ctx, {batonFloat32}, {70001, (size_t{1} << 20) + 3});
              },
              0);
          if (ctx.nranks() > cores)
            MP_EXPECT_NE(ctx, log.find(kTookCopyIn), std::string::npos) << "no copy-in call";
          else
            MP_EXPECT_EQ(ctx, log.find(kTookCopyIn), std::string::npos) << "a rank per core";
        },
        options);
  }
}

// Where rhd's power of two fits the cores (3 ranks on 2), rhd takes the
// sizes copy-in would below what FoldedRhdMaxBytes allows, which each
// rank's log says; copy-in from there.
TEST(CopyInDefault, FoldedRanksTakeRhd) {
  const int cores = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  const int n = cores + 1;
  if (std::bit_floor(static_cast<unsigned>(n)) > static_cast<unsigned>(cores))
    GTEST_SKIP() << n << " ranks fold to " << n - 1 << ", more than the cores";
  Options options;
  options.init_comm = false;
  RunRanks(
      n,
      [](RankContext& ctx) {
        // 280 KiB: below 8 MiB, the limit with a 32 MiB cache on 2 cores.
        const std::string log = WithComm(ctx, [&] { Sweep(ctx, {batonFloat32}, {70001}); });
        constexpr char kFolded[] = "takes rhd, not copy-in or the model's choice";
        const size_t at = log.find(kFolded);
        if (at == std::string::npos) {  // no cache size known: copy-in as before
          MP_EXPECT_NE(ctx, log.find(kTookCopyIn), std::string::npos) << log;
          return;
        }
        const size_t below = std::stoull(log.substr(log.rfind("below ", at) + 6));
        if (below > 70001 * sizeof(float))
          MP_EXPECT_EQ(ctx, log.find(kTookCopyIn), std::string::npos) << "copy-in below " << below;
        else
          MP_EXPECT_NE(ctx, log.find(kTookCopyIn), std::string::npos)
              << "no copy-in from " << below;
      },
      options);
}

// A BATON_ALGO choice for allreduce runs as asked: the default then leaves
// the copy-in path alone (BATON_COPY_IN=1 would still take it).
TEST(CopyInDefault, ForcedAlgorithmRunsAsAsked) {
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  Options options;
  options.init_comm = false;
  options.env = {{"BATON_ALGO", "allreduce:ring"}};
  RunRanks(
      static_cast<int>(cores) + 1,
      [](RankContext& ctx) {
        const std::string log = WithComm(ctx, [&] { Sweep(ctx, {batonFloat32}, {70001}); });
        MP_EXPECT_EQ(ctx, log.find(kTookCopyIn), std::string::npos);
      },
      options);
}

// Rank 2 is busy elsewhere past BATON_TIMEOUT while the others wait for its
// record: their timeout names it and its last call, as the slots' does.
TEST(CopyInTimeout, NamesTheRankThatNeverCame) {
  Options options = Forced();
  options.init_comm = true;
  options.env.push_back({"BATON_TIMEOUT", "3"});
  options.deadline = std::chrono::seconds(60);
  RunRanks(
      3, [](RankContext& ctx) { baton_test::LateRankIsNamed(ctx, 4096, 3, 2); }, options);
}

// BATON_COPY_IN=0: the slots.
TEST(CopyInOff, Switch) {
  Options options = Forced();
  options.env.push_back({"BATON_COPY_IN", "0"});
  RunRanks(
      3,
      [](RankContext& ctx) {
        const std::string log = WithComm(ctx, [&] { Sweep(ctx, {batonFloat32}, {1, 70001}); });
        MP_EXPECT_EQ(ctx, log.find(kTookCopyIn), std::string::npos);
      },
      options);
}

// A rank killed while the ranks run copy-in allreduces: the survivors get
// an error within the timeout, not a hang.
TEST(CopyInFailure, PeerKilledMidCall) {
  Options options = baton_test::FailureOptions("shm");
  options.expected_signal = {{2, SIGKILL}};
  options.env.push_back({"BATON_COPY_IN", "1"});
  RunRanks(
      3,
      [](RankContext& ctx) {
        const size_t count = size_t{1} << 18;  // 1 MiB of float
        std::vector<float> buf(count, 1.0f);
        if (ctx.rank() == 2) baton_test::RaiseSoon(SIGKILL);
        const auto start = std::chrono::steady_clock::now();
        batonResult_t r = batonSuccess;
        int iterations = 0;
        while (r == batonSuccess && baton_test::SecondsSince(start) < 60) {
          r = batonAllReduce(buf.data(), buf.data(), count, batonFloat32, batonMax, ctx.comm(),
                             nullptr);
          ++iterations;
        }
        baton_test::ExpectFailedThenAbort(ctx, r, baton_test::SecondsSince(start), iterations,
                                          false);
      },
      options);
}

}  // namespace
