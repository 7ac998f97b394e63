// The rendezvous's host stage (bootstrap/host_stage.h): ranks on several
// simulated hosts (BATON_HOSTID) form a communicator while the root sees one
// leader per host; a leader killed during creation, ranks that disagree on
// the size or claim one rank twice, and foreign connections to a host's
// unix socket all end in clear errors on every rank, never a hang.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/socket.h"
#include "baton.h"
#include "bootstrap/handshake.h"
#include "bootstrap/host_id.h"
#include "bootstrap/host_stage.h"
#include "bootstrap/rendezvous.h"
#include "bootstrap/unique_id.h"
#include "common/mp_harness.h"

namespace baton {
namespace {

using baton_test::RankContext;
using Clock = std::chrono::steady_clock;

// Ranks create their own communicators from `id` (made here, so that the
// test can read the root's stats by its comm id).
baton_test::Options OwnInit(int deadline_s = 60) {
  baton_test::Options options;
  options.init_comm = false;
  options.unique_id = false;
  options.deadline = std::chrono::seconds(deadline_s);
  options.grace_after_failure = std::chrono::seconds(deadline_s);
  return options;
}

struct ScopedEnv {
  ScopedEnv(const char* name, const char* value) : name(name) { setenv(name, value, 1); }
  ~ScopedEnv() { unsetenv(name); }
  const char* name;
};

batonUniqueId NewId(UniqueIdData* data) {
  batonUniqueId id;
  EXPECT_EQ(batonGetUniqueId(&id), batonSuccess);
  EXPECT_TRUE(DecodeUniqueId(id, data).ok());
  return id;
}

void SetHost(int host) {
  setenv("BATON_HOSTID", ("simulated-host-" + std::to_string(host)).c_str(), 1);
}

// Allreduce of rank+1, checked against n(n+1)/2.
void CheckAllReduce(RankContext& ctx, batonComm_t comm) {
  int64_t v = ctx.rank() + 1;
  MP_EXPECT_OK(ctx, batonAllReduce(&v, &v, 1, batonInt64, batonSum, comm, nullptr));
  MP_EXPECT_EQ(ctx, v, int64_t(ctx.nranks()) * (ctx.nranks() + 1) / 2);
}

std::string LastError() {
  return batonGetLastError(nullptr);
}

// Uneven hosts (5, 5, 3, 1 ranks and so on): every rank gets the table and
// the root counts one leader per host, however the ranks arrive.
struct HostsCase {
  int nranks;
  int hosts;
  const char* transport;
};

class ManyHostsTest : public ::testing::TestWithParam<HostsCase> {};

TEST_P(ManyHostsTest, RootSeesHostsNotRanks) {
  const HostsCase c = GetParam();
  UniqueIdData data;
  const batonUniqueId id = NewId(&data);
  // Rank r on host r % hosts: every host's ranks arrive interleaved with
  // the others'.
  baton_test::RunRanks(
      c.nranks,
      [&](RankContext& ctx) {
        SetHost(ctx.rank() % c.hosts);
        setenv("BATON_TRANSPORT", c.transport, 1);
        batonComm_t comm = nullptr;
        MP_ASSERT_OK(ctx, batonCommInitRank(&comm, ctx.nranks(), id, ctx.rank()));
        ctx.set_comm(comm);
        CheckAllReduce(ctx, comm);
      },
      OwnInit(120));
  RendezvousServerStats stats;
  ASSERT_TRUE(FinishedRendezvousStats(data.comm_id, &stats));
  EXPECT_EQ(stats.ranks, c.nranks);
  EXPECT_EQ(stats.leaders, std::min(c.hosts, c.nranks));
  // A leader's connection stays open while its ranks arrive; one whose
  // ranks straggle past kLeaderLingerMs opens another.
  EXPECT_GE(stats.connections, stats.leaders);
  EXPECT_LE(stats.connections, c.nranks);
  EXPECT_LE(stats.peak_open, std::min(kRootWindow, stats.connections));
  EXPECT_GE(stats.batches, stats.leaders);
  EXPECT_LE(stats.batches, c.nranks);
}

INSTANTIATE_TEST_SUITE_P(Hosts, ManyHostsTest,
                         ::testing::Values(HostsCase{1, 1, "tcp"}, HostsCase{2, 2, "tcp"},
                                           HostsCase{13, 4, "tcp"}, HostsCase{24, 7, "auto"},
                                           HostsCase{9, 9, "tcp"}, HostsCase{17, 3, "auto"}),
                         [](const ::testing::TestParamInfo<HostsCase>& info) {
                           return std::to_string(info.param.nranks) + "ranks_" +
                                  std::to_string(info.param.hosts) + "hosts_" +
                                  info.param.transport;
                         });

// Host 1's leader (rank 3, the first of its host) is killed while rank 5
// has not joined: rank 4, its local, fails at once saying it lost its
// leader; host 0's ranks fail with the root's timeout, well before their
// own deadline and the harness's.
TEST(HostStageTest, KilledLeaderFailsEveryRank) {
  ScopedEnv timeout("BATON_TIMEOUT", "3");  // the root's, and the ranks'
  UniqueIdData data;
  const batonUniqueId id = NewId(&data);
  baton_test::Options options = OwnInit(30);
  options.expected_signal[3] = SIGKILL;
  baton_test::RunRanks(
      6,
      [&](RankContext& ctx) {
        if (ctx.rank() == 5) return;  // never joins
        SetHost(ctx.rank() < 3 ? 0 : 1);
        if (ctx.rank() == 4) std::this_thread::sleep_for(std::chrono::milliseconds(300));
        if (ctx.rank() == 3) {
          std::thread([] {
            std::this_thread::sleep_for(std::chrono::milliseconds(800));
            raise(SIGKILL);
          }).detach();
        }
        const auto start = Clock::now();
        batonComm_t comm = nullptr;
        const batonResult_t rc = batonCommInitRank(&comm, 6, id, ctx.rank());
        const double took = baton_test::SecondsSince(start);
        const std::string error = LastError();
        MP_ASSERT_TRUE(ctx, rc != batonSuccess) << "rank " << ctx.rank();
        if (ctx.rank() == 4) {
          MP_EXPECT_LT(ctx, took, 2.0) << error;
          MP_EXPECT_NE(ctx, error.find("lost this host's leader"), std::string::npos) << error;
        } else {
          MP_EXPECT_EQ(ctx, rc, batonTimeout) << error;
          MP_EXPECT_NE(ctx, error.find("timed out"), std::string::npos) << error;
          MP_EXPECT_LT(ctx, took, 3.5) << error;
        }
      },
      options);
}

// A bad rendezvous fails on every rank with the root's reason, whichever
// host its ranks are on, a rank that comes after the failure included:
// `claim` gets the process's index and returns the (nranks, rank) it claims.
void ExpectEveryRankFails(int processes, const char* reason,
                          const std::function<std::pair<int, int>(int)>& claim) {
  ScopedEnv timeout("BATON_TIMEOUT", "20");
  UniqueIdData data;
  const batonUniqueId id = NewId(&data);
  baton_test::RunRanks(
      processes,
      [&](RankContext& ctx) {
        SetHost(ctx.rank() % 2);
        // The offender (the last process) comes when all but one rank are
        // in; that one comes after the rendezvous has failed.
        if (ctx.rank() == processes - 1)
          std::this_thread::sleep_for(std::chrono::milliseconds(500));
        if (ctx.rank() == processes - 2)
          std::this_thread::sleep_for(std::chrono::milliseconds(1000));
        const auto [nranks, rank] = claim(ctx.rank());
        batonComm_t comm = nullptr;
        const auto start = Clock::now();
        const batonResult_t rc = batonCommInitRank(&comm, nranks, id, rank);
        const std::string error = LastError();
        MP_EXPECT_EQ(ctx, rc, batonRemoteError) << error;
        MP_EXPECT_NE(ctx, error.find(reason), std::string::npos) << error;
        MP_EXPECT_LT(ctx, baton_test::SecondsSince(start), 10.0) << error;
      },
      OwnInit(40));
}

TEST(HostStageTest, SizeMismatchFailsEveryRank) {
  ExpectEveryRankFails(5, "disagree on the communicator size",
                       [](int r) { return std::make_pair(r == 4 ? 6 : 5, r); });
}

TEST(HostStageTest, DuplicateRankFailsEveryRank) {
  // Five processes for four ranks: the last claims rank 1 again.
  ExpectEveryRankFails(5, "joined twice", [](int r) { return std::make_pair(4, r == 4 ? 1 : r); });
}

// Connects to this host's leader socket, retrying until the leader is up.
Fd ConnectToLeader(const std::string& name) {
  for (int i = 0; i < 400; ++i) {
    Fd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    memcpy(addr.sun_path + 1, name.data(), name.size());
    const socklen_t len = offsetof(sockaddr_un, sun_path) + 1 + name.size();
    if (connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), len) == 0) return fd;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return Fd();
}

// Anyone in the network namespace can reach a host's abstract socket: a
// silent client, garbage and a hello sealed by another secret are dropped
// and the ranks form their communicator.
TEST(HostStageTest, ForeignConnectionsToTheHostSocketAreDropped) {
  unsetenv("BATON_HOSTID");
  UniqueIdData data;
  const batonUniqueId id = NewId(&data);
  const std::string name = HostLeaderSocketName(data, HostHash(""));
  std::vector<Fd> intruders;
  std::thread intruder([&] {
    for (int i = 0; i < 3; ++i) intruders.push_back(ConnectToLeader(name));
    std::vector<uint8_t> garbage(4096, 0xab);
    (void)SendAll(intruders[1].get(), garbage.data(), garbage.size(), DeadlineIn(5));
    UniqueIdData other = data;
    memset(other.secret, 0x5a, sizeof(other.secret));
    ClientHello hello;
    PeerInfo info{};
    if (MakeClientHello(other, 3, 0, info, &hello).ok())
      (void)SendAll(intruders[2].get(), &hello, sizeof(hello), DeadlineIn(5));
  });
  baton_test::RunRanks(
      3,
      [&](RankContext& ctx) {
        // The last rank waits, so the intruders are in before the table.
        if (ctx.rank() == 2) std::this_thread::sleep_for(std::chrono::milliseconds(700));
        batonComm_t comm = nullptr;
        MP_ASSERT_OK(ctx, batonCommInitRank(&comm, 3, id, ctx.rank()));
        ctx.set_comm(comm);
        CheckAllReduce(ctx, comm);
      },
      OwnInit());
  intruder.join();
  for (const Fd& fd : intruders) EXPECT_TRUE(fd.valid());
  RendezvousServerStats stats;
  ASSERT_TRUE(FinishedRendezvousStats(data.comm_id, &stats));
  EXPECT_EQ(stats.leaders, 1);
}

TEST(TableTreeTest, EveryLeaderHasOneParent) {
  for (int n : {1, 2, 3, 7, 100, 1000}) {
    std::vector<int> parents(n, 0);
    for (int self = -1; self < n; ++self)
      for (int c : TableTreeChildren(self, n)) {
        ASSERT_GT(c, self);
        ASSERT_LT(c, n);
        parents[c]++;
        EXPECT_LE(TableTreeChildren(self, n).size(), static_cast<size_t>(kTableTreeFanout));
      }
    for (int c = 0; c < n; ++c) EXPECT_EQ(parents[c], 1) << c;
  }
}

// A leader that cannot take the table (here: leader 0's listener is
// closed) is routed around: its children get the table from its parent.
TEST(TableTreeTest, DeadLeaderIsRoutedAround) {
  const int n = 6;
  SockAddr any;
  ASSERT_TRUE(ParseHostPort("127.0.0.1:0", &any).ok());
  std::vector<Fd> listeners(n);
  std::vector<WireAddr> leaders(n);
  for (int i = 0; i < n; ++i) {
    SockAddr bound;
    ASSERT_TRUE(ListenOn(any, &listeners[i], &bound).ok());
    leaders[i] = ToWire(bound);
  }
  listeners[0].reset();
  const std::vector<uint8_t> message(100000, 0x5c);
  std::thread root([&] { SendTableDown(leaders, -1, message, DeadlineIn(20)); });
  // The root's children are 0 and 1; 0's are 2 and 3; 1 would serve 4, 5.
  for (int i : {1, 2, 3}) {
    Fd fd;
    ASSERT_TRUE(AcceptWithDeadline(listeners[i].get(), DeadlineIn(20), &fd).ok()) << i;
    std::vector<uint8_t> got(message.size());
    ASSERT_TRUE(RecvAll(fd.get(), got.data(), got.size(), DeadlineIn(20)).ok()) << i;
    EXPECT_EQ(got, message) << i;
  }
  root.join();
  for (int i : {4, 5}) {
    Fd fd;
    EXPECT_FALSE(AcceptWithDeadline(listeners[i].get(), DeadlineIn(0.05), &fd).ok()) << i;
  }
}

}  // namespace
}  // namespace baton
