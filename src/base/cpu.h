// What Baton needs from the processor beyond portable C++, one definition per
// architecture (x86-64 and aarch64; others get portable fallbacks): the
// spin-wait hint, the padding that keeps ranks' and threads' words off each
// other's cache lines, the cache line the CPU really has, and a cheap cycle
// counter for the timeline. The reduce-copy kernels' instruction sets are
// kernels/'s business, not this file's.
#pragma once

#include <cstddef>
#include <cstdint>

namespace baton {

// Padding between words that different ranks or threads write (a ring's
// tail, a slot's control word, a doorbell), in shared memory and in
// process: at compile time, so it must cover every CPU the binary may run
// on. x86-64 lines are 64 bytes. On aarch64 they are 64 on Neoverse
// (Graviton, Grace) and 128 on Apple's and some other cores, so 128 there;
// A64FX's 256-byte lines are left to a warning (WarnIfCacheLineExceedsPadding).
#if defined(__aarch64__)
inline constexpr size_t kCacheLinePad = 128;
#else
inline constexpr size_t kCacheLinePad = 64;
#endif

// The data cache line of this machine at run time: sysconf, else sysfs,
// else (aarch64) CTR_EL0's smallest data line, else 64. Read once.
size_t CacheLineBytes();

// The last-level cache of CPU 0 as sysfs describes it (sysconf's figure
// comes from CPUID, which in a VM may describe the whole host's), or 32 MiB
// when sysfs does not say. Read once.
size_t LastLevelCacheBytes();

// Whether a call in which `ranks` ranks of one host each have an input and
// an output of `bytes` overflows the last-level cache: its outputs are then
// written with streaming stores (smaller ones are read again from the
// cache soon after, and streaming them to memory first loses;
// docs/performance.md).
// `llc_bytes`: the cache to compare with (the cost model's, which every
// rank agrees on); this machine's by default.
inline bool StreamsOutputs(size_t ranks, size_t bytes, size_t llc_bytes = LastLevelCacheBytes()) {
  return 2 * static_cast<double>(ranks) * static_cast<double>(bytes) >
         static_cast<double>(llc_bytes);
}

// Logs a warning, once per process, when CacheLineBytes() exceeds
// kCacheLinePad: words padded apart may then still share a line (slower,
// never wrong).
void WarnIfCacheLineExceedsPadding();

// The hint in a busy-wait loop: yields the core's pipeline to the sibling
// hyperthread and slows the loop's polling of a line another core is about
// to write.
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  // Not `yield`: Neoverse cores execute it as a NOP, so the loop would spin
  // as tightly as without a hint; `isb` waits for the pipeline to drain
  // (tens of ns, like x86's pause). Rust's spin_loop() chose it likewise.
  asm volatile("isb" ::: "memory");
#else
  asm volatile("" ::: "memory");
#endif
}

// Asks for the line at `p` in a state this core may write: a producer about
// to publish there next pays for taking the line from its reader now, off
// the latency path, instead of when it publishes. Only a hint.
inline void PrefetchForWrite(const void* p) {
#if defined(__x86_64__) || defined(__i386__)
  // PREFETCHW; older Intel cores decode it as a NOP.
  asm volatile("prefetchw %0" ::"m"(*static_cast<const char*>(p)));
#else
  __builtin_prefetch(p, 1, 3);
#endif
}

// A counter that ticks at a constant rate and is read without a system
// call: the TSC on x86-64, the generic timer's virtual count (CNTVCT_EL0)
// on aarch64; elsewhere CLOCK_REALTIME in ns. Unserialized: the timeline's
// stamps need no ordering finer than the call they stamp.
inline constexpr bool kHaveCycleCounter =
#if defined(__x86_64__) || defined(__aarch64__)
    true;
#else
    false;
#endif
int64_t RealtimeNsForCounter();
inline int64_t ReadCycleCounter() {
#if defined(__x86_64__)
  return static_cast<int64_t>(__builtin_ia32_rdtsc());
#elif defined(__aarch64__)
  uint64_t ticks;
  asm volatile("mrs %0, cntvct_el0" : "=r"(ticks));
  return static_cast<int64_t>(ticks);
#else
  return RealtimeNsForCounter();
#endif
}

// Ticks per second of ReadCycleCounter where the architecture states it
// (aarch64: CNTFRQ_EL0); 0 where it must be measured against a clock (the
// TSC's rate is not architectural); 1e9 without a counter.
uint64_t CycleCounterHz();

}  // namespace baton
