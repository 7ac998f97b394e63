#include "base/cpu.h"

#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "base/log.h"

namespace baton {

namespace {

size_t ReadCacheLine() {
  const long n = sysconf(_SC_LEVEL1_DCACHE_LINESIZE);
  if (n > 0) return static_cast<size_t>(n);
  // glibc answers 0 where it has no table for the CPU; the kernel knows.
  if (FILE* f = fopen("/sys/devices/system/cpu/cpu0/cache/index0/coherency_line_size", "r")) {
    unsigned bytes = 0;
    const bool ok = fscanf(f, "%u", &bytes) == 1 && bytes > 0;
    fclose(f);
    if (ok) return bytes;
  }
#if defined(__aarch64__)
  // CTR_EL0 is readable at EL0 under Linux; DminLine (bits 19:16) is log2 of
  // the smallest data line in 4-byte words.
  uint64_t ctr;
  asm volatile("mrs %0, ctr_el0" : "=r"(ctr));
  return size_t{4} << ((ctr >> 16) & 0xf);
#else
  return 64;
#endif
}

}  // namespace

size_t CacheLineBytes() {
  static const size_t bytes = ReadCacheLine();
  return bytes;
}

void WarnIfCacheLineExceedsPadding() {
  static const bool warned = [] {
    if (CacheLineBytes() <= kCacheLinePad) return false;
    BATON_WARN(kLogShm,
               "this CPU's cache line is %zu bytes but Baton pads shared words to %zu: "
               "ranks may share lines (slower, still correct)",
               CacheLineBytes(), kCacheLinePad);
    return true;
  }();
  (void)warned;
}

int64_t RealtimeNsForCounter() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

uint64_t CycleCounterHz() {
#if defined(__x86_64__)
  return 0;
#elif defined(__aarch64__)
  uint64_t hz;
  asm volatile("mrs %0, cntfrq_el0" : "=r"(hz));
  return hz;
#else
  return 1000000000;
#endif
}

size_t LastLevelCacheBytes() {
  static const size_t bytes = [] {
    size_t best = 0;
    int best_level = -1;
    for (int i = 0; i < 16; ++i) {
      const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
      std::ifstream level_file(dir + "level"), size_file(dir + "size");
      int level = 0;
      std::string size;
      // The kernel numbers a CPU's caches from index0 without gaps.
      if (!(level_file >> level) || !(size_file >> size)) break;
      size_t value = std::strtoull(size.c_str(), nullptr, 10);
      if (size.back() == 'K') value <<= 10;
      if (size.back() == 'M') value <<= 20;
      if (level > best_level) {
        best_level = level;
        best = value;
      }
    }
    return best > 0 ? best : size_t{32} << 20;
  }();
  return bytes;
}

}  // namespace baton
