/*
 * The Highway back end for fp16, bf16 and the two fp8 formats, compiled for every target of
 * cpu_hwy_targets.h (the loops are cpu_hwy-inl.h). The datatypes are split
 * over three files so that the targets' code builds in parallel.
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include "kernels/cpu_hwy_targets.h"  // before any other Highway header

#include "kernels/cpu_hwy.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu_hwy_lowp.cc"
#include <hwy/foreach_target.h>  // re-includes this file once per target
#include <hwy/highway.h>

#include "kernels/cpu_hwy-inl.h"

HWY_BEFORE_NAMESPACE();
namespace baton {
namespace HWY_NAMESPACE {

bool ReduceCopyLowPrecision(const ReduceCopyArgs& args, const SimdOptions& options) {
  return ReduceCopyOneOf<half_t, bfloat16_t, fp8_e4m3_t, fp8_e5m2_t>(args, options);
}
bool ScaleLowPrecision(const ScaleArgs& args) {
  return ScaleOneOf<half_t, bfloat16_t, fp8_e4m3_t, fp8_e5m2_t>(args);
}

}  // namespace HWY_NAMESPACE
}  // namespace baton
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace baton {

HWY_EXPORT(ReduceCopyLowPrecision);
HWY_EXPORT(ScaleLowPrecision);

SimdGroup LowPrecisionSimdGroup(int64_t target) {
  return {SimdTableEntry(HWY_DISPATCH_TABLE(ReduceCopyLowPrecision), target),
          SimdTableEntry(HWY_DISPATCH_TABLE(ScaleLowPrecision), target)};
}

}  // namespace baton
#endif  // HWY_ONCE
