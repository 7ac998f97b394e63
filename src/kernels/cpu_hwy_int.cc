/*
 * The Highway back end for the six integer types, compiled for every target of
 * cpu_hwy_targets.h (the loops are cpu_hwy-inl.h). The datatypes are split
 * over three files so that the targets' code builds in parallel.
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include "kernels/cpu_hwy_targets.h"  // before any other Highway header

#include "kernels/cpu_hwy.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu_hwy_int.cc"
#include <hwy/foreach_target.h>  // re-includes this file once per target
#include <hwy/highway.h>

#include "kernels/cpu_hwy-inl.h"

HWY_BEFORE_NAMESPACE();
namespace baton {
namespace HWY_NAMESPACE {

bool ReduceCopyIntegers(const ReduceCopyArgs& args, const SimdOptions& options) {
  return ReduceCopyOneOf<int8_t, uint8_t, int32_t, uint32_t, int64_t, uint64_t>(args, options);
}
bool ScaleIntegers(const ScaleArgs& args) {
  return ScaleOneOf<int8_t, uint8_t, int32_t, uint32_t, int64_t, uint64_t>(args);
}

}  // namespace HWY_NAMESPACE
}  // namespace baton
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace baton {

HWY_EXPORT(ReduceCopyIntegers);
HWY_EXPORT(ScaleIntegers);

SimdGroup IntegerSimdGroup(int64_t target) {
  return {SimdTableEntry(HWY_DISPATCH_TABLE(ReduceCopyIntegers), target),
          SimdTableEntry(HWY_DISPATCH_TABLE(ScaleIntegers), target)};
}

}  // namespace baton
#endif  // HWY_ONCE
