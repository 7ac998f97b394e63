/*
 * The hand-written AVX2 / AVX-512 reduce-copy back ends that Google Highway
 * replaced (src/kernels/cpu_hwy*.cc), kept for perf/kernels_bench only: it
 * runs them interleaved with the Highway kernels, so the comparison in
 * docs/design.md ("CPU reduce-copy kernels") can be repeated. Unchanged but
 * for their names (baton::old_kernels) and include paths.
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu_reduce.h"

namespace baton::old_kernels {

struct SimdOptions {
  // Outputs of at least this many bytes per destination use non-temporal
  // (cache-bypassing) stores; SIZE_MAX disables them.
  size_t non_temporal_min_bytes = static_cast<size_t>(-1);
};

// Run args with AVX2 + F16C (resp. AVX-512 F/BW/DQ) code. They return false,
// touching nothing, for a (datatype, op, divisor) combination without a vector
// path (8-bit and, under AVX2, 64-bit integer products; integer division);
// the caller then runs the portable loops. args must already be validated,
// and count > 0.
bool ReduceCopyAvx2(const ReduceCopyArgs& args, const SimdOptions& options);
bool ReduceCopyAvx512(const ReduceCopyArgs& args, const SimdOptions& options);

// Whether this CPU and OS can run the corresponding back end.
bool CpuSupportsAvx2();
bool CpuSupportsAvx512();

}  // namespace baton::old_kernels
