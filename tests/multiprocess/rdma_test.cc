// Collectives over the RDMA transport on the emulated device: every rank a
// simulated host of its own (BATON_HOSTID), or two hosts of several ranks
// (shared memory inside, RDMA between), 1 to 8 ranks, every datatype, sizes
// up to 64 MiB. Results are compared with a plain loop over all ranks'
// inputs (small integers, exact in every type). Also a rank killed during
// a collective, the fallback to TCP without a device and
// BATON_TRANSPORT=ib's error.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "common/mp_harness.h"
#include "common/reference.h"
#include "multiprocess/failure_common.h"

namespace {

using baton_test::Options;
using baton_test::RankContext;
using baton_test::RunRanks;

Options Emulated(int extra_ids = 0) {
  Options o;
  o.env = {{"BATON_IB_EMULATE", "1"}, {"BATON_IB_QPS_PER_PEER", "2"}};
  o.init_comm = false;
  o.extra_ids = extra_ids;
  o.deadline = std::chrono::seconds(240);
  return o;
}

// Rank r on simulated host r % hosts.
batonComm_t Join(RankContext& ctx, int hosts) {
  setenv("BATON_HOSTID", ("rdma-host-" + std::to_string(ctx.rank() % hosts)).c_str(), 1);
  batonComm_t comm = nullptr;
  MP_EXPECT_EQ(ctx, batonCommInitRank(&comm, ctx.nranks(), ctx.id(), ctx.rank()), batonSuccess)
      << ctx.LastError();
  ctx.set_comm(comm);
  return comm;
}

void CheckAllReduce(RankContext& ctx, batonComm_t comm, batonDataType_t t, batonRedOp_t op,
                    size_t count) {
  const int n = ctx.nranks(), r = ctx.rank();
  const size_t es = SizeOf(t);
  std::vector<uint8_t> in(count * es), out(count * es);
  for (size_t i = 0; i < count; ++i) Store(t, in.data(), i, ExactInput(t, op, r, n, i));
  MP_ASSERT_OK(ctx, batonAllReduce(in.data(), out.data(), count, t, op, comm, nullptr));
  for (size_t i = 0; i < count; ++i) {
    const double want = ExactExpected(t, op, n, i);
    const double got = Load(t, out.data(), i);
    if (got != want) {
      MP_FAIL(ctx) << "allreduce type " << t << " count " << count << " element " << i << ": "
                   << got << " != " << want;
      return;
    }
  }
}

void CheckOthers(RankContext& ctx, batonComm_t comm, size_t count) {
  const int n = ctx.nranks(), r = ctx.rank();
  std::vector<int32_t> mine(count), all(count * n), back(count);
  for (size_t i = 0; i < count; ++i) mine[i] = static_cast<int32_t>(r * 1000003 + i);
  MP_ASSERT_OK(ctx, batonAllGather(mine.data(), all.data(), count, batonInt32, comm, nullptr));
  for (int p = 0; p < n; ++p)
    for (size_t i = 0; i < count; i += 997)
      MP_EXPECT_EQ(ctx, all[p * count + i], static_cast<int32_t>(p * 1000003 + i));
  std::vector<int32_t> bcast(count);
  if (r == n - 1) bcast = mine;
  MP_ASSERT_OK(ctx,
               batonBroadcast(bcast.data(), bcast.data(), count, batonInt32, n - 1, comm, nullptr));
  for (size_t i = 0; i < count; i += 991)
    MP_EXPECT_EQ(ctx, bcast[i], static_cast<int32_t>((n - 1) * 1000003 + i));
  // reduce-scatter of all[] (the same on every rank): n times each block.
  MP_ASSERT_OK(
      ctx, batonReduceScatter(all.data(), back.data(), count, batonInt32, batonSum, comm, nullptr));
  for (size_t i = 0; i < count; i += 983)
    MP_EXPECT_EQ(ctx, back[i], static_cast<int32_t>(n * (r * 1000003 + i)));
  // alltoall: block p of rank r holds r*n+p.
  std::vector<int32_t> send(count * n), recv(count * n);
  for (int p = 0; p < n; ++p)
    std::fill(send.begin() + p * count, send.begin() + (p + 1) * count, r * n + p);
  MP_ASSERT_OK(ctx, batonAlltoAll(send.data(), recv.data(), count, batonInt32, comm, nullptr));
  for (int p = 0; p < n; ++p) MP_EXPECT_EQ(ctx, recv[p * count + count / 2], p * n + r);
}

TEST(RdmaEmulated, EveryDatatypeOneToEightRanks) {
  for (int n = 1; n <= 8; ++n) {
    RunRanks(
        n,
        [&](RankContext& ctx) {
          batonComm_t comm = Join(ctx, n);
          if (comm == nullptr) return;
          for (int t = 0; t < batonNumTypes; ++t)
            for (size_t count : {size_t(1), size_t(1000), size_t(300000)})
              CheckAllReduce(ctx, comm, static_cast<batonDataType_t>(t), batonSum, count);
          CheckAllReduce(ctx, comm, batonInt32, batonMax, 12345);
          CheckAllReduce(ctx, comm, batonFloat32, batonAvg, 12345);
          CheckOthers(ctx, comm, 70000);
        },
        Emulated());
  }
}

TEST(RdmaEmulated, SixtyFourMiBAndMixedHosts) {
  for (auto [n, hosts] : {std::pair{2, 2}, std::pair{4, 2}, std::pair{6, 3}}) {
    RunRanks(
        n,
        [&, hosts = hosts](RankContext& ctx) {
          batonComm_t comm = Join(ctx, hosts);
          if (comm == nullptr) return;
          CheckAllReduce(ctx, comm, batonFloat32, batonSum, (64u << 20) / 4);
          CheckOthers(ctx, comm, 1 << 20);
        },
        Emulated());
  }
}

// The emulation's objects of process `pid`: its memory regions, queue pair
// inboxes and completion channels' socket files in /dev/shm, and its open
// completion channel sockets.
int EmulatedObjectsOf(int pid) {
  const std::string prefix = "baton-ibemu-" + std::to_string(pid) + "-";
  int count = 0;
  if (DIR* dir = opendir("/dev/shm")) {
    while (dirent* e = readdir(dir)) count += std::string(e->d_name).rfind(prefix, 0) == 0;
    closedir(dir);
  }
  std::ifstream unix_sockets("/proc/net/unix");
  for (std::string line; std::getline(unix_sockets, line);)
    count += line.find(prefix) != std::string::npos;  // open, even if unlinked
  return count;
}

// Rank 2 is SIGKILLed during a loop of 64 MiB allreduces over emulated
// RDMA, every rank a host of its own: each survivor's call fails within
// the timeout with an error naming rank 2, and once it aborted its
// communicator none of its emulated objects is left. (The dead rank's
// objects stay in /dev/shm, as a crashed process's would; removed here.)
// `registered`: the buffer is batonCommRegister'd, so large messages into
// it go in place (zero-copy) and the peer dies mid-transfer there too.
void SigkillDuringAllReduce(bool registered) {
  Options o = Emulated();
  o.env.push_back({"BATON_TRANSPORT", "ib"});
  o.env.push_back({"BATON_TIMEOUT", std::to_string(baton_test::kTimeoutSeconds)});
  o.expected_signal = {{2, SIGKILL}};
  o.deadline = std::chrono::seconds(90);
  RunRanks(
      4,
      [&](RankContext& ctx) {
        batonComm_t comm = Join(ctx, 4);
        if (comm == nullptr) return;
        MP_EXPECT_GE(ctx, EmulatedObjectsOf(getpid()), 1);
        std::vector<float> buf(baton_test::kLargeCount, static_cast<float>(ctx.rank()));
        void* handle = nullptr;
        if (registered)
          MP_ASSERT_OK(ctx, batonCommRegister(comm, buf.data(), buf.size() * 4, &handle));
        int iterations = 0;
        if (ctx.rank() == 2) {
          baton_test::RaiseSoon(SIGKILL);
          baton_test::AllReduceUntilError(comm, nullptr, buf, 1e9, &iterations);
          for (;;) pause();
        }
        const auto start = std::chrono::steady_clock::now();
        const batonResult_t r = baton_test::AllReduceUntilError(
            comm, nullptr, buf, baton_test::kMaxDetectSeconds, &iterations);
        const std::string message = ctx.LastError();
        MP_EXPECT_NE(ctx, message.find("rank 2"), std::string::npos) << message;
        baton_test::ExpectFailedThenAbort(ctx, r, baton_test::SecondsSince(start), iterations,
                                          false);
        MP_EXPECT_EQ(ctx, EmulatedObjectsOf(getpid()), 0);
      },
      o);
  // The killed rank's: its pid is gone, its objects not.
  if (DIR* dir = opendir("/dev/shm")) {
    while (dirent* e = readdir(dir)) {
      int pid = 0;
      if (sscanf(e->d_name, "baton-ibemu-%d-", &pid) == 1 && kill(pid, 0) != 0 && errno == ESRCH)
        unlink(("/dev/shm/" + std::string(e->d_name)).c_str());
    }
    closedir(dir);
  }
}

TEST(RdmaEmulated, SigkillDuringAllReduceNamesTheRank) {
  SigkillDuringAllReduce(false);
}

TEST(RdmaEmulated, SigkillDuringRegisteredAllReduceNamesTheRank) {
  SigkillDuringAllReduce(true);
}

// Every collective on registered buffers (one from batonMemAlloc, one a
// plain vector), `count` int32/float elements per block, checked element
// by element against the values every rank computes for itself.
void CheckRegistered(RankContext& ctx, batonComm_t comm, size_t count) {
  const int n = ctx.nranks(), r = ctx.rank();
  const size_t total = count * n;
  void* shared = nullptr;
  MP_ASSERT_OK(ctx, batonMemAlloc(&shared, total * 4));
  std::vector<int32_t> plain(total);
  auto* a = static_cast<int32_t*>(shared);
  void *ha = nullptr, *hb = nullptr;
  const int objects_before = EmulatedObjectsOf(getpid());
  MP_ASSERT_OK(ctx, batonCommRegister(comm, a, total * 4, &ha));
  MP_ASSERT_OK(ctx, batonCommRegister(comm, plain.data(), total * 4, &hb));
  auto value = [](int rank, size_t i) { return static_cast<int32_t>(rank * 1000003 + i); };
  auto expect_all = [&](const int32_t* got, size_t len, auto want, const char* what) {
    for (size_t i = 0; i < len; ++i)
      if (got[i] != want(i)) {
        MP_FAIL(ctx) << what << " count " << count << " element " << i << ": " << got[i]
                     << " != " << want(i);
        return;
      }
  };
  // allreduce (float sum, exact small integers), the whole buffer.
  auto* fa = reinterpret_cast<float*>(a);
  auto* fb = reinterpret_cast<float*>(plain.data());
  for (size_t i = 0; i < total; ++i)
    fa[i] = static_cast<float>(ExactInput(batonFloat32, batonSum, r, n, i));
  MP_ASSERT_OK(ctx, batonAllReduce(fa, fb, total, batonFloat32, batonSum, comm, nullptr));
  for (size_t i = 0; i < total; ++i)
    if (fb[i] != static_cast<float>(ExactExpected(batonFloat32, batonSum, n, i))) {
      MP_FAIL(ctx) << "allreduce element " << i << ": " << fb[i];
      break;
    }
  // allgather a's first block -> plain.
  for (size_t i = 0; i < count; ++i) a[i] = value(r, i);
  MP_ASSERT_OK(ctx, batonAllGather(a, plain.data(), count, batonInt32, comm, nullptr));
  for (int p = 0; p < n; ++p)
    expect_all(
        plain.data() + p * count, count, [&](size_t i) { return value(p, i); }, "allgather");
  // broadcast from the last rank, in place in a.
  for (size_t i = 0; i < total; ++i) a[i] = value(r, i);
  MP_ASSERT_OK(ctx, batonBroadcast(a, a, total, batonInt32, n - 1, comm, nullptr));
  expect_all(
      a, total, [&](size_t i) { return value(n - 1, i); }, "broadcast");
  // reduce-scatter (sum) of plain (every rank's allgather) -> a.
  MP_ASSERT_OK(ctx,
               batonReduceScatter(plain.data(), a, count, batonInt32, batonSum, comm, nullptr));
  expect_all(
      a, count, [&](size_t i) { return n * value(r, i); }, "reducescatter");
  // reduce (max) to rank 0.
  for (size_t i = 0; i < total; ++i) a[i] = value(r, i);
  MP_ASSERT_OK(ctx, batonReduce(a, plain.data(), total, batonInt32, batonMax, 0, comm, nullptr));
  if (r == 0)
    expect_all(
        plain.data(), total, [&](size_t i) { return value(n - 1, i); }, "reduce");
  // alltoall: block p of rank r holds value(r * n + p, i).
  for (int p = 0; p < n; ++p)
    for (size_t i = 0; i < count; ++i) a[p * count + i] = value(r * n + p, i);
  MP_ASSERT_OK(ctx, batonAlltoAll(a, plain.data(), count, batonInt32, comm, nullptr));
  for (int p = 0; p < n; ++p)
    expect_all(
        plain.data() + p * count, count, [&](size_t i) { return value(p * n + r, i); }, "alltoall");
  // send/recv around the ring.
  if (n > 1) {
    for (size_t i = 0; i < count; ++i) a[i] = value(r, i);
    MP_ASSERT_OK(ctx, batonGroupStart());
    MP_ASSERT_OK(ctx, batonSend(a, count, batonInt32, (r + 1) % n, comm, nullptr));
    MP_ASSERT_OK(ctx, batonRecv(plain.data(), count, batonInt32, (r + n - 1) % n, comm, nullptr));
    MP_ASSERT_OK(ctx, batonGroupEnd());
    expect_all(
        plain.data(), count, [&](size_t i) { return value((r + n - 1) % n, i); }, "sendrecv");
  }
  // Deregistering drops the NIC registrations (the emulated regions).
  MP_ASSERT_OK(ctx, batonCommDeregister(comm, ha));
  MP_ASSERT_OK(ctx, batonCommDeregister(comm, hb));
  MP_EXPECT_EQ(ctx, EmulatedObjectsOf(getpid()), objects_before);
  MP_ASSERT_OK(ctx, batonMemFree(shared));
}

// The INFO lines a rank wrote to its stderr, captured in a file.
class CapturedStderr {
 public:
  CapturedStderr() : path_("/tmp/baton-rdma-zc-" + std::to_string(getpid()) + ".log") {
    fflush(stderr);
    saved_ = dup(2);
    const int fd = open(path_.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600);
    dup2(fd, 2);
    close(fd);
  }
  // Restores stderr; the captured text.
  std::string Finish() {
    fflush(stderr);
    dup2(saved_, 2);
    close(saved_);
    std::ifstream in(path_);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    unlink(path_.c_str());
    return text;
  }

 private:
  std::string path_;
  int saved_ = -1;
};

// The messages a rank's INFO lines say went in place.
long InPlaceMessages(const std::string& log) {
  long total = 0;
  for (size_t at = log.find("RDMA with rank "); at != std::string::npos;
       at = log.find("RDMA with rank ", at + 1)) {
    long sent = 0, received = 0;
    int rank = 0;
    if (sscanf(log.c_str() + at, "RDMA with rank %d: %ld messages sent and %ld received", &rank,
               &sent, &received) == 3)
      total += sent + received;
  }
  return total;
}

// `n` ranks on `hosts` simulated hosts run CheckRegistered with each of
// `counts` (0: 64 MiB in all); the INFO lines must count messages in place.
void RunRegistered(int n, int hosts, std::vector<size_t> counts) {
  Options o = Emulated();
  o.env.push_back({"BATON_TRANSPORT", "ib"});
  RunRanks(
      n,
      [&](RankContext& ctx) {
        CapturedStderr captured;
        batonComm_t comm = Join(ctx, hosts);
        if (comm != nullptr) {
          for (size_t count : counts)
            CheckRegistered(ctx, comm, count != 0 ? count : (64u << 20) / 4 / ctx.nranks());
          MP_EXPECT_EQ(ctx, batonCommDestroy(comm), batonSuccess);
          ctx.set_comm(nullptr);
          MP_EXPECT_EQ(ctx, EmulatedObjectsOf(getpid()), 0);
        }
        const std::string log = captured.Finish();
        MP_EXPECT_LT(ctx, 0, InPlaceMessages(log)) << log.substr(0, 3000);
      },
      o);
}

// Registered buffers up to 64 MiB between simulated hosts: every result
// checked, the NIC registrations gone at deregister and every emulated
// object at destroy, and the zero-copy path taken. Then with every
// message from 4 KiB offered, so that many answers are in flight at once.
TEST(RdmaEmulated, RegisteredBuffersGoInPlace) {
  // Settings are read once per process, and forked ranks inherit the
  // test process's: each rank is started afresh (the harness's exec mode)
  // with the log level in its environment.
  const bool set_exec = getenv("BATON_TEST_EXEC") == nullptr;
  if (set_exec) setenv("BATON_TEST_EXEC", "1", 1);
  setenv("BATON_DEBUG", "INFO", 1);
  setenv("BATON_DEBUG_SUBSYS", "NET", 1);
  for (auto [n, hosts] : {std::pair{2, 2}, std::pair{3, 3}, std::pair{4, 2}, std::pair{8, 8}})
    RunRegistered(n, hosts, {1, 4097, 300001, 0});
  setenv("BATON_IB_ZCOPY_MIN", "4096", 1);
  RunRegistered(3, 3, {1, 4097, 300001});
  unsetenv("BATON_IB_ZCOPY_MIN");
  unsetenv("BATON_DEBUG");
  unsetenv("BATON_DEBUG_SUBSYS");
  if (set_exec) unsetenv("BATON_TEST_EXEC");
}

TEST(RdmaFallback, AutoWithoutADeviceUsesTcp) {
  Options o;
  o.init_comm = false;
  RunRanks(
      3,
      [&](RankContext& ctx) {
        batonComm_t comm = Join(ctx, 3);
        if (comm == nullptr) return;
        CheckAllReduce(ctx, comm, batonFloat32, batonSum, 100000);
      },
      o);
}

TEST(RdmaFallback, ForcedWithoutADeviceFailsClearly) {
  Options o;
  o.init_comm = false;
  o.env = {{"BATON_TRANSPORT", "ib"}, {"BATON_TIMEOUT", "20"}};
  RunRanks(
      2,
      [&](RankContext& ctx) {
        setenv("BATON_HOSTID", ("rdma-host-" + std::to_string(ctx.rank())).c_str(), 1);
        batonComm_t comm = nullptr;
        const batonResult_t r = batonCommInitRank(&comm, ctx.nranks(), ctx.id(), ctx.rank());
        MP_EXPECT_EQ(ctx, r, batonSystemError);
        const std::string msg = ctx.LastError();
        MP_EXPECT_TRUE(ctx, msg.find("BATON_TRANSPORT=ib") != std::string::npos &&
                                (msg.find("no RDMA device") != std::string::npos ||
                                 msg.find("without libibverbs") != std::string::npos))
            << msg;
      },
      o);
}

}  // namespace
