/*
 * CPU reduce-copy: dispatch on (datatype, op) to instantiations of the
 * portable core (reduce_copy.h), with loops shaped for auto-vectorization.
 *
 * Paths, from most to least specific:
 *   - plain copy (one source, no divisor): memcpy per destination;
 *   - two sources, one destination: a single fused loop, with __restrict__
 *     pointers when the destination overlaps neither source, or an in-place
 *     loop when it is exactly one of them;
 *   - anything else: a blocked loop that accumulates a block of elements in a
 *     local buffer, one source at a time, then stores it to each destination.
 * Every path applies the same core functors in the same order, so they agree
 * with reduceCopyRange (and so with the device kernels) bit for bit.
 *
 * Before those portable loops, reduceCopy offers the call to the vectorized
 * back ends (cpu_avx512.cc, cpu_avx2.cc) chosen at run time: the best the CPU
 * has, or what BATON_KERNELS asks for. They compute the same elements in the
 * same order and decline combinations they have no vector code for.
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include "kernels/cpu_reduce.h"

#include <assert.h>
#include <string.h>

#include <algorithm>
#include <atomic>
#include <string>

#include "base/datatype.h"
#include "base/log.h"
#include "base/settings.h"
#include "kernels/cpu_simd.h"
#include "kernels/reduce_copy.h"

namespace baton {
namespace {

// True when [p, p + bytes) and [q, q + bytes) share a byte.
bool rangesOverlap(const void* p, const void* q, size_t bytes) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const uintptr_t b = reinterpret_cast<uintptr_t>(q);
  return a < b + bytes && b < a + bytes;
}

// dst = a op b. The caller guarantees dst overlaps neither source (a and b may
// alias each other: restrict only forbids aliasing of modified objects), which
// lets the compiler vectorize without runtime alias checks.
template <typename T, typename Op, bool kDiv>
void reduce2(T* __restrict__ dst, const T* __restrict__ a, const T* __restrict__ b, size_t n,
             uint32_t divisor) {
  const Op op;
  for (size_t i = 0; i < n; ++i) {
    Accum<T> acc = op(loadAcc<T>(a[i]), loadAcc<T>(b[i]));
    if constexpr (kDiv) acc = postDivide<T>(acc, divisor);
    dst[i] = storeAcc<T>(acc);
  }
}

// In place: io is one operand and receives the result; kIoIsLeft says which
// operand it is, so the operand order (visible for Max/Min on NaN/±0 and for
// NaN payloads) matches the out-of-place path. other must not overlap io.
template <typename T, typename Op, bool kDiv, bool kIoIsLeft>
void reduce2InPlace(T* __restrict__ io, const T* __restrict__ other, size_t n, uint32_t divisor) {
  const Op op;
  for (size_t i = 0; i < n; ++i) {
    const Accum<T> x = loadAcc<T>(io[i]);
    const Accum<T> y = loadAcc<T>(other[i]);
    Accum<T> acc = kIoIsLeft ? op(x, y) : op(y, x);
    if constexpr (kDiv) acc = postDivide<T>(acc, divisor);
    io[i] = storeAcc<T>(acc);
  }
}

// General case. Reading a block of every source into a local accumulator
// before writing any destination makes in-place use (a destination equal to
// a source) safe, and every inner loop touches one pointer plus the local
// buffer, which the compiler can prove distinct, so each vectorizes.
template <typename T, typename Op, bool kDiv>
void reduceBlocked(const T* const* srcs, int nsrcs, T* const* dsts, int ndsts, size_t count,
                   uint32_t divisor) {
  using Acc = Accum<T>;
  // 4-8 KiB: stays in L1 next to the streamed sources.
  constexpr size_t kBlock = 1024;
  alignas(64) Acc acc[kBlock];
  const Op op;
  for (size_t base = 0; base < count; base += kBlock) {
    const size_t n = std::min(kBlock, count - base);
    const T* s0 = srcs[0] + base;
    for (size_t i = 0; i < n; ++i) acc[i] = loadAcc<T>(s0[i]);
    for (int s = 1; s < nsrcs; ++s) {
      const T* sp = srcs[s] + base;
      for (size_t i = 0; i < n; ++i) acc[i] = op(acc[i], loadAcc<T>(sp[i]));
    }
    if constexpr (kDiv) {
      for (size_t i = 0; i < n; ++i) acc[i] = postDivide<T>(acc[i], divisor);
    }
    // Round once into the first destination, then copy its bytes to the
    // others rather than converting again.
    T* d0 = dsts[0] + base;
    for (size_t i = 0; i < n; ++i) d0[i] = storeAcc<T>(acc[i]);
    for (int d = 1; d < ndsts; ++d) {
      if (dsts[d] != dsts[0]) memcpy(dsts[d] + base, d0, n * sizeof(T));
    }
  }
}

template <typename T, typename Op, bool kDiv>
void reduceTyped(const ReduceCopyArgs& args) {
  const size_t n = args.count;
  const uint32_t divisor = args.postDivisor;
  if (args.nsrcs == 2 && args.ndsts == 1) {
    T* dst = static_cast<T*>(args.dsts[0]);
    const T* a = static_cast<const T*>(args.srcs[0]);
    const T* b = static_cast<const T*>(args.srcs[1]);
    const size_t bytes = n * sizeof(T);
    const bool overlapsA = rangesOverlap(dst, a, bytes);
    const bool overlapsB = rangesOverlap(dst, b, bytes);
    if (!overlapsA && !overlapsB) {
      reduce2<T, Op, kDiv>(dst, a, b, n, divisor);
      return;
    }
    if (dst == a && !overlapsB) {
      reduce2InPlace<T, Op, kDiv, true>(dst, b, n, divisor);
      return;
    }
    if (dst == b && !overlapsA) {
      reduce2InPlace<T, Op, kDiv, false>(dst, a, n, divisor);
      return;
    }
    // dst == a == b: fall through to the general path.
  }
  const T* srcs[kMaxReduceSrcs];
  T* dsts[kMaxReduceDsts];
  for (int s = 0; s < args.nsrcs; ++s) srcs[s] = static_cast<const T*>(args.srcs[s]);
  for (int d = 0; d < args.ndsts; ++d) dsts[d] = static_cast<T*>(args.dsts[d]);
  reduceBlocked<T, Op, kDiv>(srcs, args.nsrcs, dsts, args.ndsts, n, divisor);
}

// ---- Kernel level ----------------------------------------------------------

constexpr int kLevelUnset = -1;
// The level reduceCopy runs; read on every call, so relaxed and lock-free.
std::atomic<int> gKernelLevel{kLevelUnset};
std::atomic<size_t> gNonTemporalMinBytes{kDefaultNonTemporalMinBytes};

bool parseKernelLevel(const std::string& text, CpuKernelLevel* out, bool* isAuto) {
  *isAuto = text == "auto";
  if (*isAuto) return true;
  for (CpuKernelLevel level :
       {CpuKernelLevel::kPortable, CpuKernelLevel::kAvx2, CpuKernelLevel::kAvx512}) {
    if (text == cpuKernelLevelName(level)) {
      *out = level;
      return true;
    }
  }
  return false;
}

// BATON_KERNELS, resolved against the CPU. Runs once per process.
CpuKernelLevel levelFromEnv() {
  const CpuKernelLevel best = bestCpuKernelLevel();
  CpuKernelLevel chosen = best;
  const std::string& name = ProcessSettings().kernels;
  CpuKernelLevel asked = best;
  bool isAuto = false;
  if (!parseKernelLevel(name, &asked, &isAuto)) {
    BATON_WARN(kLogEnv, "ignoring BATON_KERNELS=%s: expected auto, portable, avx2 or avx512",
               name.c_str());
  } else if (!isAuto && !cpuKernelLevelAvailable(asked)) {
    BATON_WARN(kLogEnv, "BATON_KERNELS=%s: this CPU lacks %s, using %s", name.c_str(),
               cpuKernelLevelName(asked), cpuKernelLevelName(best));
  } else if (!isAuto) {
    chosen = asked;
  }
  BATON_INFO(kLogInit, "reduce kernels: %s (best on this CPU: %s)", cpuKernelLevelName(chosen),
             cpuKernelLevelName(best));
  return chosen;
}

// Resolves BATON_KERNELS on first use; thread-safe (a static's initializer).
void ensureKernelLevel() {
  static const bool resolved = [] {
    int expected = kLevelUnset;
    gKernelLevel.compare_exchange_strong(expected, static_cast<int>(levelFromEnv()));
    return true;
  }();
  (void)resolved;
}

// Offers args to the vectorized back end of the current level; true when it
// ran them.
bool reduceCopySimd(const ReduceCopyArgs& args) {
  int level = gKernelLevel.load(std::memory_order_relaxed);
  if (level == kLevelUnset) {
    ensureKernelLevel();
    level = gKernelLevel.load(std::memory_order_relaxed);
  }
  if (level == static_cast<int>(CpuKernelLevel::kPortable)) return false;
  SimdOptions options;
  options.nonTemporalMinBytes = gNonTemporalMinBytes.load(std::memory_order_relaxed);
  if (level == static_cast<int>(CpuKernelLevel::kAvx512)) return reduceCopyAvx512(args, options);
  return reduceCopyAvx2(args, options);
}

}  // namespace

CpuKernelLevel bestCpuKernelLevel() {
  static const CpuKernelLevel best = cpuSupportsAvx512() ? CpuKernelLevel::kAvx512
                                     : cpuSupportsAvx2() ? CpuKernelLevel::kAvx2
                                                         : CpuKernelLevel::kPortable;
  return best;
}

bool cpuKernelLevelAvailable(CpuKernelLevel level) {
  switch (level) {
    case CpuKernelLevel::kPortable:
      return true;
    case CpuKernelLevel::kAvx2:
      return cpuSupportsAvx2();
    case CpuKernelLevel::kAvx512:
      return cpuSupportsAvx512();
    default:
      return false;
  }
}

CpuKernelLevel cpuKernelLevel() {
  ensureKernelLevel();
  return static_cast<CpuKernelLevel>(gKernelLevel.load(std::memory_order_relaxed));
}

bool setCpuKernelLevel(CpuKernelLevel level) {
  if (!cpuKernelLevelAvailable(level)) return false;
  ensureKernelLevel();  // so a later first call cannot overwrite this choice
  gKernelLevel.store(static_cast<int>(level), std::memory_order_relaxed);
  return true;
}

const char* cpuKernelLevelName(CpuKernelLevel level) {
  switch (level) {
    case CpuKernelLevel::kPortable:
      return "portable";
    case CpuKernelLevel::kAvx2:
      return "avx2";
    case CpuKernelLevel::kAvx512:
      return "avx512";
    default:
      return "invalid";
  }
}

size_t simdNonTemporalMinBytes() {
  return gNonTemporalMinBytes.load(std::memory_order_relaxed);
}

void setSimdNonTemporalMinBytes(size_t bytes) {
  gNonTemporalMinBytes.store(bytes, std::memory_order_relaxed);
}

void reduceCopy(const ReduceCopyArgs& args) {
  const bool argsOk = args.nsrcs >= 1 && args.nsrcs <= kMaxReduceSrcs && args.ndsts >= 1 &&
                      args.ndsts <= kMaxReduceDsts && DatatypeSize(args.datatype) != 0 &&
                      static_cast<int>(args.op) >= 0 && args.op < batonNumOps;
  assert(argsOk && "reduceCopy: nsrcs, ndsts, datatype or op out of range");
  if (!argsOk || args.count == 0) return;

  const bool divide = args.postDivisor > 1;
  if (args.nsrcs == 1 && !divide) {
    // A copy moves bits: no conversion, so NaN payloads survive as on device.
    const size_t bytes = args.count * DatatypeSize(args.datatype);
    for (int d = 0; d < args.ndsts; ++d) {
      if (args.dsts[d] == args.srcs[0]) continue;
      // Overlap is outside the contract; memmove keeps it well-defined anyway.
      if (rangesOverlap(args.dsts[d], args.srcs[0], bytes)) {
        memmove(args.dsts[d], args.srcs[0], bytes);
      } else {
        memcpy(args.dsts[d], args.srcs[0], bytes);
      }
    }
    return;
  }

  if (reduceCopySimd(args)) return;
  dispatchReduce(args.datatype, args.op, [&](auto typeTag, auto opTag) {
    using T = typename decltype(typeTag)::type;
    using Op = typename decltype(opTag)::type;
    // The divisor is a template flag so the common no-divide loops carry no
    // per-element branch (and integer loops no division).
    if (divide) {
      reduceTyped<T, Op, true>(args);
    } else {
      reduceTyped<T, Op, false>(args);
    }
  });
}

void reduceInto(void* dst, const void* a, const void* b, size_t count, batonDataType_t dt,
                batonRedOp_t op, uint32_t postDivisor) {
  ReduceCopyArgs args;
  args.srcs[0] = a;
  args.srcs[1] = b;
  args.nsrcs = 2;
  args.dsts[0] = dst;
  args.ndsts = 1;
  args.count = count;
  args.datatype = dt;
  args.op = op;
  args.postDivisor = postDivisor;
  reduceCopy(args);
}

}  // namespace baton
