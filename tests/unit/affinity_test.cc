// base/affinity.h: the kernel's CPU lists, and the widening of a thread
// bound to one CPU (checked against what sched_getaffinity then reports).
#include "base/affinity.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <thread>
#include <vector>

namespace baton {
namespace {

TEST(AffinityTest, ParsesCpuLists) {
  std::vector<int> cpus;
  ASSERT_TRUE(ParseCpuList("0-3,8,10-11", &cpus));
  EXPECT_EQ(cpus, (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  ASSERT_TRUE(ParseCpuList("5", &cpus));
  EXPECT_EQ(cpus, std::vector<int>{5});
  EXPECT_FALSE(ParseCpuList("", &cpus));
  EXPECT_FALSE(ParseCpuList("3-1", &cpus));
  EXPECT_FALSE(ParseCpuList("a", &cpus));
  EXPECT_FALSE(ParseCpuList("1-x", &cpus));
}

int CpuCount() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  return sched_getaffinity(0, sizeof(mask), &mask) == 0 ? CPU_COUNT(&mask) : -1;
}

// In a thread of its own, so the test's other threads keep their mask.
TEST(AffinityTest, WidensAThreadBoundToOneCpu) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  ASSERT_EQ(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
  if (CPU_COUNT(&allowed) < 2) GTEST_SKIP() << "this process may use one CPU only";
  int first = 0;
  while (!CPU_ISSET(first, &allowed)) ++first;
  std::thread([&] {
    // Two CPUs: left alone.
    EXPECT_EQ(WidenSingleCpuAffinity(), "");
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
    ASSERT_EQ(CpuCount(), 1);
    const std::string line = WidenSingleCpuAffinity();
    // A one-CPU NUMA node is the one case left alone; this machine's node
    // is then what sysfs says.
    if (line.empty()) {
      EXPECT_EQ(CpuCount(), 1);
    } else {
      EXPECT_GE(CpuCount(), 2) << line;
      EXPECT_NE(line.find("CPU " + std::to_string(first) + " alone"), std::string::npos) << line;
    }
  }).join();
}

}  // namespace
}  // namespace baton
