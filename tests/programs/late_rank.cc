// A job with a rank that never comes: every rank makes a few calls, then
// rank `late` (argv[1], default 2) sleeps instead of the last allreduce
// while the others wait in it. For the flight recorder tests of batonrun.
#include <baton.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  const int late = argc > 1 ? atoi(argv[1]) : 2;
  batonComm_t comm = nullptr;
  if (batonCommInitFromEnv(&comm) != batonSuccess) {
    fprintf(stderr, "init: %s\n", batonGetLastError(nullptr));
    return 1;
  }
  int rank = 0;
  batonCommUserRank(comm, &rank);
  std::vector<float> v(4096, 1.0f);
  for (int i = 0; i < 3; ++i)
    batonAllReduce(v.data(), v.data(), v.size(), batonFloat, batonSum, comm, nullptr);
  batonBroadcast(v.data(), v.data(), 10, batonFloat, 0, comm, nullptr);
  if (rank == late) {
    sleep(600);
    return 0;
  }
  const batonResult_t r =
      batonAllReduce(v.data(), v.data(), v.size(), batonFloat, batonSum, comm, nullptr);
  printf("rank %d: %s\n", rank, batonGetLastError(comm));
  batonCommAbort(comm);
  return r == batonSuccess ? 0 : 1;
}
