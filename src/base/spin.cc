#include "base/spin.h"

#include <sched.h>

#include <algorithm>

#include "base/cpu.h"

namespace baton {

SpinPolicy SpinPolicy::Of(int64_t spin_us, bool yield, int64_t yield_ns, bool crowded) {
  SpinPolicy policy;
  policy.spin = std::chrono::microseconds(std::clamp<int64_t>(spin_us, 0, 1000000));
  policy.yield_interval = std::chrono::nanoseconds(yield_ns >= 0 ? yield_ns : (crowded ? 0 : 1000));
  policy.yield = yield;
  return policy;
}

bool Spinner::Pause(Clock::time_point now) {
  if (now - start_ >= policy_.spin) return false;
  if (policy_.yield && now - last_yield_ >= policy_.yield_interval) {
    sched_yield();
    last_yield_ = now;
  } else {
    CpuRelax();
  }
  return true;
}

}  // namespace baton
