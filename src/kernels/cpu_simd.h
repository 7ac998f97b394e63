/*
 * Internal interface between the CPU entry point (cpu_reduce.cc) and its
 * vectorized back ends (cpu_avx2.cc, cpu_avx512.cc). Each back end is its own
 * translation unit whose functions carry a GCC target attribute, so one build
 * runs on any x86-64 CPU: cpu_reduce.cc calls a back end only after
 * CpuSupportsAvx2() / CpuSupportsAvx512() said the CPU (and OS) have it.
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu_reduce.h"

namespace baton {

// Knobs of the vectorized loops that callers (benchmarks) may want to vary.
struct SimdOptions {
  // Outputs of at least this many bytes per destination use non-temporal
  // (cache-bypassing) stores. Only worth it when the output will not be read
  // soon and is much larger than the cache; SIZE_MAX disables them.
  size_t non_temporal_min_bytes = static_cast<size_t>(-1);
};

// Run args with AVX2 + F16C (resp. AVX-512 F/BW/DQ) code. They return false,
// touching nothing, for a (datatype, op, divisor) combination without a vector
// path (8-bit and, under AVX2, 64-bit integer products; integer division);
// the caller then runs the portable loops. args must already be validated
// (nsrcs 1..8, ndsts 1..2, valid datatype and op), and count > 0.
bool ReduceCopyAvx2(const ReduceCopyArgs& args, const SimdOptions& options);
bool ReduceCopyAvx512(const ReduceCopyArgs& args, const SimdOptions& options);

// The non_temporal_min_bytes ReduceCopy passes to the back ends. Default:
// never, since every collective reads its output again soon after, which
// streaming stores would send to DRAM first (docs/design.md, "CPU
// reduce-copy kernels", has the measurements); benchmarks may ask for them.
inline constexpr size_t kDefaultNonTemporalMinBytes = SIZE_MAX;
size_t SimdNonTemporalMinBytes();
void SetSimdNonTemporalMinBytes(size_t bytes);

// Whether this CPU and OS can run the corresponding back end.
bool CpuSupportsAvx2();
bool CpuSupportsAvx512();

}  // namespace baton
