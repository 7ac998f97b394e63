// The memory roofline of a collective on one host (issue 15): STREAM "Add"
// (c[i] = a[i] + b[i]) run by one thread per core at once, each on its own
// arrays, counting 3 x bytes per thread as STREAM does. A p-rank allreduce
// moves at least 2pn bytes through memory, so its bus bandwidth is bounded
// by this figure times (p - 1) / p^2 (docs/performance.md). One core's
// STREAM add (kernels_bench) is no bound for it: the ranks run on all cores.
//
// Usage: stream_all_cores [MiB per array, default 64] [threads, default all
// online cores] [repetitions, default 7]. Prints the best and the median
// repetition in GB/s.
#include <unistd.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

namespace {

__attribute__((noinline)) void StreamAdd(float* __restrict__ c, const float* __restrict__ a,
                                         const float* __restrict__ b, size_t n) {
  for (size_t i = 0; i < n; ++i) c[i] = a[i] + b[i];
}

}  // namespace

int main(int argc, char** argv) {
  const size_t mib = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 64;
  const int threads =
      argc > 2 ? std::atoi(argv[2]) : static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  const int reps = argc > 3 ? std::atoi(argv[3]) : 7;
  const size_t n = (mib << 20) / sizeof(float);
  std::vector<std::vector<float>> arrays(3 * threads);
  for (auto& v : arrays) v.assign(n, 1.0f);  // touched: no page faults in the timed part
  std::vector<double> rates;
  // Each thread times itself from the common start: the interval from the earliest start to
  // the latest end is the time all of them needed together (timing in the main thread would
  // count from when it was scheduled again, which on a busy host is after the work began).
  constexpr int kPasses = 5;  // per repetition, so one is long enough to time
  using Clock = std::chrono::steady_clock;
  for (int rep = 0; rep < reps; ++rep) {
    std::barrier start(threads);
    std::vector<Clock::time_point> begin(threads), end(threads);
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        start.arrive_and_wait();
        begin[t] = Clock::now();
        for (int pass = 0; pass < kPasses; ++pass)
          StreamAdd(arrays[3 * t + 2].data(), arrays[3 * t].data(), arrays[3 * t + 1].data(), n);
        end[t] = Clock::now();
      });
    }
    for (auto& th : pool) th.join();
    const double s = std::chrono::duration<double>(*std::max_element(end.begin(), end.end()) -
                                                   *std::min_element(begin.begin(), begin.end()))
                         .count();
    rates.push_back(3.0 * sizeof(float) * n * threads * kPasses / s / 1e9);
  }
  std::sort(rates.begin(), rates.end());
  std::printf("STREAM add, %d threads, %zu MiB arrays: best %.2f GB/s, median %.2f GB/s\n", threads,
              mib, rates.back(), rates[rates.size() / 2]);
  return 0;
}
