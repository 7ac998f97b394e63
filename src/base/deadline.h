// Deadlines: every blocking wait in Baton has one.
#pragma once

#include <atomic>
#include <chrono>
#include <climits>

namespace baton {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

// What "wait forever" means (BATON_TIMEOUT=0): a year, so that deadlines and
// the timeouts derived from them stay finite numbers.
inline constexpr double kForeverSeconds = 365.0 * 24 * 3600;

// A deadline `seconds` from now; non-positive means kForeverSeconds.
inline Deadline DeadlineIn(double seconds) {
  if (seconds <= 0) seconds = kForeverSeconds;
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// Milliseconds left until `deadline`, clamped to [0, INT_MAX] for poll().
inline int MillisLeft(Deadline deadline) {
  auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left <= 0) return 0;
  return left > INT_MAX ? INT_MAX : static_cast<int>(left);
}

// Makes this thread's socket waits (base/socket.h) end early when `*flag`
// becomes true, while the scope lives: a communicator created in the
// background (batonConfig_t.blocking = 0) stops waiting for its peers soon
// after batonCommAbort. The waits then poll in slices of kCancelSliceMs.
class CancelScope {
 public:
  explicit CancelScope(const std::atomic<bool>* flag);
  ~CancelScope();
  CancelScope(const CancelScope&) = delete;
  CancelScope& operator=(const CancelScope&) = delete;

 private:
  const std::atomic<bool>* previous_;
};
inline constexpr int kCancelSliceMs = 50;

}  // namespace baton
