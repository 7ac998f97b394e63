// A communicator's first calls, one by one: how much slower they are than its steady state, and
// which single calls stand out. nccl-tests (and perf/compare.py, which times 200 calls after 2
// warm-up calls) report a mean that hides this; a training step that runs a few hundred
// collectives per size does not.
//
//   batonrun -n 2 first_calls [-b bytes] [-n calls]
//
// Rank 0 prints the median time per call (us) of the buckets [0,1) [1,3) [3,10) [10,30)
// [30,100) [100,300) [300,1000) [1000,n), the mean of calls 3 to 202 (what a 200-call run after
// 2 warm-up calls measures) against the median of the last bucket, and every call that took
// more than 3x that median (its index and time), at most 20. Allreduce of float sum, out of
// place, the same buffers every call, after one barrier (which connects the ranks).
#include <baton.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int Fail(const char* what, batonResult_t r, batonComm_t comm) {
  std::fprintf(stderr, "first_calls: %s: %s (%s)\n", what, batonGetErrorString(r),
               batonGetLastError(comm));
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  size_t bytes = 8;
  int calls = 2000;
  for (int opt; (opt = getopt(argc, argv, "b:n:")) != -1;) {
    if (opt == 'b') {
      char* end = nullptr;
      bytes = std::strtoull(optarg, &end, 10);
      if (*end == 'K' || *end == 'k') bytes <<= 10;
      if (*end == 'M' || *end == 'm') bytes <<= 20;
    } else if (opt == 'n') {
      calls = std::atoi(optarg);
    } else {
      std::fprintf(stderr, "usage: batonrun -n N %s [-b bytes] [-n calls]\n", argv[0]);
      return 2;
    }
  }
  if (calls < 1 || bytes % sizeof(float) != 0) {
    std::fprintf(stderr, "first_calls: -n must be positive and -b a multiple of 4\n");
    return 2;
  }
  batonComm_t comm = nullptr;
  if (batonResult_t r = batonCommInitFromEnv(&comm); r != batonSuccess)
    return Fail("batonCommInitFromEnv", r, nullptr);
  int rank = 0;
  batonCommUserRank(comm, &rank);
  const size_t count = bytes / sizeof(float);
  std::vector<float> in(count + 1, 1.0f), out(count + 1, 0.0f);
  std::vector<double> us(static_cast<size_t>(calls));
  if (batonResult_t r = batonBarrier(comm, nullptr); r != batonSuccess)
    return Fail("batonBarrier", r, comm);
  for (int i = 0; i < calls; ++i) {
    const auto start = std::chrono::steady_clock::now();
    const batonResult_t r =
        batonAllReduce(in.data(), out.data(), count, batonFloat, batonSum, comm, nullptr);
    const auto end = std::chrono::steady_clock::now();
    if (r != batonSuccess) return Fail("batonAllReduce", r, comm);
    us[static_cast<size_t>(i)] = std::chrono::duration<double, std::micro>(end - start).count();
  }
  int nranks = 1;
  batonCommCount(comm, &nranks);
  if (count > 0 && out[0] != static_cast<float>(nranks)) {
    std::fprintf(stderr, "first_calls: wrong sum %g on rank %d (expected %d)\n", out[0], rank,
                 nranks);
    return 1;
  }
  if (rank == 0) {
    const int edges[] = {0, 1, 3, 10, 30, 100, 300, 1000, calls};
    std::printf("%zu B, %d ranks, %d calls; median us per call of calls [from, to):\n", bytes,
                nranks, calls);
    double steady = 0;
    for (size_t k = 0; k + 1 < std::size(edges); ++k) {
      const int from = edges[k], to = std::min(edges[k + 1], calls);
      if (from >= to) break;
      steady = Median(std::vector<double>(us.begin() + from, us.begin() + to));
      std::printf("  [%d, %d) %.3f\n", from, to, steady);
    }
    if (calls >= 203) {
      double sum = 0;
      for (int i = 3; i < 203; ++i) sum += us[static_cast<size_t>(i)];
      std::printf("mean of calls 3-202: %.3f us, %.2fx the last bucket's median\n", sum / 200,
                  sum / 200 / steady);
    }
    std::string slow;
    int shown = 0;
    for (int i = 0; i < calls && shown < 20; ++i) {
      if (us[static_cast<size_t>(i)] <= 3 * steady) continue;
      char item[48];
      std::snprintf(item, sizeof(item), " %d:%.1f", i, us[static_cast<size_t>(i)]);
      slow += item;
      ++shown;
    }
    std::printf("calls over 3x (index:us):%s\n", slow.empty() ? " none" : slow.c_str());
  }
  batonCommDestroy(comm);
  return 0;
}
