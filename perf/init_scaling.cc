// init_scaling: how long a communicator takes to come up at a given size.
// Forks N ranks on this host; each creates a communicator, runs one 8-byte
// allreduce (checked) and destroys it. Prints the whole job's wall time and
// the slowest rank's init, first allreduce and destroy times, one line per
// run. The transport is BATON_TRANSPORT's as usual (shm or tcp).
//
//   init_scaling -n 64 [-r 5]
//
// perf/init_scaling.py sweeps sizes and transports and runs Open MPI's
// mpirun beside it (perf/peers/mpi_init_scaling.c). Large N needs one file
// descriptor per peer and rank or more: raise `ulimit -n` first.
#include <baton.h>

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// What each rank reports back to the parent, in shared memory.
struct RankTimes {
  double init_s;
  double allreduce_s;
  double destroy_s;
  int ok;
};

int RunRank(const batonUniqueId& id, int nranks, int rank, RankTimes* out) {
  const auto t0 = Clock::now();
  batonComm_t comm = nullptr;
  if (batonCommInitRank(&comm, nranks, id, rank) != batonSuccess) {
    fprintf(stderr, "rank %d: init failed: %s\n", rank, batonGetLastError(nullptr));
    return 1;
  }
  out->init_s = SecondsSince(t0);
  const auto t1 = Clock::now();
  double value = rank, sum = 0;
  if (batonAllReduce(&value, &sum, 1, batonFloat64, batonSum, comm, nullptr) != batonSuccess) {
    fprintf(stderr, "rank %d: allreduce failed: %s\n", rank, batonGetLastError(comm));
    return 1;
  }
  out->allreduce_s = SecondsSince(t1);
  const double want = 0.5 * nranks * (nranks - 1);
  if (sum != want) {
    fprintf(stderr, "rank %d: allreduce gave %g, want %g\n", rank, sum, want);
    return 1;
  }
  const auto t2 = Clock::now();
  if (batonCommDestroy(comm) != batonSuccess) return 1;
  out->destroy_s = SecondsSince(t2);
  out->ok = 1;
  return 0;
}

// One job: fork nranks ranks, wait for all. Returns false if any failed.
bool RunJob(int nranks, RankTimes* times) {
  memset(times, 0, sizeof(RankTimes) * nranks);
  const auto t0 = Clock::now();
  batonUniqueId id;
  if (batonGetUniqueId(&id) != batonSuccess) {
    fprintf(stderr, "batonGetUniqueId: %s\n", batonGetLastError(nullptr));
    return false;
  }
  std::vector<pid_t> pids;
  for (int r = 0; r < nranks; ++r) {
    const pid_t pid = fork();
    if (pid == 0) _exit(RunRank(id, nranks, r, &times[r]));
    if (pid < 0) {
      perror("fork");
      break;
    }
    pids.push_back(pid);
  }
  bool ok = static_cast<int>(pids.size()) == nranks;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  const double wall = SecondsSince(t0);
  double init = 0, allreduce = 0, destroy = 0;
  for (int r = 0; r < nranks; ++r) {
    ok = ok && times[r].ok;
    init = std::max(init, times[r].init_s);
    allreduce = std::max(allreduce, times[r].allreduce_s);
    destroy = std::max(destroy, times[r].destroy_s);
  }
  const char* transport = getenv("BATON_TRANSPORT");
  printf(
      "init_scaling transport=%s ranks=%d wall_s=%.4f init_s=%.4f allreduce_s=%.4f "
      "destroy_s=%.4f ok=%d\n",
      transport && *transport ? transport : "auto", nranks, wall, init, allreduce, destroy,
      ok ? 1 : 0);
  fflush(stdout);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  int nranks = 8, runs = 1;
  int opt;
  while ((opt = getopt(argc, argv, "n:r:h")) != -1) {
    switch (opt) {
      case 'n':
        nranks = atoi(optarg);
        break;
      case 'r':
        runs = atoi(optarg);
        break;
      default:
        fprintf(stderr, "usage: %s -n RANKS [-r RUNS]\n", argv[0]);
        return opt == 'h' ? 0 : 2;
    }
  }
  if (nranks < 1 || nranks > 65536 || runs < 1) {
    fprintf(stderr, "init_scaling: -n must be 1..65536 and -r at least 1\n");
    return 2;
  }
  void* shared = mmap(nullptr, sizeof(RankTimes) * nranks, PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) {
    perror("mmap");
    return 1;
  }
  bool ok = true;
  for (int i = 0; i < runs; ++i) ok = RunJob(nranks, static_cast<RankTimes*>(shared)) && ok;
  munmap(shared, sizeof(RankTimes) * nranks);
  return ok ? 0 : 1;
}
