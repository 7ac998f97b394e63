/*
 * Internal interface between the CPU entry points (cpu_reduce.cc) and the
 * vectorized back end, written once with Google Highway and compiled by it
 * for every target of cpu_hwy_targets.h (SSE4, AVX2, AVX-512, AVX3_DL on
 * x86; NEON, SVE, SVE2 on aarch64). Targets are named by their Highway bit
 * (HWY_AVX2, ...), so this header needs no Highway include; cpu_reduce.cc
 * calls a target only after SupportedSimdTargets() said the CPU (and OS)
 * run it.
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <string_view>

#include "kernels/cpu_reduce.h"

namespace baton {

// Knobs of the vectorized loops that callers (benchmarks) may want to vary.
struct SimdOptions {
  // Outputs of at least this many bytes per destination use non-temporal
  // (cache-bypassing) stores. Only worth it when the output will not be read
  // soon and is much larger than the cache; SIZE_MAX disables them.
  size_t non_temporal_min_bytes = SIZE_MAX;
  // The data cache line (base/cpu.h's CacheLineBytes(); a power of two):
  // large calls align the first destination to it. The loops use at least
  // one vector, which streaming stores need.
  size_t line_bytes = 64;
};

// The non_temporal_min_bytes ReduceCopy passes to the back end. Default:
// never, since every collective reads its output again soon after, which
// streaming stores would send to DRAM first (docs/design.md, "CPU
// reduce-copy kernels", has the measurements); benchmarks may ask for them.
inline constexpr size_t kDefaultNonTemporalMinBytes = SIZE_MAX;
size_t SimdNonTemporalMinBytes();
void SetSimdNonTemporalMinBytes(size_t bytes);

// One PreMulSum pass: ScaleCopy when other is nullptr (dst = own *
// scalar), else ScaleReduce (dst = own * scalar + other, or other + own *
// scalar when !own_first). dst may equal own or other.
struct ScaleArgs {
  void* dst = nullptr;
  const void* own = nullptr;
  const void* other = nullptr;
  size_t count = 0;
  batonDataType_t datatype = batonFloat32;
  const void* scalar = nullptr;  // one element of datatype
  bool own_first = true;
};

// The Highway targets compiled into this build (an OR of HWY_* bits; the
// scalar fallback is not one), and those of them this CPU and OS run.
int64_t CompiledSimdTargets();
int64_t SupportedSimdTargets();

// "sse4", "avx2", "avx512", "avx3_dl", "neon", "sve", "sve2", ... for one
// target bit; nullptr for anything else.
const char* SimdTargetName(int64_t target);
// The target a BATON_KERNELS name stands for, whether or not it was
// compiled here ("avx3" is "avx512"; with Highway 1.0.3, "avx3_zen4" is
// "avx3_dl", the target it compiles for Zen 4); 0 for an unknown name.
int64_t SimdTargetFromName(std::string_view name);
// The names SimdTargetFromName accepts, comma-separated, for messages.
const char* SimdTargetNames();

// Run args (resp. one PreMulSum pass) with target's code. They return
// false, touching nothing, for a target that was not compiled and for a
// combination without a vector path (integer division, 8-bit products,
// 64-bit products where the target has no 64-bit multiply); the caller then
// runs the portable loops. args must already be validated (nsrcs 1..8,
// ndsts 1..2, valid datatype and op), and the target supported by the CPU.
bool SimdReduceCopy(int64_t target, const ReduceCopyArgs& args, const SimdOptions& options);
bool SimdScale(int64_t target, const ScaleArgs& args);

// The per-target entry points of one group of datatypes, from the
// translation units that compile them (cpu_hwy_float.cc, cpu_hwy_int.cc,
// cpu_hwy_lowp.cc); nullptr where a target was not compiled.
using SimdReduceCopyFn = bool (*)(const ReduceCopyArgs&, const SimdOptions&);
using SimdScaleFn = bool (*)(const ScaleArgs&);
struct SimdGroup {
  SimdReduceCopyFn reduce_copy = nullptr;
  SimdScaleFn scale = nullptr;
};
SimdGroup FloatSimdGroup(int64_t target);         // float, double
SimdGroup IntegerSimdGroup(int64_t target);       // the six integer types
SimdGroup LowPrecisionSimdGroup(int64_t target);  // fp16, bf16, fp8 e4m3 and e5m2

}  // namespace baton
