// The latency floor of a small allreduce on one host: what the hardware
// charges for p threads, one per core, to each publish a value and read
// everyone else's, with nothing but the exchange in the loop. Each thread owns
// one cache line {sequence number, value}; per round it writes its value and
// the round's number, waits (polling with the pause hint) until every other
// line carries that number, and adds the values up. No library does less
// than this per call, so an 8-byte allreduce's time divided by this figure
// says how much a library adds to the cache-line transfers themselves (the
// small-message counterpart of stream_all_cores' memory roofline;
// docs/performance.md). A round is one 64-bit store per thread: the round's
// number in the high half, a float value in the low half; two such words
// per line, alternating by round, so that a fast thread's next write never
// overwrites a value a slow one has yet to read.
//
// Usage: shm_latency_floor [threads, default 2] [rounds, default 1000000]
// [repetitions, default 7]. Pins thread i to the i-th CPU it may run on;
// refuses more threads than CPUs (waiting threads would spin on the core the
// one they wait for needs). Prints the best and the median repetition in us
// per round.
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {

struct alignas(128) Line {
  std::atomic<uint64_t> word[2] = {0, 0};  // round << 32 | float bits
};

uint64_t Word(uint32_t round, float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return static_cast<uint64_t>(round) << 32 | bits;
}

float ValueOf(uint64_t word) {
  const auto bits = static_cast<uint32_t>(word);
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

inline void Pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("isb" ::: "memory");
#endif
}

bool PinTo(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const long rounds = argc > 2 ? std::atol(argv[2]) : 1000000;
  const int reps = argc > 3 ? std::atoi(argv[3]) : 7;
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) {
    std::perror("sched_getaffinity");
    return 1;
  }
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
  if (threads < 2 || rounds < 1 || reps < 1 || threads > static_cast<int>(cpus.size())) {
    std::fprintf(stderr,
                 "usage: shm_latency_floor [threads 2..%zu] [rounds >= 1] [repetitions >= 1]\n",
                 cpus.size());
    return 2;
  }
  std::vector<Line> lines(threads);
  std::vector<double> times;
  double checksum = 0;
  for (int rep = 0; rep < reps; ++rep) {
    for (auto& l : lines) l.word[0] = l.word[1] = 0;
    std::barrier start(threads);
    std::vector<double> seconds(threads);
    std::vector<double> sums(threads);
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        PinTo(cpus[t]);
        start.arrive_and_wait();
        const auto begin = std::chrono::steady_clock::now();
        double sum = 0;
        for (long r = 1; r <= rounds; ++r) {
          const auto round = static_cast<uint32_t>(r);
          const float mine = static_cast<float>((r + t) & 0xffff);
          lines[t].word[r & 1].store(Word(round, mine), std::memory_order_release);
          float total = mine;
          for (int q = 0; q < threads; ++q) {
            if (q == t) continue;
            uint64_t w;
            while (static_cast<uint32_t>(
                       (w = lines[q].word[r & 1].load(std::memory_order_acquire)) >> 32) != round)
              Pause();
            total += ValueOf(w);
          }
          sum += total;
        }
        seconds[t] =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
        sums[t] = sum;
      });
    }
    for (auto& th : pool) th.join();
    times.push_back(*std::max_element(seconds.begin(), seconds.end()) / rounds * 1e6);
    checksum += sums[0];
  }
  std::vector<double> sorted = times;
  std::sort(sorted.begin(), sorted.end());
  std::printf(
      "shm latency floor, %d threads, %ld rounds: best %.4f us, median %.4f us per round "
      "(checksum %.0f)\n",
      threads, rounds, sorted.front(), sorted[sorted.size() / 2], checksum);
  return 0;
}
