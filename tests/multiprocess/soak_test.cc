// Soak: many calls and many communicators must leave the process as they
// found it. 100,000 small and 1,000 large allreduces, then 50 communicators
// made by split and destroyed, on shared memory and TCP: resident memory
// and open file descriptors after the work equal (memory: within a small
// slack for the allocator) those after a warm-up, and every result is right.
#include <baton.h>
#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/mp_harness.h"

namespace {

using baton_test::Options;
using baton_test::RankContext;
using baton_test::RunRanks;

long ResidentKiB() {
  long pages = 0, resident = 0;
  FILE* f = fopen("/proc/self/statm", "r");
  if (f == nullptr) return -1;
  if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = -1;
  fclose(f);
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

int OpenFds() {
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return -1;
  int n = 0;
  while (readdir(d) != nullptr) ++n;
  closedir(d);
  return n - 3;  // ., .. and the directory's own descriptor
}

constexpr int kSmall = 100000;
constexpr int kLarge = 1000;
constexpr size_t kLargeCount = size_t{1} << 20;  // 4 MiB of floats
constexpr int kComms = 50;
constexpr long kResidentSlackKiB = 2048;

class SoakTest : public ::testing::TestWithParam<const char*> {};

TEST_P(SoakTest, MemoryAndDescriptorsStayFlat) {
  Options options;
  options.env = {{"BATON_TRANSPORT", GetParam()}, {"BATON_TIMEOUT", "60"}};
  options.deadline = std::chrono::seconds(240);
  RunRanks(
      2,
      [](RankContext& ctx) {
        std::vector<float> small(16), large(kLargeCount);
        auto small_round = [&](int i) {
          for (size_t j = 0; j < small.size(); ++j) small[j] = float(ctx.rank() + i % 7 + j);
          MP_ASSERT_OK(ctx, batonAllReduce(small.data(), small.data(), small.size(), batonFloat,
                                           batonSum, ctx.comm(), nullptr));
          for (size_t j = 0; j < small.size(); ++j)
            MP_ASSERT_EQ(ctx, small[j], float(2 * (i % 7 + j) + 1)) << i;
        };
        auto large_round = [&](int i) {
          for (size_t j = 0; j < large.size(); j += 4099) large[j] = float(ctx.rank() + i % 5);
          MP_ASSERT_OK(ctx, batonAllReduce(large.data(), large.data(), large.size(), batonFloat,
                                           batonMax, ctx.comm(), nullptr));
          MP_ASSERT_EQ(ctx, large[4099], float(1 + i % 5)) << i;
        };
        auto split_round = [&] {
          batonComm_t sub = nullptr;
          MP_ASSERT_OK(ctx, batonCommSplit(ctx.comm(), 0, ctx.rank(), &sub, nullptr));
          MP_ASSERT_OK(ctx, batonAllReduce(small.data(), small.data(), 1, batonFloat, batonSum, sub,
                                           nullptr));
          MP_ASSERT_OK(ctx, batonCommDestroy(sub));
        };
        // Warm-up: every path once, so caches and pools exist before the baseline.
        for (int i = 0; i < 100; ++i) small_round(i);
        for (int i = 0; i < 5; ++i) large_round(i);
        for (int i = 0; i < 3; ++i) split_round();
        const long rss0 = ResidentKiB();
        const int fds0 = OpenFds();
        for (int i = 0; i < kSmall; ++i) small_round(i);
        const long rss1 = ResidentKiB();
        for (int i = 0; i < kLarge; ++i) large_round(i);
        const long rss2 = ResidentKiB();
        for (int i = 0; i < kComms; ++i) split_round();
        const long rss3 = ResidentKiB();
        const int fds3 = OpenFds();
        MP_EXPECT_EQ(ctx, fds3, fds0) << " open descriptors before and after";
#if !defined(__SANITIZE_ADDRESS__)
        // (Under AddressSanitizer freed memory waits in its quarantine, so
        // resident memory grows by design; LeakSanitizer checks leaks there.)
        MP_EXPECT_LT(ctx, rss3 - rss0, kResidentSlackKiB)
            << " KiB of resident memory grown (" << rss0 << " -> " << rss1 << " -> " << rss2
            << " -> " << rss3 << ")";
#endif
        if (ctx.rank() == 0)
          ctx.Log("resident KiB " + std::to_string(rss0) + " -> " + std::to_string(rss1) +
                  " (small) -> " + std::to_string(rss2) + " (large) -> " + std::to_string(rss3) +
                  " (communicators); descriptors " + std::to_string(fds0) + " -> " +
                  std::to_string(fds3));
      },
      options);
}

INSTANTIATE_TEST_SUITE_P(Transports, SoakTest, ::testing::Values("shm", "tcp"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
