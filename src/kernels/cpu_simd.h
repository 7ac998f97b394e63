/*
 * Internal interface between the CPU entry point (cpu_reduce.cc) and its
 * vectorized back ends (cpu_avx2.cc, cpu_avx512.cc). Each back end is its own
 * translation unit whose functions carry a GCC target attribute, so one build
 * runs on any x86-64 CPU: cpu_reduce.cc calls a back end only after
 * cpuSupportsAvx2() / cpuSupportsAvx512() said the CPU (and OS) have it.
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#ifndef BATON_KERNELS_CPU_SIMD_H_
#define BATON_KERNELS_CPU_SIMD_H_

#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu_reduce.h"

namespace baton {

// Knobs of the vectorized loops that callers (benchmarks) may want to vary.
struct SimdOptions {
  // Outputs of at least this many bytes per destination use non-temporal
  // (cache-bypassing) stores. Only worth it when the output will not be read
  // soon and is much larger than the cache; SIZE_MAX disables them.
  size_t nonTemporalMinBytes = static_cast<size_t>(-1);
};

// Run args with AVX2 + F16C (resp. AVX-512 F/BW/DQ) code. They return false,
// touching nothing, for a (datatype, op, divisor) combination without a vector
// path (8-bit and, under AVX2, 64-bit integer products; integer division);
// the caller then runs the portable loops. args must already be validated
// (nsrcs 1..8, ndsts 1..2, valid datatype and op), and count > 0.
bool reduceCopyAvx2(const ReduceCopyArgs& args, const SimdOptions& options);
bool reduceCopyAvx512(const ReduceCopyArgs& args, const SimdOptions& options);

// The nonTemporalMinBytes reduceCopy passes to the back ends. Default: never.
// Measured with perf/kernels_bench (fp32 sum 2->1, one core of a Xeon with
// 2 MiB L2): streaming stores lose ~40% at 512 KiB and win 25-50% from 4 MiB
// up when the output is not read again; but in the allreduce sweep a 16 MiB
// threshold made 64-256 MiB messages slower (the reduced data is sent on at
// once and then comes from DRAM), and every collective's output is read soon
// after. So they stay off unless a caller (a benchmark) asks for them.
inline constexpr size_t kDefaultNonTemporalMinBytes = SIZE_MAX;
size_t simdNonTemporalMinBytes();
void setSimdNonTemporalMinBytes(size_t bytes);

// Whether this CPU and OS can run the corresponding back end.
bool cpuSupportsAvx2();
bool cpuSupportsAvx512();

}  // namespace baton

#endif  // BATON_KERNELS_CPU_SIMD_H_
