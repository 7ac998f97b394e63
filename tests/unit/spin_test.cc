// The one spin policy of Baton's waits (base/spin.h): what BATON_SPIN_*
// turn into, and when a wait stops polling and sleeps.
#include "base/spin.h"

#include <gtest/gtest.h>

#include <chrono>

namespace baton {
namespace {

using std::chrono::microseconds;
using std::chrono::nanoseconds;

TEST(SpinPolicy, YieldsEveryMicrosecondUnlessCrowded) {
  const SpinPolicy idle = SpinPolicy::Of(200, true, -1, /*crowded=*/false);
  EXPECT_EQ(idle.spin, microseconds(200));
  EXPECT_EQ(idle.yield_interval, nanoseconds(1000));
  EXPECT_TRUE(idle.yield);
  const SpinPolicy crowded = SpinPolicy::Of(200, true, -1, /*crowded=*/true);
  EXPECT_EQ(crowded.yield_interval, nanoseconds(0));
}

TEST(SpinPolicy, ExplicitSettingsWin) {
  // BATON_SPIN_YIELD_NS set: the same interval crowded or not.
  EXPECT_EQ(SpinPolicy::Of(50, true, 5000, true).yield_interval, nanoseconds(5000));
  EXPECT_EQ(SpinPolicy::Of(50, true, 0, false).yield_interval, nanoseconds(0));
  EXPECT_FALSE(SpinPolicy::Of(50, false, -1, true).yield);
  // BATON_SPIN_US out of range: no spin at all, or at most a second.
  EXPECT_EQ(SpinPolicy::Of(-3, true, -1, false).spin, nanoseconds(0));
  EXPECT_EQ(SpinPolicy::Of(int64_t{1} << 40, true, -1, false).spin, microseconds(1000000));
}

TEST(Spinner, PollsUntilTheSpinHasPassedThenSleeps) {
  const SpinPolicy policy = SpinPolicy::Of(100, true, -1, false);
  const Clock::time_point t0 = Clock::now();
  Spinner spinner(policy, t0);
  EXPECT_TRUE(spinner.Pause(t0));
  EXPECT_TRUE(spinner.Pause(t0 + microseconds(50)));
  EXPECT_TRUE(spinner.Pause(t0 + microseconds(99)));
  EXPECT_FALSE(spinner.Pause(t0 + microseconds(100)));
  EXPECT_FALSE(spinner.Pause(t0 + microseconds(500)));
  // After a sleep (or progress) the wait spins again from then.
  spinner.Restart(t0 + microseconds(500));
  EXPECT_TRUE(spinner.Pause(t0 + microseconds(550)));
  EXPECT_FALSE(spinner.Pause(t0 + microseconds(600)));
}

TEST(Spinner, NoSpinSleepsAtOnce) {
  const SpinPolicy policy = SpinPolicy::Of(0, true, -1, true);
  Spinner spinner(policy, Clock::now());
  EXPECT_FALSE(spinner.Pause());
}

TEST(Spinner, RealClockEndsTheSpin) {
  // With the clock read inside, a short spin ends by itself: the bound a
  // wait relies on before it sleeps (yielding every poll, pausing never).
  for (const bool yield : {true, false}) {
    const SpinPolicy policy = SpinPolicy::Of(200, yield, 0, false);
    const Clock::time_point start = Clock::now();
    Spinner spinner(policy, start);
    int polls = 0;
    while (spinner.Pause()) ++polls;
    EXPECT_GE(Clock::now() - start, microseconds(200));
    EXPECT_GT(polls, 0);
  }
}

}  // namespace
}  // namespace baton
