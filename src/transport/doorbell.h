// Doorbell: how a rank sleeps until a peer (or its own watchdog) has news.
#pragma once

#include <atomic>
#include <cstdint>

#include "base/cpu.h"

namespace baton {

// A futex word that lives in shared memory, one per rank. A waiting rank
// announces itself in `waiting` before its last check of the channels;
// producers ring only when someone waits, so the fast path costs no syscall.
struct alignas(kCacheLinePad) Doorbell {
  std::atomic<uint32_t> seq{0};
  std::atomic<uint32_t> waiting{0};
};
static_assert(std::atomic<uint32_t>::is_always_lock_free);

// Wakes the owner of `bell` if it is (about to be) asleep.
void RingDoorbell(Doorbell* bell);
// Unconditionally bumps and wakes (for abort and peer death).
void ForceRingDoorbell(Doorbell* bell);
// Sleeps while bell->seq == seen, at most timeout_ms.
void WaitDoorbell(Doorbell* bell, uint32_t seen, int timeout_ms);

}  // namespace baton
