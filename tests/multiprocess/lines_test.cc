// Small allreduces on the lines (comm/lines.cc): ranks that all share
// memory publish their inputs in their own segments and each reduces
// everyone's from there. 1 to 9 and 16 ranks, every datatype and op, counts
// 0, 1, odd and up to BATON_LINES_MAX_BYTES, in place and out of place,
// against a reference computed here in double, the same bits on every rank
// and the same bits as recursive doubling over the slots; buffers that move between repeated calls,
// on the NULL stream and a host stream; calls that disagree between ranks (sizes, datatypes, ops, a
// rank past the lines' limit or in another collective): every rank fails
// with batonInvalidUsage, never a hang or wrong numbers; a late rank named
// in the others' timeout; a killed rank; the switches that keep the slots.
// Each rank's log (BATON_DEBUG=INFO, set for this test) tells its path.
#include <baton.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
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
using baton_test::Options;
using baton_test::RankContext;
using baton_test::ResultName;
using baton_test::RunRanks;
using baton_test::SecondsSince;

constexpr char kTookLines[] = "lines allreduce:";
// The most the lines take, which the tests set (the default depends on the
// ranks per core; tests/unit/tuning_test.cc checks it).
constexpr size_t kLinesBytes = 32 << 10;
constexpr char kLinesLimit[] = "32K";

const batonDataType_t kAllTypes[] = {batonInt8,    batonUint8,    batonInt32,      batonUint32,
                                     batonInt64,   batonUint64,   batonFloat16,    batonFloat32,
                                     batonFloat64, batonBfloat16, batonFloat8e4m3, batonFloat8e5m2};

bool OpApplies(batonDataType_t type, batonRedOp_t op) {
  if (op == batonAvg) return IsFloat(type);
  // Products of 16 small inputs overflow the 8-bit and fp8 types.
  if (op == batonProd) return SizeOf(type) > 1;
  return true;
}

std::string Describe(batonDataType_t type, batonRedOp_t op, size_t count, bool in_place) {
  return "allreduce type=" + std::to_string(type) + " op=" + std::to_string(op) +
         " count=" + std::to_string(count) + (in_place ? " in place" : " out of place");
}

// One allreduce of `count` elements; *wrong counts the elements that differ
// from the reference, and the elements written past the end. The result's
// bytes go to *result.
batonResult_t RunAllReduce(RankContext& ctx, batonDataType_t type, batonRedOp_t op, size_t count,
                           bool in_place, size_t* wrong, std::vector<uint8_t>* result) {
  const int n = ctx.nranks(), r = ctx.rank();
  const size_t es = SizeOf(type);
  std::vector<uint8_t> send((count + 1) * es), recv_mem((count + 1) * es, 0xab);
  uint8_t* recv = in_place ? send.data() : recv_mem.data();
  for (size_t i = 0; i < count; ++i) Store(type, send.data(), i, SmallInput(type, r, i));
  const batonResult_t res = batonAllReduce(send.data(), recv, count, type, op, ctx.comm(), nullptr);
  *wrong = 0;
  if (res != batonSuccess) return res;
  for (size_t i = 0; i < count; ++i)
    *wrong += !CloseInType(type, Load(type, recv, i), SmallReduced(type, op, n, i));
  if (!in_place) *wrong += recv[count * es] != 0xab;
  result->insert(result->end(), recv, recv + count * es);
  return res;
}

// Every rank's bytes in `mine` (the same length everywhere) are the same.
void ExpectSameBitsEverywhere(RankContext& ctx, const std::vector<uint8_t>& mine) {
  const int n = ctx.nranks();
  if (n == 1 || mine.empty()) return;
  std::vector<uint8_t> all(mine.size() * n);
  MP_ASSERT_OK(
      ctx, batonAllGather(mine.data(), all.data(), mine.size(), batonUint8, ctx.comm(), nullptr));
  for (int q = 0; q < n; ++q)
    MP_EXPECT_TRUE(ctx, std::memcmp(all.data() + q * mine.size(), mine.data(), mine.size()) == 0)
        << "rank " << q << "'s results differ from rank " << ctx.rank() << "'s";
}

template <typename Body>
std::string WithComm(RankContext& ctx, Body body) {
  return CaptureLog([&] {
    batonComm_t comm = nullptr;
    MP_ASSERT_OK(ctx, batonCommInitRank(&comm, ctx.nranks(), ctx.id(), ctx.rank()));
    ctx.set_comm(comm);
    body();
    MP_EXPECT_OK(ctx, batonCommDestroy(ctx.TakeComm()));
  });
}

Options NoComm() {
  Options options;
  options.init_comm = false;
  options.env = {{"BATON_LINES_MAX_BYTES", kLinesLimit}};
  return options;
}

class Lines : public ::testing::TestWithParam<int> {};

TEST_P(Lines, EveryTypeAndOp) {
  RunRanks(
      GetParam(),
      [](RankContext& ctx) {
        const int n = ctx.nranks();
        std::vector<batonDataType_t> types(std::begin(kAllTypes), std::end(kAllTypes));
        // (fp8 sums of these inputs leave its precision beyond 4 ranks.)
        if (n > 4) types = {batonFloat32, batonInt32, batonBfloat16, batonFloat64};
        if (n > 9) types = {batonFloat32};
        const std::string log = WithComm(ctx, [&] {
          std::vector<uint8_t> results;
          for (batonDataType_t t : types) {
            const size_t es = SizeOf(t);
            for (batonRedOp_t op : {batonSum, batonProd, batonMax, batonMin, batonAvg}) {
              if (!OpApplies(t, op)) continue;
              // 0, 1, odd, a line's worth, the largest the lines take.
              for (size_t count : {size_t{0}, size_t{1}, size_t{3}, 32 / es, size_t{37} / es + 1,
                                   kLinesBytes / es}) {
                for (bool in_place : {false, true}) {
                  size_t wrong = 0;
                  const batonResult_t res =
                      RunAllReduce(ctx, t, op, count, in_place, &wrong, &results);
                  MP_ASSERT_OK(ctx, res)
                      << Describe(t, op, count, in_place) << ": " << ctx.LastError();
                  MP_ASSERT_TRUE(ctx, wrong == 0)
                      << wrong << " wrong elements in " << Describe(t, op, count, in_place);
                }
              }
            }
          }
          ExpectSameBitsEverywhere(ctx, results);
        });
        if (n > 1) MP_EXPECT_NE(ctx, log.find(kTookLines), std::string::npos) << "no lines call";
      },
      NoComm());
}

INSTANTIATE_TEST_SUITE_P(Ranks, Lines, ::testing::Values(1, 2, 3, 4, 5, 6, 7, 8, 9, 16));

// Inputs whose sum rounds differently in every order: the lines give the
// bits of recursive doubling over the slots (BATON_ALGO=allreduce:rhd keeps
// the calls there), for ranks that are a power of two and ranks that fold.
TEST(LinesBits, SameAsRecursiveDoublingOnTheSlots) {
  char dir[] = "/tmp/baton_lines_bits_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  for (int n : {2, 3, 4, 5, 6, 8}) {
    for (const char* algo : {"", "allreduce:rhd"}) {
      Options options;
      if (*algo != '\0') options.env = {{"BATON_ALGO", algo}};
      const bool lines = *algo == '\0';
      RunRanks(
          n,
          [&](RankContext& ctx) {
            std::vector<float> v(29);
            for (size_t i = 0; i < v.size(); ++i)
              v[i] = static_cast<float>((ctx.rank() * 7919 + i * 104729) % 1000) * 1.1e-3f +
                     (ctx.rank() % 2 ? 3e4f : -2.9e4f) + static_cast<float>(i) * 0.37f;
            std::vector<float> avg(v);
            MP_ASSERT_OK(ctx, batonAllReduce(v.data(), v.data(), v.size(), batonFloat32, batonSum,
                                             ctx.comm(), nullptr));
            MP_ASSERT_OK(ctx, batonAllReduce(avg.data(), avg.data(), avg.size(), batonFloat32,
                                             batonAvg, ctx.comm(), nullptr));
            v.insert(v.end(), avg.begin(), avg.end());
            const std::string path =
                std::string(dir) + "/" + std::to_string(n) + "_" + std::to_string(ctx.rank());
            if (lines) {
              FILE* f = fopen(path.c_str(), "wb");
              MP_ASSERT_TRUE(ctx, f != nullptr);
              fwrite(v.data(), sizeof(float), v.size(), f);
              fclose(f);
            } else {
              std::vector<float> theirs(v.size());
              FILE* f = fopen(path.c_str(), "rb");
              MP_ASSERT_TRUE(ctx, f != nullptr);
              MP_ASSERT_TRUE(
                  ctx, fread(theirs.data(), sizeof(float), theirs.size(), f) == theirs.size());
              fclose(f);
              unlink(path.c_str());
              MP_EXPECT_TRUE(ctx, std::memcmp(theirs.data(), v.data(), v.size() * 4) == 0)
                  << n << " ranks: the lines' bits differ from rhd's";
            }
          },
          options);
    }
  }
  rmdir(dir);
}

// A repeated call reuses its schedule with buffers that moved (the lines'
// pointers move with the schedule's), on the NULL stream and on a host
// stream; one past the limit in between takes the slots.
TEST(LinesRepeat, MovingBuffersAndStreams) {
  Options options;
  options.env = {{"BATON_LINES_MAX_BYTES", kLinesLimit}};
  RunRanks(
      3,
      [](RankContext& ctx) {
        const int n = ctx.nranks();
        batonStream_t stream = nullptr;
        MP_ASSERT_OK(ctx, batonStreamCreate(&stream));
        const size_t count = 24, big = kLinesBytes / sizeof(float) + 1;
        std::vector<float> buf(4 * big);
        for (int round = 0; round < 40; ++round) {
          const size_t at = static_cast<size_t>(round % 4) * big;
          const size_t c = round % 7 == 6 ? big : count;
          for (size_t i = 0; i < c; ++i) buf[at + i] = static_cast<float>(ctx.rank() + i + round);
          batonStream_t s = round % 2 == 0 ? nullptr : stream;
          MP_ASSERT_OK(ctx, batonAllReduce(buf.data() + at, buf.data() + at, c, batonFloat32,
                                           batonSum, ctx.comm(), s))
              << ctx.LastError();
          if (s != nullptr) MP_ASSERT_OK(ctx, batonStreamSynchronize(s));
          for (size_t i = 0; i < c; ++i) {
            const float want = static_cast<float>(n * (n - 1) / 2 + n * (i + round));
            MP_ASSERT_TRUE(ctx, buf[at + i] == want)
                << "round " << round << " element " << i << ": " << buf[at + i] << " want " << want;
          }
        }
        MP_EXPECT_OK(ctx, batonStreamDestroy(stream));
      },
      options);
}

enum class Odd { kCount, kDatatype, kOp, kPastLimit, kBroadcast, kPreMulSum };

const char* OddName(Odd o) {
  switch (o) {
    case Odd::kCount:
      return "count";
    case Odd::kDatatype:
      return "datatype";
    case Odd::kOp:
      return "op";
    case Odd::kPastLimit:
      return "past_limit";
    case Odd::kBroadcast:
      return "broadcast";
    case Odd::kPreMulSum:
      return "premulsum";
  }
  return "?";
}

// How the error names rank 1's call.
std::string OddWords(Odd odd) {
  switch (odd) {
    case Odd::kCount:
      return "(9 x float, sum)";
    case Odd::kDatatype:
      return "(8 x double, sum)";
    case Odd::kOp:
      return "(8 x float, max)";
    case Odd::kPastLimit:
      return "(" + std::to_string(kLinesBytes / sizeof(float) + 1) + " x float, sum)";
    case Odd::kBroadcast:
      return "broadcast #2 (8 x float, root 0)";
    case Odd::kPreMulSum:
      return "(8 x float, premulsum)";
  }
  return "?";
}

class LinesMismatch : public ::testing::TestWithParam<std::tuple<int, Odd>> {};

// Rank 1 calls something else than the others' 8-float sum (the lines): a
// call of another size, type or op on the lines too, or one the slots carry.
// Every rank fails with batonInvalidUsage within seconds, naming call #2.
TEST_P(LinesMismatch, EveryRankReportsIt) {
  const auto [nranks, odd] = GetParam();
  Options options;
  options.env = {{"BATON_TIMEOUT", "20"}, {"BATON_LINES_MAX_BYTES", kLinesLimit}};
  options.deadline = std::chrono::seconds(60);
  RunRanks(
      nranks,
      [odd = odd](RankContext& ctx) {
        std::vector<double> buf(kLinesBytes / sizeof(double) * 2, 1.0);
        MP_ASSERT_OK(ctx, batonAllReduce(buf.data(), buf.data(), 8, batonFloat32, batonSum,
                                         ctx.comm(), nullptr));
        const bool me = ctx.rank() == 1;
        size_t count = 8;
        batonDataType_t type = batonFloat32;
        batonRedOp_t op = batonSum;
        if (me && odd == Odd::kCount) count = 9;
        if (me && odd == Odd::kDatatype) type = batonFloat64;
        if (me && odd == Odd::kOp) op = batonMax;
        if (me && odd == Odd::kPastLimit) count = kLinesBytes / sizeof(float) + 1;
        if (me && odd == Odd::kPreMulSum) {
          float two = 2.0f;
          MP_ASSERT_OK(ctx, batonRedOpCreatePreMulSum(&op, &two, batonFloat32,
                                                      batonScalarHostImmediate, ctx.comm()));
        }
        const auto start = std::chrono::steady_clock::now();
        batonResult_t r =
            me && odd == Odd::kBroadcast
                ? batonBroadcast(buf.data(), buf.data(), count, type, 0, ctx.comm(), nullptr)
                : batonAllReduce(buf.data(), buf.data(), count, type, op, ctx.comm(), nullptr);
        if (r == batonSuccess)  // nothing to receive in its part: the next call says it
          r = batonAllReduce(buf.data(), buf.data(), 8, batonFloat32, batonSum, ctx.comm(),
                             nullptr);
        const double elapsed = SecondsSince(start);
        const std::string message = ctx.LastError();
        MP_EXPECT_EQ(ctx, r, batonInvalidUsage)
            << " (" << ResultName(r) << ") after " << elapsed << " s: " << message;
        MP_EXPECT_LT(ctx, elapsed, 5.0) << message;
        MP_EXPECT_NE(ctx, message.find("mismatch"), std::string::npos) << message;
        MP_EXPECT_NE(ctx, message.find("#2"), std::string::npos) << message;
        // Rank 1's call is named, however it ran (a peer's mailbox says it).
        MP_EXPECT_NE(ctx, message.find(OddWords(odd)), std::string::npos) << message;
        MP_EXPECT_OK(ctx, batonCommAbort(ctx.TakeComm()));
      },
      options);
}

INSTANTIATE_TEST_SUITE_P(All, LinesMismatch,
                         ::testing::Combine(::testing::Values(2, 3, 4),
                                            ::testing::Values(Odd::kCount, Odd::kDatatype, Odd::kOp,
                                                              Odd::kPastLimit, Odd::kBroadcast,
                                                              Odd::kPreMulSum)),
                         [](const auto& info) {
                           return std::to_string(std::get<0>(info.param)) + "_" +
                                  OddName(std::get<1>(info.param));
                         });

// The same call where rank 1 keeps the lines closed (BATON_LINES_MAX_BYTES=0)
// and the others open: a setting that differs between ranks, said as such.
TEST(LinesMismatch, LimitThatDiffersIsNamed) {
  for (int nranks : {2, 3}) {
    Options options;
    options.init_comm = false;
    options.env = {{"BATON_TIMEOUT", "20"}};
    options.deadline = std::chrono::seconds(60);
    RunRanks(
        nranks,
        [nranks](RankContext& ctx) {
          setenv("BATON_LINES_MAX_BYTES", ctx.rank() == 1 ? "0" : kLinesLimit, 1);
          batonComm_t comm = nullptr;
          MP_ASSERT_OK(ctx, batonCommInitRank(&comm, nranks, ctx.id(), ctx.rank()));
          ctx.set_comm(comm);
          std::vector<float> buf(8, 1.0f);
          const batonResult_t r =
              batonAllReduce(buf.data(), buf.data(), 8, batonFloat32, batonSum, comm, nullptr);
          const std::string message = ctx.LastError();
          MP_EXPECT_EQ(ctx, r, batonInvalidUsage) << " (" << ResultName(r) << "): " << message;
          MP_EXPECT_NE(ctx, message.find("both called allreduce #1 (8 x float, sum)"),
                       std::string::npos)
              << message;
          MP_EXPECT_NE(ctx, message.find("BATON_LINES_MAX_BYTES"), std::string::npos) << message;
          MP_EXPECT_OK(ctx, batonCommAbort(ctx.TakeComm()));
        },
        options);
  }
}

// Rank 2 is busy elsewhere past BATON_TIMEOUT: the others' timeout names it
// and its last call, as the slots' does.
TEST(LinesTimeout, NamesTheRankThatNeverCame) {
  Options options;
  options.env = {{"BATON_TIMEOUT", "3"}};
  options.deadline = std::chrono::seconds(60);
  RunRanks(
      3, [](RankContext& ctx) { baton_test::LateRankIsNamed(ctx, 16, 3, 2); }, options);
}

// A rank killed while the ranks run small allreduces: the survivors get an
// error within the timeout, not a hang.
TEST(LinesFailure, PeerKilledMidCall) {
  Options options = baton_test::FailureOptions("shm");
  options.expected_signal = {{2, SIGKILL}};
  RunRanks(
      3,
      [](RankContext& ctx) {
        std::vector<float> buf(8, 1.0f);
        if (ctx.rank() == 2) baton_test::RaiseSoon(SIGKILL);
        const auto start = std::chrono::steady_clock::now();
        batonResult_t r = batonSuccess;
        int iterations = 0;
        while (r == batonSuccess && SecondsSince(start) < 60) {
          r = batonAllReduce(buf.data(), buf.data(), buf.size(), batonFloat32, batonMax, ctx.comm(),
                             nullptr);
          ++iterations;
        }
        baton_test::ExpectFailedThenAbort(ctx, r, SecondsSince(start), iterations, false);
      },
      options);
}

// The slots instead: BATON_LINES_MAX_BYTES=0, or a BATON_ALGO choice for
// allreduce (which runs as asked).
TEST(LinesOff, SwitchAndForcedAlgorithm) {
  for (const char* var : {"BATON_LINES_MAX_BYTES=0", "BATON_ALGO=allreduce:ring"}) {
    Options options = NoComm();
    const std::string setting = var;
    options.env = {{setting.substr(0, setting.find('=')), setting.substr(setting.find('=') + 1)}};
    RunRanks(
        3,
        [](RankContext& ctx) {
          const std::string log = WithComm(ctx, [&] {
            std::vector<uint8_t> results;
            for (bool in_place : {false, true}) {
              size_t wrong = 0;
              MP_ASSERT_OK(ctx,
                           RunAllReduce(ctx, batonFloat32, batonSum, 5, in_place, &wrong, &results))
                  << ctx.LastError();
              MP_EXPECT_TRUE(ctx, wrong == 0);
            }
          });
          MP_EXPECT_EQ(ctx, log.find(kTookLines), std::string::npos) << "a lines call ran";
        },
        options);
  }
}

}  // namespace
