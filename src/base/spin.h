// How Baton's waits poll before they sleep: one policy (BATON_SPIN_US,
// BATON_SPIN_YIELD, BATON_SPIN_YIELD_NS) for the executor's channels, the
// registered-buffer and single-copy waits on peers, host streams and CUDA
// events (docs/design.md, "Waiting").
//
// A wait polls for `spin`, between polls executing the CPU's spin hint, and
// every `yield_interval` sched_yield instead: on an idle core that returns
// at once, and where ranks outnumber the cores it hands the core straight to
// the peer being waited for, which pause alone would delay. After `spin`
// the wait sleeps (a futex, poll(2), a condition variable), each on its own
// terms.
#pragma once

#include <chrono>
#include <cstdint>

#include "base/deadline.h"

namespace baton {

struct SpinPolicy {
  std::chrono::nanoseconds spin{200000};          // poll this long before sleeping
  std::chrono::nanoseconds yield_interval{1000};  // sched_yield at most this often
  bool yield = true;                              // sched_yield at all

  // The policy of BATON_SPIN_US, BATON_SPIN_YIELD and BATON_SPIN_YIELD_NS
  // (-1: every 1 us, or on every poll where the core may be wanted by the
  // ones it waits for: `crowded`, more ranks than cores on this machine, or
  // a helper thread beside its caller).
  static SpinPolicy Of(int64_t spin_us, bool yield, int64_t yield_ns, bool crowded);
};

// The polls of one wait. Between two polls call Pause(now): it pauses the
// core (or yields, every yield_interval) and returns true while the wait
// should keep polling, false once `spin` has passed since the wait began
// or last Restart(), when it should sleep (without pausing).
class Spinner {
 public:
  Spinner(const SpinPolicy& policy, Clock::time_point now)
      : policy_(policy), start_(now), last_yield_(now) {}
  // A fresh spin, as after a sleep, or when progress ended the last one.
  void Restart(Clock::time_point now) {
    start_ = now;
    last_yield_ = now;
  }
  bool Pause(Clock::time_point now);
  bool Pause() { return Pause(Clock::now()); }

 private:
  const SpinPolicy& policy_;
  Clock::time_point start_, last_yield_;
};

}  // namespace baton
