// Allreduces (64 KiB) until one fails or argv[1] seconds (default 30) pass;
// prints the first error and exits 1 on one. For the network-namespace
// test that takes a host's link down under a running job.
#include <baton.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  const double limit_s = argc > 1 ? atof(argv[1]) : 30;
  batonComm_t comm = nullptr;
  if (batonCommInitFromEnv(&comm) != batonSuccess) {
    fprintf(stderr, "init: %s\n", batonGetLastError(nullptr));
    return 1;
  }
  int rank = 0;
  batonCommUserRank(comm, &rank);
  std::vector<float> v(16384, 1.0f);
  const auto start = std::chrono::steady_clock::now();
  long calls = 0;
  batonResult_t r = batonSuccess;
  while (r == batonSuccess &&
         std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < limit_s) {
    r = batonAllReduce(v.data(), v.data(), v.size(), batonFloat, batonMax, comm, nullptr);
    ++calls;
  }
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  printf("rank %d: %s after %ld calls, %.2f s: %s\n", rank, batonGetErrorString(r), calls, elapsed,
         batonGetLastError(comm));
  batonCommAbort(comm);
  return r == batonSuccess ? 0 : 1;
}
