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
 * with ReduceCopyRange (and so with the device kernels) bit for bit.
 *
 * Before those portable loops, ReduceCopy (and ScaleCopy, ScaleReduce) offer
 * the call to the vectorized back end (cpu_hwy.h: Google Highway, one
 * implementation compiled per target) at the target chosen at run time: the
 * best the CPU has, or what BATON_KERNELS asks for. It computes the same
 * elements in the same order and declines combinations it has no vector code
 * for.
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include "kernels/cpu_reduce.h"

#include <assert.h>
#include <string.h>

#include <algorithm>
#include <atomic>
#include <string>

#include "base/cpu.h"
#include "base/datatype.h"
#include "base/log.h"
#include "base/settings.h"
#include "kernels/cpu_hwy.h"
#include "kernels/reduce_copy.h"

namespace baton {
namespace {

// True when [p, p + bytes) and [q, q + bytes) share a byte.
bool RangesOverlap(const void* p, const void* q, size_t bytes) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const uintptr_t b = reinterpret_cast<uintptr_t>(q);
  return a < b + bytes && b < a + bytes;
}

// dst = a op b. The caller guarantees dst overlaps neither source (a and b may
// alias each other: restrict only forbids aliasing of modified objects), which
// lets the compiler vectorize without runtime alias checks.
template <typename T, typename Op, bool kDiv>
void Reduce2(T* __restrict__ dst, const T* __restrict__ a, const T* __restrict__ b, size_t n,
             uint32_t divisor) {
  const Op op;
  for (size_t i = 0; i < n; ++i) {
    Accum<T> acc = op(LoadAcc<T>(a[i]), LoadAcc<T>(b[i]));
    if constexpr (kDiv) acc = PostDivide<T>(acc, divisor);
    dst[i] = StoreAcc<T>(acc);
  }
}

// In place: io is one operand and receives the result; kIoIsLeft says which
// operand it is, so the operand order (visible for Max/Min on NaN/±0 and for
// NaN payloads) matches the out-of-place path. other must not overlap io.
template <typename T, typename Op, bool kDiv, bool kIoIsLeft>
void Reduce2InPlace(T* __restrict__ io, const T* __restrict__ other, size_t n, uint32_t divisor) {
  const Op op;
  for (size_t i = 0; i < n; ++i) {
    const Accum<T> x = LoadAcc<T>(io[i]);
    const Accum<T> y = LoadAcc<T>(other[i]);
    Accum<T> acc = kIoIsLeft ? op(x, y) : op(y, x);
    if constexpr (kDiv) acc = PostDivide<T>(acc, divisor);
    io[i] = StoreAcc<T>(acc);
  }
}

// General case. Reading a block of every source into a local accumulator
// before writing any destination makes in-place use (a destination equal to
// a source) safe, and every inner loop touches one pointer plus the local
// buffer, which the compiler can prove distinct, so each vectorizes.
template <typename T, typename Op, bool kDiv>
void ReduceBlocked(const T* const* srcs, int nsrcs, T* const* dsts, int ndsts, size_t count,
                   uint32_t divisor) {
  using Acc = Accum<T>;
  // 4-8 KiB: stays in L1 next to the streamed sources.
  constexpr size_t kBlock = 1024;
  alignas(kCacheLinePad) Acc acc[kBlock];
  const Op op;
  for (size_t base = 0; base < count; base += kBlock) {
    const size_t n = std::min(kBlock, count - base);
    const T* s0 = srcs[0] + base;
    for (size_t i = 0; i < n; ++i) acc[i] = LoadAcc<T>(s0[i]);
    for (int s = 1; s < nsrcs; ++s) {
      const T* sp = srcs[s] + base;
      for (size_t i = 0; i < n; ++i) acc[i] = op(acc[i], LoadAcc<T>(sp[i]));
    }
    if constexpr (kDiv) {
      for (size_t i = 0; i < n; ++i) acc[i] = PostDivide<T>(acc[i], divisor);
    }
    // Round once into the first destination, then copy its bytes to the
    // others rather than converting again.
    T* d0 = dsts[0] + base;
    for (size_t i = 0; i < n; ++i) d0[i] = StoreAcc<T>(acc[i]);
    for (int d = 1; d < ndsts; ++d) {
      if (dsts[d] != dsts[0]) memcpy(dsts[d] + base, d0, n * sizeof(T));
    }
  }
}

template <typename T, typename Op, bool kDiv>
void ReduceTyped(const ReduceCopyArgs& args) {
  const size_t n = args.count;
  const uint32_t divisor = args.post_divisor;
  if (args.nsrcs == 2 && args.ndsts == 1) {
    T* dst = static_cast<T*>(args.dsts[0]);
    const T* a = static_cast<const T*>(args.srcs[0]);
    const T* b = static_cast<const T*>(args.srcs[1]);
    const size_t bytes = n * sizeof(T);
    const bool overlaps_a = RangesOverlap(dst, a, bytes);
    const bool overlaps_b = RangesOverlap(dst, b, bytes);
    if (!overlaps_a && !overlaps_b) {
      Reduce2<T, Op, kDiv>(dst, a, b, n, divisor);
      return;
    }
    if (dst == a && !overlaps_b) {
      Reduce2InPlace<T, Op, kDiv, true>(dst, b, n, divisor);
      return;
    }
    if (dst == b && !overlaps_a) {
      Reduce2InPlace<T, Op, kDiv, false>(dst, a, n, divisor);
      return;
    }
    // dst == a == b: fall through to the general path.
  }
  const T* srcs[kMaxReduceSrcs];
  T* dsts[kMaxReduceDsts];
  for (int s = 0; s < args.nsrcs; ++s) srcs[s] = static_cast<const T*>(args.srcs[s]);
  for (int d = 0; d < args.ndsts; ++d) dsts[d] = static_cast<T*>(args.dsts[d]);
  ReduceBlocked<T, Op, kDiv>(srcs, args.nsrcs, dsts, args.ndsts, n, divisor);
}

// The PreMulSum step (ScaleReduceRange's arithmetic, same functors and
// order) in stride-1 loops the compiler vectorizes for the baseline ISA:
// restrict pointers when dst overlaps neither operand, an in-place loop
// when it is one of them (a runtime alias check would otherwise send the
// in-place case to scalar code).
template <typename T, bool kOwnFirst>
BATON_HD_INLINE Accum<T> ScaledSum(Accum<T> own, Accum<T> other, Accum<T> s) {
  const Accum<T> scaled = FuncProd<T>()(own, s);
  return kOwnFirst ? FuncSum<T>()(scaled, other) : FuncSum<T>()(other, scaled);
}

template <typename T, bool kOwnFirst>
void ScaleReduceApart(T* __restrict__ dst, const T* __restrict__ own, const T* __restrict__ other,
                      size_t n, Accum<T> s) {
  for (size_t i = 0; i < n; ++i)
    dst[i] = StoreAcc<T>(ScaledSum<T, kOwnFirst>(LoadAcc<T>(own[i]), LoadAcc<T>(other[i]), s));
}

// kIoIsOwn: io holds the own input (and gets the result); else the other.
template <typename T, bool kOwnFirst, bool kIoIsOwn>
void ScaleReduceInPlace(T* __restrict__ io, const T* __restrict__ operand, size_t n, Accum<T> s) {
  for (size_t i = 0; i < n; ++i) {
    const Accum<T> a = LoadAcc<T>(io[i]), b = LoadAcc<T>(operand[i]);
    io[i] =
        StoreAcc<T>(kIoIsOwn ? ScaledSum<T, kOwnFirst>(a, b, s) : ScaledSum<T, kOwnFirst>(b, a, s));
  }
}

template <typename T, bool kOwnFirst>
void ScaleReduceTyped(T* dst, const T* own, const T* other, size_t n, T scalar, size_t bytes) {
  const Accum<T> s = LoadAcc<T>(scalar);
  const bool overlaps_own = RangesOverlap(dst, own, bytes);
  const bool overlaps_other = RangesOverlap(dst, other, bytes);
  if (!overlaps_own && !overlaps_other) {
    ScaleReduceApart<T, kOwnFirst>(dst, own, other, n, s);
  } else if (dst == own && !overlaps_other) {
    ScaleReduceInPlace<T, kOwnFirst, true>(dst, other, n, s);
  } else if (dst == other && !overlaps_own) {
    ScaleReduceInPlace<T, kOwnFirst, false>(dst, own, n, s);
  } else {
    // own == other == dst: the core's loop reads each element before writing.
    ScaleReduceRange<T>(own, other, dst, 0, n, 1, scalar, kOwnFirst);
  }
}

// ---- Kernel level ----------------------------------------------------------

constexpr int64_t kLevelUnset = -1;
// The level ReduceCopy runs (kPortable or a Highway target bit); read on
// every call, so relaxed and lock-free.
std::atomic<int64_t> g_kernel_level{kLevelUnset};
std::atomic<size_t> g_non_temporal_min_bytes{kDefaultNonTemporalMinBytes};

// BATON_KERNELS, resolved against the CPU. Runs once per process.
CpuKernelLevel LevelFromSettings() {
  const CpuKernelLevel best = BestCpuKernelLevel();
  CpuKernelLevel chosen = best;
  const std::string& name = ProcessSettings().kernels;
  CpuKernelLevel asked = best;
  if (name == "auto") {
    // chosen stays the best
  } else if (!ParseCpuKernelLevel(name, &asked)) {
    BATON_WARN(kLogEnv, "ignoring BATON_KERNELS=%s: expected auto, portable or one of %s; using %s",
               name.c_str(), SimdTargetNames(), CpuKernelLevelName(best));
  } else if (!CpuKernelLevelAvailable(asked)) {
    BATON_WARN(kLogEnv, "BATON_KERNELS=%s: %s is not %s, using %s", name.c_str(),
               CpuKernelLevelName(asked),
               (CompiledSimdTargets() & static_cast<int64_t>(asked)) != 0
                   ? "supported by this CPU"
                   : "compiled into this build",
               CpuKernelLevelName(best));
  } else {
    chosen = asked;
  }
  BATON_INFO(kLogInit, "reduce kernels: %s (best on this CPU: %s)", CpuKernelLevelName(chosen),
             CpuKernelLevelName(best));
  return chosen;
}

// Resolves BATON_KERNELS on first use; thread-safe (a static's initializer).
void EnsureKernelLevel() {
  static const bool resolved = [] {
    int64_t expected = kLevelUnset;
    g_kernel_level.compare_exchange_strong(expected, static_cast<int64_t>(LevelFromSettings()));
    return true;
  }();
  (void)resolved;
}

// The Highway target to offer a call to; 0 for the portable loops.
int64_t SimdTarget() {
  int64_t level = g_kernel_level.load(std::memory_order_relaxed);
  if (level == kLevelUnset) {
    EnsureKernelLevel();
    level = g_kernel_level.load(std::memory_order_relaxed);
  }
  return level;
}

// Offers args to the vectorized back end of the current level; true when it
// ran them.
bool ReduceCopySimd(const ReduceCopyArgs& args) {
  const int64_t target = SimdTarget();
  if (target == 0) return false;
  SimdOptions options;
  options.non_temporal_min_bytes =
      args.non_temporal ? 0 : g_non_temporal_min_bytes.load(std::memory_order_relaxed);
  options.line_bytes = CacheLineBytes();
  return SimdReduceCopy(target, args, options);
}

bool ScaleSimd(const ScaleArgs& args) {
  const int64_t target = SimdTarget();
  return target != 0 && args.count > 0 && SimdScale(target, args);
}

// Whether ScaleCopy offers a call to the vector back end. A scaled copy of
// a type stored as it accumulates is one read and one write per element: in
// cache the vectors run it at 1.6-3.5x the portable loop, but once source
// and destination exceed the last-level cache the portable loop's narrower
// stores moved 10-20% more from DRAM than 256- or 512-bit ones
// (docs/design.md, "CPU reduce-copy kernels"). fp16, bf16 and fp8 convert
// every element and gain at any size.
bool ScaleCopyUsesVectors(size_t count, batonDataType_t dt) {
  switch (dt) {
    case batonFloat16:
    case batonBfloat16:
    case batonFloat8e4m3:
    case batonFloat8e5m2:
      return true;
    default:
      return 2 * count * DatatypeSize(dt) <= baton::LastLevelCacheBytes();
  }
}

// Exactly one bit: a Highway target rather than kPortable or garbage.
bool IsOneTarget(CpuKernelLevel level) {
  const int64_t bits = static_cast<int64_t>(level);
  return bits > 0 && (bits & (bits - 1)) == 0;
}

}  // namespace

CpuKernelLevel BestCpuKernelLevel() {
  // Highway's bits: the lowest set bit is the best target.
  static const CpuKernelLevel best = [] {
    const int64_t supported = SupportedSimdTargets();
    return static_cast<CpuKernelLevel>(supported & -supported);
  }();
  return best;
}

std::vector<CpuKernelLevel> CompiledCpuKernelLevels() {
  std::vector<CpuKernelLevel> levels = {CpuKernelLevel::kPortable};
  const int64_t compiled = CompiledSimdTargets();
  for (int bit = 62; bit >= 0; --bit) {
    if ((compiled >> bit) & 1) levels.push_back(static_cast<CpuKernelLevel>(int64_t{1} << bit));
  }
  return levels;
}

bool CpuKernelLevelAvailable(CpuKernelLevel level) {
  if (level == CpuKernelLevel::kPortable) return true;
  return IsOneTarget(level) && (SupportedSimdTargets() & static_cast<int64_t>(level)) != 0;
}

CpuKernelLevel CurrentCpuKernelLevel() {
  EnsureKernelLevel();
  return static_cast<CpuKernelLevel>(g_kernel_level.load(std::memory_order_relaxed));
}

bool SetCpuKernelLevel(CpuKernelLevel level) {
  if (!CpuKernelLevelAvailable(level)) return false;
  EnsureKernelLevel();  // so a later first call cannot overwrite this choice
  g_kernel_level.store(static_cast<int64_t>(level), std::memory_order_relaxed);
  return true;
}

const char* CpuKernelLevelName(CpuKernelLevel level) {
  if (level == CpuKernelLevel::kPortable) return "portable";
  const char* name = IsOneTarget(level) ? SimdTargetName(static_cast<int64_t>(level)) : nullptr;
  return name != nullptr ? name : "invalid";
}

bool ParseCpuKernelLevel(std::string_view name, CpuKernelLevel* level) {
  if (name == "portable") {
    *level = CpuKernelLevel::kPortable;
    return true;
  }
  const int64_t target = SimdTargetFromName(name);
  if (target == 0) return false;
  *level = static_cast<CpuKernelLevel>(target);
  return true;
}

size_t SimdNonTemporalMinBytes() {
  return g_non_temporal_min_bytes.load(std::memory_order_relaxed);
}

void SetSimdNonTemporalMinBytes(size_t bytes) {
  g_non_temporal_min_bytes.store(bytes, std::memory_order_relaxed);
}

void ReduceCopy(const ReduceCopyArgs& args) {
  const bool args_ok = args.nsrcs >= 1 && args.nsrcs <= kMaxReduceSrcs && args.ndsts >= 1 &&
                       args.ndsts <= kMaxReduceDsts && DatatypeSize(args.datatype) != 0 &&
                       static_cast<int>(args.op) >= 0 && args.op < batonNumOps;
  assert(args_ok && "ReduceCopy: nsrcs, ndsts, datatype or op out of range");
  if (!args_ok || args.count == 0) return;

  const bool divide = args.post_divisor > 1;
  if (args.nsrcs == 1 && !divide) {
    // A copy moves bits: no conversion, so NaN payloads survive as on device.
    const size_t bytes = args.count * DatatypeSize(args.datatype);
    if (args.non_temporal) {
      // The vector loops as a byte "sum" of one source: a copy with
      // streaming stores, which memcpy only uses above a size of its own.
      ReduceCopyArgs bits = args;
      bits.datatype = batonUint8;
      bits.op = batonSum;
      bits.count = bytes;
      bool overlap = false;
      for (int d = 0; d < args.ndsts; ++d)
        overlap |= RangesOverlap(args.dsts[d], args.srcs[0], bytes);
      if (!overlap && ReduceCopySimd(bits)) return;
    }
    for (int d = 0; d < args.ndsts; ++d) {
      if (args.dsts[d] == args.srcs[0]) continue;
      // Overlap is outside the contract; memmove keeps it well-defined anyway.
      if (RangesOverlap(args.dsts[d], args.srcs[0], bytes)) {
        memmove(args.dsts[d], args.srcs[0], bytes);
      } else {
        memcpy(args.dsts[d], args.srcs[0], bytes);
      }
    }
    return;
  }

  if (ReduceCopySimd(args)) return;
  DispatchReduce(args.datatype, args.op, [&](auto type_tag, auto op_tag) {
    using T = typename decltype(type_tag)::type;
    using Op = typename decltype(op_tag)::type;
    // The divisor is a template flag so the common no-divide loops carry no
    // per-element branch (and integer loops no division).
    if (divide) {
      ReduceTyped<T, Op, true>(args);
    } else {
      ReduceTyped<T, Op, false>(args);
    }
  });
}

void ScaleCopy(void* dst, const void* src, size_t count, batonDataType_t dt, const void* scalar) {
  ScaleArgs simd;
  simd.dst = dst;
  simd.own = src;
  simd.count = count;
  simd.datatype = dt;
  simd.scalar = scalar;
  if (ScaleCopyUsesVectors(count, dt) && ScaleSimd(simd)) return;
  // Else one pass, vectorized by the compiler for the baseline ISA (the
  // loop is the branch-free core).
  DispatchDatatype(dt, [&](auto type_tag) {
    using T = typename decltype(type_tag)::type;
    T s;
    memcpy(&s, scalar, sizeof(T));
    ScaleCopyRange<T>(static_cast<const T*>(src), static_cast<T*>(dst), 0, count, 1, s);
  });
}

void ScaleReduce(void* dst, const void* own, const void* other, size_t count, batonDataType_t dt,
                 const void* scalar, bool own_first) {
  ScaleArgs simd{dst, own, other, count, dt, scalar, own_first};
  if (ScaleSimd(simd)) return;
  DispatchDatatype(dt, [&](auto type_tag) {
    using T = typename decltype(type_tag)::type;
    T s;
    memcpy(&s, scalar, sizeof(T));
    auto* d = static_cast<T*>(dst);
    const auto* x = static_cast<const T*>(own);
    const auto* y = static_cast<const T*>(other);
    const size_t bytes = count * sizeof(T);
    if (own_first) {
      ScaleReduceTyped<T, true>(d, x, y, count, s, bytes);
    } else {
      ScaleReduceTyped<T, false>(d, x, y, count, s, bytes);
    }
  });
}

void StreamCopy(void* dst, const void* src, size_t bytes) {
  ReduceCopy({.srcs = {src},
              .nsrcs = 1,
              .dsts = {dst},
              .ndsts = 1,
              .count = bytes,
              .datatype = batonUint8,
              .non_temporal = true});
}

void CopyOut(void* dst, const void* src, size_t bytes, bool streaming) {
  if (streaming)
    StreamCopy(dst, src, bytes);
  else
    memcpy(dst, src, bytes);
}

void ReduceInto(void* dst, const void* a, const void* b, size_t count, batonDataType_t dt,
                batonRedOp_t op, uint32_t post_divisor, bool non_temporal, void* copy) {
  ReduceCopy({.srcs = {a, b},
              .nsrcs = 2,
              .dsts = {dst, copy},
              .ndsts = copy != nullptr ? 2 : 1,
              .count = count,
              .datatype = dt,
              .op = op,
              .post_divisor = post_divisor,
              .non_temporal = non_temporal});
}

}  // namespace baton
