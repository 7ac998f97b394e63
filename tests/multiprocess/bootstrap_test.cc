// Bootstrap: foreign connections to the rendezvous are dropped without
// harm, every launcher's environment leads to a working communicator, the
// unique id's text form round-trips, and BATON_TIMEOUT means the same on
// every rendezvous path (0: wait forever).
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/socket.h"
#include "baton.h"
#include "bootstrap/handshake.h"
#include "bootstrap/host_stage.h"
#include "bootstrap/rendezvous.h"
#include "bootstrap/unique_id.h"

namespace baton {
namespace {

// Runs `body(rank)` in `n` forked children; true when all exit 0 in time.
bool ForkRanks(int n, const std::function<int(int)>& body, int timeout_s = 60) {
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      alarm(timeout_s);  // a hang kills the child, which fails the test
      _exit(body(r));
    }
    pids.push_back(pid);
  }
  bool ok = true;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    ok &= WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  return ok;
}

// Allreduce of rank+1 over a fresh communicator; 0 on a correct result.
int CheckAllReduce(batonComm_t comm) {
  int n = 0, rank = 0;
  if (batonCommCount(comm, &n) != batonSuccess || batonCommUserRank(comm, &rank) != batonSuccess)
    return 10;
  int64_t v = rank + 1;
  if (batonAllReduce(&v, &v, 1, batonInt64, batonSum, comm, nullptr) != batonSuccess) return 11;
  if (v != int64_t(n) * (n + 1) / 2) return 12;
  return batonCommDestroy(comm) == batonSuccess ? 0 : 13;
}

TEST(BootstrapTest, ForeignConnectionsAreDropped) {
  batonUniqueId id;
  ASSERT_EQ(batonGetUniqueId(&id), batonSuccess);
  UniqueIdData data;
  ASSERT_TRUE(DecodeUniqueId(id, &data).ok());
  SockAddr root = FromWire(data.root);
  // A silent client, a garbage client and a client with a wrong secret.
  std::vector<Fd> intruders;
  for (int i = 0; i < 3; ++i) {
    Fd fd;
    ASSERT_TRUE(ConnectWithRetry(root, DeadlineIn(5), &fd).ok());
    intruders.push_back(std::move(fd));
  }
  std::vector<uint8_t> garbage(4096, 0xab);
  ASSERT_TRUE(SendAll(intruders[1].get(), garbage.data(), garbage.size(), DeadlineIn(5)).ok());
  std::vector<uint8_t> hello(512, 0);
  uint32_t magic = 0x4f4c4548;  // the right magic, but not sealed by the secret
  memcpy(hello.data(), &magic, 4);
  ASSERT_TRUE(SendAll(intruders[2].get(), hello.data(), hello.size(), DeadlineIn(5)).ok());
  EXPECT_TRUE(ForkRanks(3, [&](int rank) {
    batonComm_t comm;
    if (batonCommInitRank(&comm, 3, id, rank) != batonSuccess) return 1;
    return CheckAllReduce(comm);
  }));
}

// More ranks than one rank's connects in flight (64): the mesh's event loop
// makes 78 sockets per rank over TCP while it accepts, and shared memory
// uses segments above the size populated at creation.
class ManyRanksTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ManyRanksTest, FormTheMeshAndReduce) {
  const int n = 40;
  batonUniqueId id;
  ASSERT_EQ(batonGetUniqueId(&id), batonSuccess);
  const char* transport = GetParam();
  EXPECT_TRUE(ForkRanks(
      n,
      [&](int rank) {
        setenv("BATON_TRANSPORT", transport, 1);
        batonComm_t comm;
        if (batonCommInitRank(&comm, n, id, rank) != batonSuccess) return 1;
        return CheckAllReduce(comm);
      },
      120));
}

INSTANTIATE_TEST_SUITE_P(Transports, ManyRanksTest, ::testing::Values("tcp", "shm"));

// A server at the id's address that does not hold the id's secret (another
// job's rendezvous, or someone who learnt the address) cannot hand a rank a
// table: the table's MAC does not check, and init says so.
TEST(BootstrapTest, ImpostorRendezvousIsRefused) {
  SockAddr any;
  ASSERT_TRUE(ParseHostPort("127.0.0.1:0", &any).ok());
  Fd listener;
  SockAddr bound;
  ASSERT_TRUE(ListenOn(any, &listener, &bound).ok());
  UniqueIdData data{};
  data.magic = kUniqueIdMagic;
  data.version = kBootstrapVersion;
  data.root = ToWire(bound);
  memset(data.secret, 0x11, sizeof(data.secret));
  data.comm_id = 77;
  UniqueIdData impostor = data;
  memset(impostor.secret, 0x22, sizeof(impostor.secret));
  std::thread server([&] {
    Fd fd;
    if (!AcceptWithDeadline(listener.get(), DeadlineIn(20), &fd).ok()) return;
    LeaderBatch batch;
    ClientHello hello;
    if (!RecvAll(fd.get(), &batch, sizeof(batch), DeadlineIn(20)).ok()) return;
    if (!RecvAll(fd.get(), &hello, sizeof(hello), DeadlineIn(20)).ok()) return;
    std::vector<PeerInfo> table(2, hello.info);
    table[0].rank = 0;
    table[1].rank = 1;
    const std::vector<WireAddr> leaders{batch.leader};
    const TableHeader header = MakeTableHeader(impostor, 0, "", leaders, table);
    SendTableDown(leaders, -1, TableMessage(header, leaders, table), DeadlineIn(20));
  });
  setenv("BATON_TIMEOUT", "20", 1);
  batonComm_t comm = nullptr;
  const batonResult_t rc = batonCommInitRank(&comm, 2, EncodeUniqueId(data), 1);
  unsetenv("BATON_TIMEOUT");
  const std::string error = batonGetLastError(nullptr);
  server.join();
  EXPECT_EQ(rc, batonRemoteError);
  EXPECT_NE(error.find("not from this job's server"), std::string::npos) << error;
}

TEST(BootstrapTest, GarbageUniqueIdIsRejected) {
  batonUniqueId id;
  memset(&id, 0x5a, sizeof(id));
  batonComm_t comm;
  EXPECT_EQ(batonCommInitRank(&comm, 1, id, 0), batonInvalidArgument);
  EXPECT_STRNE(batonGetLastError(nullptr), "");
}

TEST(UniqueIdTest, TextFormRoundTrips) {
  batonUniqueId id;
  for (size_t i = 0; i < sizeof(id.internal); ++i) id.internal[i] = static_cast<char>(i * 37 + 5);
  const std::string hex = UniqueIdToHex(id);
  ASSERT_EQ(hex.size(), 2 * sizeof(id.internal));
  EXPECT_EQ(hex.find_first_not_of("0123456789abcdef"), std::string::npos);
  std::optional<batonUniqueId> back = UniqueIdFromHex(hex);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(memcmp(back->internal, id.internal, sizeof(id.internal)), 0);
  std::string upper = hex;
  for (char& c : upper) c = static_cast<char>(toupper(c));
  ASSERT_TRUE(UniqueIdFromHex(upper).has_value());
  EXPECT_EQ(memcmp(UniqueIdFromHex(upper)->internal, id.internal, sizeof(id.internal)), 0);
  EXPECT_FALSE(UniqueIdFromHex(hex.substr(1)).has_value());
  EXPECT_FALSE(UniqueIdFromHex(hex + "0").has_value());
  std::string bad = hex;
  bad[17] = 'g';
  EXPECT_FALSE(UniqueIdFromHex(bad).has_value());
  bad[17] = ' ';
  EXPECT_FALSE(UniqueIdFromHex(bad).has_value());
}

// batonGetUniqueId serves the rendezvous for BATON_TIMEOUT: with 1 s, ranks
// that come 1.5 s later find nobody; with 0 (forever) they form the
// communicator.
bool RanksJoinLate(const char* timeout) {
  setenv("BATON_TIMEOUT", timeout, 1);
  batonUniqueId id;
  EXPECT_EQ(batonGetUniqueId(&id), batonSuccess);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  setenv("BATON_TIMEOUT", "1", 1);  // the ranks' own waits stay short
  const bool joined = ForkRanks(2, [&](int rank) {
    batonComm_t comm;
    if (batonCommInitRank(&comm, 2, id, rank) != batonSuccess) return 1;
    return CheckAllReduce(comm);
  });
  unsetenv("BATON_TIMEOUT");
  return joined;
}

TEST(TimeoutTest, UniqueIdRendezvousHonoursTheTimeout) {
  EXPECT_FALSE(RanksJoinLate("1"));
}

TEST(TimeoutTest, UniqueIdRendezvousWaitsForeverWithZero) {
  EXPECT_TRUE(RanksJoinLate("0"));
}

// A free loopback port for BATON_ROOT jobs.
int FreePort() {
  SockAddr any, bound;
  EXPECT_TRUE(ParseHostPort("127.0.0.1:0", &any).ok());
  Fd fd;
  EXPECT_TRUE(ListenOn(any, &fd, &bound).ok());
  return bound.port();
}

struct LauncherEnv {
  const char* name;
  std::function<void(int rank, int n, int port)> set;
};

class InitFromEnvTest : public ::testing::TestWithParam<LauncherEnv> {};

TEST_P(InitFromEnvTest, FormsACommunicator) {
  const int n = 3, port = FreePort();
  EXPECT_TRUE(ForkRanks(n, [&](int rank) {
    for (const char* v :
         {"BATON_RANK", "BATON_WORLD_SIZE", "BATON_UNIQUE_ID", "BATON_ROOT", "OMPI_COMM_WORLD_RANK",
          "OMPI_COMM_WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "PMI_RANK", "PMI_SIZE", "RANK",
          "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"})
      unsetenv(v);
    GetParam().set(rank, n, port);
    batonComm_t comm;
    if (batonCommInitFromEnv(&comm) != batonSuccess) {
      fprintf(stderr, "rank %d: %s\n", rank, batonGetLastError(nullptr));
      return 1;
    }
    return CheckAllReduce(comm);
  }));
}

void SetInt(const char* name, int v) {
  setenv(name, std::to_string(v).c_str(), 1);
}
void SetRoot(int port) {
  setenv("BATON_ROOT", ("127.0.0.1:" + std::to_string(port)).c_str(), 1);
}

INSTANTIATE_TEST_SUITE_P(Launchers, InitFromEnvTest,
                         ::testing::Values(LauncherEnv{"baton",
                                                       [](int r, int n, int port) {
                                                         SetInt("BATON_RANK", r),
                                                             SetInt("BATON_WORLD_SIZE", n),
                                                             SetRoot(port);
                                                       }},
                                           LauncherEnv{"openmpi",
                                                       [](int r, int n, int port) {
                                                         SetInt("OMPI_COMM_WORLD_RANK", r),
                                                             SetInt("OMPI_COMM_WORLD_SIZE", n);
                                                         SetRoot(port);
                                                       }},
                                           LauncherEnv{"slurm",
                                                       [](int r, int n, int port) {
                                                         SetInt("SLURM_PROCID", r),
                                                             SetInt("SLURM_NTASKS", n),
                                                             SetRoot(port);
                                                       }},
                                           LauncherEnv{"pmi",
                                                       [](int r, int n, int port) {
                                                         SetInt("PMI_RANK", r),
                                                             SetInt("PMI_SIZE", n), SetRoot(port);
                                                       }},
                                           LauncherEnv{"torchrun",
                                                       [](int r, int n, int port) {
                                                         SetInt("RANK", r), SetInt("WORLD_SIZE", n);
                                                         setenv("MASTER_ADDR", "127.0.0.1", 1);
                                                         SetInt("MASTER_PORT", port);
                                                       }}),
                         [](const ::testing::TestParamInfo<LauncherEnv>& info) {
                           return std::string(info.param.name);
                         });

// The BATON_ROOT path starts its rendezvous server in rank 0 with the same
// BATON_TIMEOUT: rank 1 joining 1.5 s late makes rank 0 fail with 1 s (its
// own wait or its server times out, whichever comes first), and both form
// the communicator with 0. Exit status: 0 success, 100 failed init.
int JoinRootLate(const char* timeout, int port, int rank) {
  setenv("BATON_TIMEOUT", timeout, 1);
  SetInt("BATON_RANK", rank);
  SetInt("BATON_WORLD_SIZE", 2);
  SetRoot(port);
  if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  batonComm_t comm;
  if (batonCommInitFromEnv(&comm) != batonSuccess) return 100;
  return CheckAllReduce(comm);
}

TEST(TimeoutTest, RootRendezvousHonoursTheTimeout) {
  const int port = FreePort();
  pid_t pids[2];
  for (int rank = 0; rank < 2; ++rank) {
    pids[rank] = fork();
    if (pids[rank] == 0) {
      alarm(30);
      _exit(JoinRootLate("1", port, rank));
    }
  }
  int status[2] = {0, 0};
  for (int rank = 0; rank < 2; ++rank) waitpid(pids[rank], &status[rank], 0);
  ASSERT_TRUE(WIFEXITED(status[0]));
  EXPECT_EQ(WEXITSTATUS(status[0]), 100) << "rank 0 should give up after 1 s";
}

// Starts `ranks` of `world` at a fresh BATON_ROOT with BATON_TIMEOUT=2, each
// on a host of its own with `own_hosts`, `env(rank)` set; each must fail
// with batonTimeout and an error that holds every one of `words(rank)`.
void ExpectRendezvousTimeouts(const std::vector<int>& ranks, int world, bool own_hosts,
                              const std::function<void(int)>& env,
                              const std::function<std::vector<std::string>(int)>& words) {
  const int port = FreePort();
  std::vector<pid_t> pids;
  for (int rank : ranks) {
    const pid_t pid = fork();
    if (pid == 0) {
      alarm(30);
      setenv("BATON_TIMEOUT", "2", 1);
      if (own_hosts) setenv("BATON_HOSTID", ("timeout-h" + std::to_string(rank)).c_str(), 1);
      env(rank);
      SetInt("BATON_RANK", rank);
      SetInt("BATON_WORLD_SIZE", world);
      SetRoot(port);
      batonComm_t comm;
      const batonResult_t rc = batonCommInitFromEnv(&comm);
      const std::string error = batonGetLastError(nullptr);
      bool named = true;
      for (const std::string& w : words(rank)) named = named && error.find(w) != std::string::npos;
      if (rc == batonTimeout && named) _exit(0);
      fprintf(stderr, "rank %d: %s (%s)\n", rank, batonGetErrorString(rc), error.c_str());
      _exit(1);
    }
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << (own_hosts ? "hosts of their own" : "one host") << ": see the rank's line above";
  }
}

// A rank that never comes: every rank that did fails with batonTimeout
// naming it, on one host (a leader and its locals) and on hosts of their
// own. The root runs in rank 0 and started its clock with it, so without
// the ranks' grace (VerdictGrace) a rank whose own deadline came first
// said only that it timed out.
TEST(TimeoutTest, RankThatNeverComesIsNamedOnEveryRank) {
  for (bool own_hosts : {false, true}) {
    ExpectRendezvousTimeouts(
        {0, 1, 3}, 4, own_hosts, [](int) {},  // rank 2 never starts
        [](int) { return std::vector<std::string>{"rank 2 never came"}; });
  }
}

// A rank with another BATON_SECRET is refused by the root; the root's
// timeout names it and says what it refused. Checked on rank 0, whose
// process serves the root: the others get that answer only when their own
// clock started no earlier than the root's by more than their grace, which
// a loaded machine does not promise (RankThatNeverComes has the race too).
TEST(TimeoutTest, RankWithAnotherSecretIsNamedWithTheRefusal) {
  for (bool own_hosts : {false, true}) {
    ExpectRendezvousTimeouts(
        {0, 1, 2}, 3, own_hosts,
        [](int rank) { setenv("BATON_SECRET", rank == 2 ? "another-job" : "this-job", 1); },
        [](int rank) {
          return rank != 0 ? std::vector<std::string>{}
                           : std::vector<std::string>{"rank 2 never came", "BATON_SECRET"};
        });
  }
}

TEST(TimeoutTest, RootRendezvousWaitsForeverWithZero) {
  const int port = FreePort();
  EXPECT_TRUE(ForkRanks(2, [&](int rank) { return JoinRootLate("0", port, rank); }));
}

// BATON_BIND asks the library to bind ranks that a launcher (here: plain
// fork, as mpirun --bind-to none) left unbound, from the local rank the
// launcher exports: two ranks on two cores get one core each.
TEST(InitFromEnvTest, BatonBindBindsUnboundRanks) {
  cpu_set_t all;
  ASSERT_EQ(sched_getaffinity(0, sizeof(all), &all), 0);
  if (CPU_COUNT(&all) < 2) GTEST_SKIP() << "needs two CPUs to bind two ranks apart";
  const int port = FreePort();
  int cpu_of[2] = {-1, -1};
  int pipes[2][2];
  for (auto& p : pipes) ASSERT_EQ(pipe(p), 0);
  EXPECT_TRUE(ForkRanks(2, [&](int rank) {
    SetInt("BATON_RANK", rank);
    SetInt("BATON_WORLD_SIZE", 2);
    SetInt("BATON_LOCAL_RANK", rank);
    SetInt("BATON_LOCAL_SIZE", 2);
    SetRoot(port);
    setenv("BATON_BIND", "core", 1);
    batonComm_t comm;
    if (batonCommInitFromEnv(&comm) != batonSuccess) return 1;
    cpu_set_t now;
    if (sched_getaffinity(0, sizeof(now), &now) != 0 || CPU_COUNT(&now) != 1) return 2;
    int cpu = 0;
    while (!CPU_ISSET(cpu, &now)) ++cpu;
    if (write(pipes[rank][1], &cpu, sizeof(cpu)) != sizeof(cpu)) return 3;
    return CheckAllReduce(comm);
  }));
  for (int r = 0; r < 2; ++r) {
    close(pipes[r][1]);
    EXPECT_EQ(read(pipes[r][0], &cpu_of[r], sizeof(int)), static_cast<ssize_t>(sizeof(int)));
    close(pipes[r][0]);
  }
  EXPECT_NE(cpu_of[0], cpu_of[1]);
}

// BATON_TRANSPORT=shm reaches one host only: a communicator across hosts,
// or with a rank asking for tcp, fails on every rank with the reason.
TEST(InitFromEnvErrors, ShmTransportAcrossHostsIsInvalidUsageOnEveryRank) {
  struct Case {
    const char* name;
    std::function<void(int)> set;
    const char* says;
  };
  const Case cases[] = {
      {"two hosts",
       [](int rank) {
         setenv("BATON_TRANSPORT", "shm", 1);
         setenv("BATON_HOSTID", rank < 2 ? "shm-h0" : "shm-h1", 1);
       },
       "ranks 2-3 run on another host"},
      {"one rank asks for tcp",
       [](int rank) { setenv("BATON_TRANSPORT", rank == 3 ? "tcp" : "shm", 1); },
       "shm on rank 0, tcp on rank 3"},
  };
  for (const Case& c : cases) {
    const int port = FreePort();
    EXPECT_TRUE(ForkRanks(
        4,
        [&](int rank) {
          c.set(rank);
          SetInt("BATON_RANK", rank);
          SetInt("BATON_WORLD_SIZE", 4);
          SetRoot(port);
          batonComm_t comm;
          const batonResult_t rc = batonCommInitFromEnv(&comm);
          const std::string error = batonGetLastError(nullptr);
          if (rc == batonInvalidUsage && error.find(c.says) != std::string::npos) return 0;
          fprintf(stderr, "rank %d: %s (%s)\n", rank, batonGetErrorString(rc), error.c_str());
          return 1;
        },
        30))
        << c.name;
  }
}

// batonrun's BATON_UNIQUE_ID makes one communicator per rank: a second
// batonCommInitFromEnv in the same process is refused at once (it waited
// BATON_TIMEOUT and blamed "this host's leader"), after a destroy too.
TEST(InitFromEnvErrors, SecondInitFromTheLaunchersIdIsRefusedAtOnce) {
  batonUniqueId id;
  ASSERT_EQ(batonGetUniqueId(&id), batonSuccess);
  const std::string hex = UniqueIdToHex(id);
  EXPECT_TRUE(ForkRanks(
      2,
      [&](int rank) {
        setenv("BATON_UNIQUE_ID", hex.c_str(), 1);
        SetInt("BATON_RANK", rank);
        SetInt("BATON_WORLD_SIZE", 2);
        setenv("BATON_TIMEOUT", "20", 1);
        batonComm_t comm;
        if (batonCommInitFromEnv(&comm) != batonSuccess || CheckAllReduce(comm) != 0) return 1;
        const auto start = std::chrono::steady_clock::now();
        const batonResult_t again = batonCommInitFromEnv(&comm);
        const std::string error = batonGetLastError(nullptr);
        const double took =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (again == batonInvalidUsage && error.find("BATON_UNIQUE_ID") != std::string::npos &&
            error.find("batonCommSplit") != std::string::npos && took < 5)
          return 0;
        fprintf(stderr, "rank %d: %s after %.1f s (%s)\n", rank, batonGetErrorString(again), took,
                error.c_str());
        return 2;
      },
      60));
}

TEST(InitFromEnvErrors, NoRankIsInvalidUsage) {
  EXPECT_TRUE(ForkRanks(1, [](int) {
    for (const char* v :
         {"BATON_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID", "PMI_RANK", "PMIX_RANK", "RANK"})
      unsetenv(v);
    batonComm_t comm;
    return batonCommInitFromEnv(&comm) == batonInvalidUsage ? 0 : 1;
  }));
}

TEST(InitFromEnvErrors, RankOutOfRangeIsInvalidArgument) {
  EXPECT_TRUE(ForkRanks(1, [](int) {
    setenv("BATON_RANK", "5", 1);
    setenv("BATON_WORLD_SIZE", "2", 1);
    batonComm_t comm;
    return batonCommInitFromEnv(&comm) == batonInvalidArgument ? 0 : 1;
  }));
}

}  // namespace
}  // namespace baton
