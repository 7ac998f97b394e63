/*
 * The Highway back end for float and double, compiled for every target of
 * cpu_hwy_targets.h (the loops are cpu_hwy-inl.h). The datatypes are split
 * over three files so that the targets' code builds in parallel.
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include "kernels/cpu_hwy_targets.h"  // before any other Highway header

#include "kernels/cpu_hwy.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu_hwy_float.cc"
#include <hwy/foreach_target.h>  // re-includes this file once per target
#include <hwy/highway.h>

#include "kernels/cpu_hwy-inl.h"

HWY_BEFORE_NAMESPACE();
namespace baton {
namespace HWY_NAMESPACE {

bool ReduceCopyFloats(const ReduceCopyArgs& args, const SimdOptions& options) {
  return ReduceCopyOneOf<float, double>(args, options);
}
bool ScaleFloats(const ScaleArgs& args) {
  return ScaleOneOf<float, double>(args);
}

}  // namespace HWY_NAMESPACE
}  // namespace baton
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace baton {

HWY_EXPORT(ReduceCopyFloats);
HWY_EXPORT(ScaleFloats);

SimdGroup FloatSimdGroup(int64_t target) {
  return {SimdTableEntry(HWY_DISPATCH_TABLE(ReduceCopyFloats), target),
          SimdTableEntry(HWY_DISPATCH_TABLE(ScaleFloats), target)};
}

}  // namespace baton
#endif  // HWY_ONCE
