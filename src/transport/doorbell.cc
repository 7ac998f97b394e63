#include "transport/doorbell.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>
#include <ctime>

namespace baton {
namespace {

// Shared (not FUTEX_PRIVATE) futexes: the word is mapped by several processes.
long Futex(std::atomic<uint32_t>* addr, int op, uint32_t val, const timespec* ts) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), op, val, ts, nullptr, 0);
}

}  // namespace

void ForceRingDoorbell(Doorbell* bell) {
  bell->seq.fetch_add(1, std::memory_order_seq_cst);
  Futex(&bell->seq, FUTEX_WAKE, INT_MAX, nullptr);
}

void RingDoorbell(Doorbell* bell) {
  // The caller published its data before this; the fence orders that store
  // before the load of `waiting` (the other half of the waiter's protocol).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (bell->waiting.load(std::memory_order_relaxed) != 0) ForceRingDoorbell(bell);
}

void WaitDoorbell(Doorbell* bell, uint32_t seen, int timeout_ms) {
  timespec ts{timeout_ms / 1000, (timeout_ms % 1000) * 1000000L};
  Futex(&bell->seq, FUTEX_WAIT, seen, &ts);
}

}  // namespace baton
