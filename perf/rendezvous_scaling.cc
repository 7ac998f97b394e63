// rendezvous_scaling: the rendezvous alone (bootstrap/rendezvous.h), N ranks
// as threads of this process spread over H simulated hosts (their PeerInfo
// host hashes differ), so that 1k-4k ranks fit on one small machine. Every
// rank checks the table it gets. Prints the wall time from the start until
// the last rank has its table, per round, and their median; where the
// build has the host stage, also what the root saw. The same source builds
// against an older tree (the rendezvous's interface is unchanged), which is
// how docs/scaling.md compares before and after.
//
//   rendezvous_scaling -n 1024 [--hosts 128] [-r 3]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "baton.h"
#include "bootstrap/host_id.h"
#include "bootstrap/rendezvous.h"
#include "bootstrap/unique_id.h"
#if __has_include("bootstrap/host_stage.h")
#define HAVE_HOST_STAGE 1
#endif

namespace {

using Clock = std::chrono::steady_clock;

// One round: a fresh id, n threads; the wall seconds, or -1 on a failure.
double Round(int n, int hosts) {
  batonUniqueId uid;
  baton::UniqueIdData id;
  if (batonGetUniqueId(&uid) != batonSuccess || !baton::DecodeUniqueId(uid, &id).ok()) return -1;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  const auto start = Clock::now();
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      baton::PeerInfo mine{};
      mine.rank = r;
      mine.pid = r;
      const int host = r * hosts / n;  // consecutive ranks share a host
      mine.host_hash = baton::Fnv1a64(&host, sizeof(host));
      mine.listen_addr = id.root;  // an address of this machine
      snprintf(mine.hostname, sizeof(mine.hostname), "host%d", host);
      std::vector<baton::PeerInfo> all;
      const baton::Status st = baton::Rendezvous(id, n, r, mine, baton::DeadlineIn(120), &all);
      bool ok = st.ok() && static_cast<int>(all.size()) == n;
      for (int q = 0; ok && q < n; ++q) {
        const int qhost = q * hosts / n;
        ok = all[q].rank == q && all[q].host_hash == baton::Fnv1a64(&qhost, sizeof(qhost));
      }
      if (!ok) {
        if (failures++ == 0) fprintf(stderr, "rank %d: %s\n", r, st.message().c_str());
      }
    });
  }
  for (auto& t : threads) t.join();
  const double s = std::chrono::duration<double>(Clock::now() - start).count();
#ifdef HAVE_HOST_STAGE
  baton::RendezvousServerStats stats;
  for (int i = 0; i < 100 && !baton::FinishedRendezvousStats(id.comm_id, &stats); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  printf("  root: %d ranks from %d leaders in %d connections (at most %d open)\n", stats.ranks,
         stats.leaders, stats.connections, stats.peak_open);
#endif
  return failures == 0 ? s : -1;
}

}  // namespace

int main(int argc, char** argv) {
  int n = 1024, hosts = 128, rounds = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const int v = atoi(argv[i + 1]);
    if (flag == "-n")
      n = v;
    else if (flag == "--hosts")
      hosts = v;
    else if (flag == "-r")
      rounds = v;
    else {
      fprintf(stderr, "rendezvous_scaling: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  if (n < 1 || hosts < 1 || hosts > n || rounds < 1) {
    fprintf(stderr, "rendezvous_scaling: need 1 <= hosts <= n and rounds >= 1\n");
    return 2;
  }
  std::vector<double> walls;
  for (int r = 0; r < rounds; ++r) {
    const double s = Round(n, hosts);
    if (s < 0) return 1;
    printf("round %d: %d ranks on %d hosts: %.1f ms\n", r, n, hosts, s * 1e3);
    fflush(stdout);
    walls.push_back(s);
  }
  std::sort(walls.begin(), walls.end());
  printf("median: %.1f ms\n", walls[walls.size() / 2] * 1e3);
  return 0;
}
