// Collectives on registered buffers (batonMemAlloc + batonCommRegister on
// every rank): allreduce, reduce-scatter, allgather, broadcast and reduce
// for 1, 2, 3, 4, 7 and 9 ranks (more than one reduce-copy call per chunk), several datatypes and
// ops, counts 0, 1, odd and large, in place and out of place, against a reference computed here in
// double; one rank unregistered (the ordinary path, same result); TCP (no shared memory: the
// ordinary path); ranks that disagree on the call (the registered agreement's own error, which also
// shows that path ran); a peer killed during registered allreduces (an error on the survivors,
// never a hang); a rank in another pid namespace, whose memory its peers cannot map (every rank
// takes the ordinary path); BATON_ALGO choosing allreduce's algorithm (no registered path for
// it); the allreduce's rank-order sum, whatever piece of a vector a call reduces.
#include <baton.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/mp_harness.h"
#include "common/rank_log.h"
#include "common/reference.h"
#include "multiprocess/failure_common.h"

namespace {

using baton_test::Options;
using baton_test::RankContext;
using baton_test::RunRanks;

enum class Coll { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kReduce };
constexpr Coll kColls[] = {Coll::kAllReduce, Coll::kReduceScatter, Coll::kAllGather,
                           Coll::kBroadcast, Coll::kReduce};
const char* Name(Coll c) {
  static const char* kNames[] = {"allreduce", "reducescatter", "allgather", "broadcast", "reduce"};
  return kNames[static_cast<int>(c)];
}

struct Case {
  Coll coll;
  batonDataType_t type;
  batonRedOp_t op;
  size_t count;
  bool in_place;
  int root;
};

// Runs one case on `send_mem` / `recv_mem` (each big enough for n * count
// elements) and counts wrong elements.
batonResult_t RunCase(RankContext& ctx, const Case& c, uint8_t* send_mem, uint8_t* recv_mem,
                      size_t* wrong) {
  const int n = ctx.nranks(), r = ctx.rank();
  const size_t es = SizeOf(c.type), cnt = c.count;
  uint8_t* send = send_mem;
  uint8_t* recv = recv_mem;
  size_t in_count = cnt, in_first = 0;  // this rank's input: elements of the whole
  switch (c.coll) {
    case Coll::kReduceScatter:
      in_count = n * cnt;
      if (c.in_place) recv = send + r * cnt * es;
      break;
    case Coll::kAllGather:
      in_first = r * cnt;
      if (c.in_place) send = recv + r * cnt * es;
      break;
    default:
      if (c.in_place) recv = send;
  }
  for (size_t i = 0; i < in_count; ++i) Store(c.type, send, i, SmallInput(c.type, r, in_first + i));
  batonResult_t res = batonSuccess;
  batonComm_t comm = ctx.comm();
  switch (c.coll) {
    case Coll::kAllReduce:
      res = batonAllReduce(send, recv, cnt, c.type, c.op, comm, nullptr);
      break;
    case Coll::kReduceScatter:
      res = batonReduceScatter(send, recv, cnt, c.type, c.op, comm, nullptr);
      break;
    case Coll::kAllGather:
      res = batonAllGather(send, recv, cnt, c.type, comm, nullptr);
      break;
    case Coll::kBroadcast:
      res = batonBroadcast(send, recv, cnt, c.type, c.root, comm, nullptr);
      break;
    case Coll::kReduce:
      res = batonReduce(send, recv, cnt, c.type, c.op, c.root, comm, nullptr);
      break;
  }
  *wrong = 0;
  if (res != batonSuccess) return res;
  for (size_t i = 0; i < (c.coll == Coll::kAllGather ? n * cnt : cnt); ++i) {
    double want = 0;
    switch (c.coll) {
      case Coll::kAllReduce:
        want = SmallReduced(c.type, c.op, n, i);
        break;
      case Coll::kReduceScatter:
        want = SmallReduced(c.type, c.op, n, r * cnt + i);
        break;
      case Coll::kAllGather:
        want = SmallInput(c.type, static_cast<int>(i / cnt), i);
        break;
      case Coll::kBroadcast:
        want = SmallInput(c.type, c.root, i);
        break;
      case Coll::kReduce:
        if (r != c.root) return res;
        want = SmallReduced(c.type, c.op, n, i);
        break;
    }
    *wrong += !CloseInType(c.type, Load(c.type, recv, i), want);
  }
  return res;
}

std::string Describe(const Case& c) {
  return std::string(Name(c.coll)) + " type=" + std::to_string(c.type) +
         " op=" + std::to_string(c.op) + " count=" + std::to_string(c.count) +
         (c.in_place ? " in place" : " out of place") + " root=" + std::to_string(c.root);
}

// Every case on buffers of batonMemAlloc memory registered on the
// communicator; `registered(rank)` false: that rank passes plain memory.
void Sweep(RankContext& ctx, bool registered, const std::vector<size_t>& counts,
           std::span<const Coll> colls = kColls) {
  const int n = ctx.nranks();
  const size_t max_bytes = (counts.back() + 8) * 8 * n;
  uint8_t* send = nullptr;
  uint8_t* recv = nullptr;
  std::vector<uint8_t> plain_send, plain_recv;
  void* hs = nullptr;
  void* hr = nullptr;
  if (registered) {
    void* s = nullptr;
    void* r = nullptr;
    MP_ASSERT_OK(ctx, batonMemAlloc(&s, max_bytes));
    MP_ASSERT_OK(ctx, batonMemAlloc(&r, max_bytes));
    MP_ASSERT_OK(ctx, batonCommRegister(ctx.comm(), s, max_bytes, &hs));
    MP_ASSERT_OK(ctx, batonCommRegister(ctx.comm(), r, max_bytes, &hr));
    send = static_cast<uint8_t*>(s);
    recv = static_cast<uint8_t*>(r);
  } else {
    plain_send.resize(max_bytes);
    plain_recv.resize(max_bytes);
    send = plain_send.data();
    recv = plain_recv.data();
  }
  const batonDataType_t types[] = {batonFloat32,  batonFloat64, batonInt32,
                                   batonBfloat16, batonFloat16, batonUint8};
  for (Coll coll : colls) {
    for (batonDataType_t t : types) {
      for (batonRedOp_t op : {batonSum, batonMax, batonProd, batonAvg}) {
        const bool reduces = coll != Coll::kAllGather && coll != Coll::kBroadcast;
        if (!reduces && op != batonSum) continue;
        if (op == batonAvg && !IsFloat(t)) continue;
        if (op == batonProd && t == batonUint8) continue;  // wraps: not this test's subject
        for (size_t count : counts) {
          // The big count with the main type only: the sweep stays quick.
          if (count == counts.back() && (t != batonFloat32 || op == batonProd)) continue;
          for (bool in_place : {false, true}) {
            if (in_place && coll == Coll::kReduce) continue;
            const Case c{coll, t, op, count, in_place, static_cast<int>(count % n)};
            size_t wrong = 0;
            const batonResult_t res = RunCase(ctx, c, send, recv, &wrong);
            MP_ASSERT_OK(ctx, res) << Describe(c) << ": " << ctx.LastError();
            MP_ASSERT_TRUE(ctx, wrong == 0) << wrong << " wrong elements in " << Describe(c);
          }
        }
      }
    }
  }
  if (registered) {
    MP_EXPECT_OK(ctx, batonCommDeregister(ctx.comm(), hs));
    MP_EXPECT_OK(ctx, batonCommDeregister(ctx.comm(), hr));
    MP_EXPECT_OK(ctx, batonMemFree(send));
    MP_EXPECT_OK(ctx, batonMemFree(recv));
  }
}

const std::vector<size_t> kCounts = {0, 1, 1001, (size_t{1} << 20) + 3};

class Registered : public ::testing::TestWithParam<int> {};

// Every size on the registered path (the default sends small calls the
// ordinary way), and once with the default.
Options AllSizes() {
  Options options;
  options.env = {{"BATON_REGISTERED_MIN_BYTES", "1"}};
  return options;
}

TEST_P(Registered, EveryCollective) {
  RunRanks(
      GetParam(), [](RankContext& ctx) { Sweep(ctx, true, kCounts); }, AllSizes());
}

TEST(RegisteredDefault, SmallCallsOrdinaryLargeRegistered) {
  RunRanks(3, [](RankContext& ctx) { Sweep(ctx, true, kCounts); });
}

// The default threshold follows the ranks per core: 32 KiB with a core per
// rank, 64 KiB where ranks outnumber cores (each meeting of the registered
// path can cost a context switch there). Calls of at most 404 B a rank take
// the ordinary path in both; an allreduce, broadcast or reduce of 36 KiB is
// registered in the first case only, one of 80 KiB in both. The log
// (BATON_DEBUG=INFO, BATON_DEBUG_SUBSYS=COLL: tests/meson.build) tells the
// path: its line comes with a communicator's first registered call.
constexpr char kTookRegistered[] = "registered buffers:";
constexpr Coll kRooted[] = {Coll::kAllReduce, Coll::kBroadcast, Coll::kReduce};

TEST(RegisteredDefault, ThresholdFollowsRanksPerCore) {
  const char* level = getenv("BATON_DEBUG");
  ASSERT_TRUE(level != nullptr && std::string(level) == "INFO")
      << "run with BATON_DEBUG=INFO BATON_DEBUG_SUBSYS=COLL (as tests/meson.build does): the log "
         "tells the path";
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  for (int n : {2, static_cast<int>(cores) + 1}) {
    RunRanks(n, [cores](RankContext& ctx) {
      const bool crowded = ctx.nranks() > cores;
      std::string log = baton_test::CaptureLog([&] { Sweep(ctx, true, {1, 101}); });
      MP_EXPECT_EQ(ctx, log.find(kTookRegistered), std::string::npos) << "below 32 KiB";
      log = baton_test::CaptureLog([&] { Sweep(ctx, true, {9000}, kRooted); });
      if (crowded)
        MP_EXPECT_EQ(ctx, log.find(kTookRegistered), std::string::npos)
            << "36 KiB registered where ranks outnumber cores";
      else
        MP_EXPECT_NE(ctx, log.find(kTookRegistered), std::string::npos)
            << "36 KiB not registered with a core per rank";
      if (!crowded) return;
      log = baton_test::CaptureLog([&] { Sweep(ctx, true, {20000}, kRooted); });
      MP_EXPECT_NE(ctx, log.find(kTookRegistered), std::string::npos)
          << "80 KiB not registered where ranks outnumber cores";
    });
  }
}

// BATON_ALGO choosing allreduce's algorithm: allreduces run it as asked (no
// registered path), broadcasts, which it leaves open, still read in place.
TEST(RegisteredDefault, ForcedAlgorithmRunsAsAsked) {
  const char* level = getenv("BATON_DEBUG");
  ASSERT_TRUE(level != nullptr && std::string(level) == "INFO")
      << "run with BATON_DEBUG=INFO BATON_DEBUG_SUBSYS=COLL (as tests/meson.build does)";
  Options options;
  options.env = {{"BATON_ALGO", "allreduce:ring"}};
  RunRanks(
      3,
      [](RankContext& ctx) {
        constexpr Coll kAllReduceOnly[] = {Coll::kAllReduce};
        constexpr Coll kBroadcastOnly[] = {Coll::kBroadcast};
        std::string log = baton_test::CaptureLog([&] {
          Sweep(ctx, true, {20000, 70001}, kAllReduceOnly);
        });
        MP_EXPECT_EQ(ctx, log.find(kTookRegistered), std::string::npos)
            << "a forced allreduce algorithm took the registered path";
        log = baton_test::CaptureLog([&] { Sweep(ctx, true, {20000}, kBroadcastOnly); });
        MP_EXPECT_NE(ctx, log.find(kTookRegistered), std::string::npos)
            << "a broadcast, which BATON_ALGO leaves open, was not registered";
      },
      options);
}

// The registered allreduce reduces every element in rank order, whichever rank's
// part holds it: the result is the float sum x0 + x1 + ... left to right, bit for
// bit, and a vector reduced in two pieces equals the whole one (a trainer's buckets
// give the same model as one allreduce). Values of mixed magnitudes, so that
// another order rounds differently.
TEST(RegisteredAllReduce, RankOrderWhateverTheCut) {
  for (int n : {3, 4}) {
    RunRanks(n, [](RankContext& ctx) {
      const int ranks = ctx.nranks();
      constexpr size_t kCount = 70001, kCut = 20001;  // both pieces above 64 KiB
      auto value = [](int r, size_t i) {
        return 1.0f / static_cast<float>(3 + r + i % 11) + ((r + i) % 2 == 1 ? 1024.0f : 0.0f);
      };
      std::vector<float> want(kCount);
      for (size_t i = 0; i < kCount; ++i) {
        float sum = value(0, i);
        for (int r = 1; r < ranks; ++r) sum += value(r, i);
        want[i] = sum;
      }
      void *send = nullptr, *whole = nullptr, *pieces = nullptr;
      void *send_handle = nullptr, *whole_handle = nullptr, *pieces_handle = nullptr;
      const size_t bytes = kCount * sizeof(float);
      MP_ASSERT_OK(ctx, batonMemAlloc(&send, bytes));
      MP_ASSERT_OK(ctx, batonMemAlloc(&whole, bytes));
      MP_ASSERT_OK(ctx, batonMemAlloc(&pieces, bytes));
      MP_ASSERT_OK(ctx, batonCommRegister(ctx.comm(), send, bytes, &send_handle));
      MP_ASSERT_OK(ctx, batonCommRegister(ctx.comm(), whole, bytes, &whole_handle));
      MP_ASSERT_OK(ctx, batonCommRegister(ctx.comm(), pieces, bytes, &pieces_handle));
      auto* in = static_cast<float*>(send);
      for (size_t i = 0; i < kCount; ++i) in[i] = value(ctx.rank(), i);
      const std::string log = baton_test::CaptureLog([&] {
        MP_ASSERT_OK(
            ctx, batonAllReduce(in, whole, kCount, batonFloat32, batonSum, ctx.comm(), nullptr));
        auto* out = static_cast<float*>(pieces);
        MP_ASSERT_OK(ctx,
                     batonAllReduce(in, out, kCut, batonFloat32, batonSum, ctx.comm(), nullptr));
        MP_ASSERT_OK(ctx, batonAllReduce(in + kCut, out + kCut, kCount - kCut, batonFloat32,
                                         batonSum, ctx.comm(), nullptr));
      });
      MP_EXPECT_NE(ctx, log.find(kTookRegistered), std::string::npos)
          << "the allreduces were not registered";
      MP_EXPECT_EQ(ctx, std::memcmp(whole, want.data(), bytes), 0)
          << "the whole vector is not the rank-order float sum";
      MP_EXPECT_EQ(ctx, std::memcmp(pieces, whole, bytes), 0)
          << "two pieces differ from the whole vector";
      for (void* h : {send_handle, whole_handle, pieces_handle})
        MP_EXPECT_OK(ctx, batonCommDeregister(ctx.comm(), h));
      for (void* p : {send, whole, pieces}) MP_EXPECT_OK(ctx, batonMemFree(p));
    });
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, Registered, ::testing::Values(1, 2, 3, 4, 7, 9));

TEST(RegisteredMixed, OneRankUnregistered) {
  RunRanks(
      3,
      [](RankContext& ctx) {
        Sweep(ctx, ctx.rank() != 1, {0, 1, 1001, 70001});
      },
      AllSizes());
}

TEST(RegisteredMixed, OverTcp) {
  Options options;
  options.env = {{"BATON_TRANSPORT", "tcp"}, {"BATON_REGISTERED_MIN_BYTES", "1"}};
  RunRanks(
      3,
      [](RankContext& ctx) {
        Sweep(ctx, true, {1, 1001});
      },
      options);
}

// All ranks registered, rank 1 with another count: every rank fails with
// the registered agreement's message (the ordinary path words it
// differently), and the communicator stays failed.
TEST(RegisteredMismatch, CountsDiffer) {
  Options options;
  // (The lines off: they take small allreduces before the registered path.)
  options.env = {
      {"BATON_TIMEOUT", "20"}, {"BATON_REGISTERED_MIN_BYTES", "1"}, {"BATON_LINES_MAX_BYTES", "0"}};
  RunRanks(
      3,
      [](RankContext& ctx) {
        void* buf = nullptr;
        void* h = nullptr;
        MP_ASSERT_OK(ctx, batonMemAlloc(&buf, 1 << 16));
        MP_ASSERT_OK(ctx, batonCommRegister(ctx.comm(), buf, 1 << 16, &h));
        // A first call that agrees: the path works before the mismatch.
        MP_ASSERT_OK(ctx,
                     batonAllReduce(buf, buf, 640, batonFloat32, batonSum, ctx.comm(), nullptr));
        const size_t count = ctx.rank() == 1 ? 1000 : 640;
        const batonResult_t r =
            batonAllReduce(buf, buf, count, batonFloat32, batonSum, ctx.comm(), nullptr);
        MP_EXPECT_EQ(ctx, r, batonInvalidUsage);
        MP_EXPECT_NE(ctx, ctx.LastError().find("disagree on the call"), std::string::npos)
            << ctx.LastError();
        MP_EXPECT_NE(ctx, ctx.LastError().find("1000 x float"), std::string::npos)
            << ctx.LastError();
        batonComm_t comm = ctx.TakeComm();
        MP_EXPECT_OK(ctx, batonCommAbort(comm));
      },
      options);
}

// A rank killed while the ranks run large registered allreduces: the
// survivors get an error within the timeout.
TEST(RegisteredFailure, PeerKilledMidCall) {
  Options options = baton_test::FailureOptions("shm");
  options.expected_signal = {{2, SIGKILL}};
  RunRanks(
      3,
      [](RankContext& ctx) {
        const size_t count = baton_test::kLargeCount;
        void* buf = nullptr;
        void* h = nullptr;
        MP_ASSERT_OK(ctx, batonMemAlloc(&buf, count * sizeof(float)));
        MP_ASSERT_OK(ctx, batonCommRegister(ctx.comm(), buf, count * sizeof(float), &h));
        if (ctx.rank() == 2) baton_test::RaiseSoon(SIGKILL);
        const auto start = std::chrono::steady_clock::now();
        batonResult_t r = batonSuccess;
        int iterations = 0;
        while (r == batonSuccess && baton_test::SecondsSince(start) < 60) {
          r = batonAllReduce(buf, buf, count, batonFloat32, batonMax, ctx.comm(), nullptr);
          ++iterations;
        }
        baton_test::ExpectFailedThenAbort(ctx, r, baton_test::SecondsSince(start), iterations,
                                          false);
      },
      options);
}

// Whether this process may create a pid namespace (root, not confined).
bool CanUnsharePid() {
  const pid_t p = fork();
  if (p == 0) _exit(unshare(CLONE_NEWPID) == 0 ? 0 : 1);
  int status = 0;
  return p > 0 && waitpid(p, &status, 0) == p && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// Rank 1 in its own pid namespace: the pid in its records names another
// process (or none) for its peers, so they cannot map its memory, while it
// can map theirs. The first registered call settles that on every rank, and
// every call takes the ordinary path: right results, no error, no garbage
// read through a descriptor of the wrong process.
TEST(RegisteredReach, RankInAnotherPidNamespace) {
  if (!CanUnsharePid()) GTEST_SKIP() << "no permission to create a pid namespace";
  Options options = AllSizes();
  options.init_comm = false;
  RunRanks(
      3,
      [](RankContext& ctx) {
        const auto body = [&ctx] {
          batonComm_t comm = nullptr;
          MP_ASSERT_OK(ctx, batonCommInitRank(&comm, ctx.nranks(), ctx.id(), ctx.rank()));
          ctx.set_comm(comm);
          Sweep(ctx, true, {1, 1001, 70001});
          MP_EXPECT_OK(ctx, batonCommDestroy(ctx.TakeComm()));
        };
        if (ctx.rank() != 1) return body();
        // The namespace is made by a go-between that only forks: a process
        // that called unshare(CLONE_NEWPID) can no longer make threads
        // (LeakSanitizer's exit check needs one), its children can.
        const pid_t between = fork();
        if (between == 0) {
          if (unshare(CLONE_NEWPID) != 0) _exit(2);
          const pid_t child = fork();  // the first process of the new namespace
          if (child == 0) {
            body();
            _exit(0);
          }
          int status = 0;
          if (child < 0 || waitpid(child, &status, 0) != child) _exit(3);
          _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 4);
        }
        int status = 0;
        MP_ASSERT_TRUE(ctx, between > 0 && waitpid(between, &status, 0) == between)
            << strerror(errno);
        MP_EXPECT_TRUE(ctx, WIFEXITED(status) && WEXITSTATUS(status) == 0)
            << "status " << status << " (2: unshare failed)";
      },
      options);
}

}  // namespace
