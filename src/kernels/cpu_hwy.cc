/*
 * The Highway back end's directory: which targets were compiled and which
 * this CPU runs, their BATON_KERNELS names, and the entry points of a
 * target picked by datatype group from the three translation units that
 * compile them (cpu_hwy_float.cc, cpu_hwy_int.cc, cpu_hwy_lowp.cc).
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include "kernels/cpu_hwy_targets.h"  // before any other Highway header

#include <array>
#include <string>

#include "kernels/cpu_hwy.h"

namespace baton {
namespace {

struct NamedTarget {
  const char* name;
  int64_t target;
};

// Every name BATON_KERNELS accepts for a Highway target; a target's own
// name comes first, aliases after it. Highway's AVX3 is AVX-512 F/BW/DQ/VL
// (the old back end's "avx512"); AVX3_DL adds Ice Lake's and Zen 4's
// extensions.
constexpr NamedTarget kNamedTargets[] = {
    {"sse4", HWY_SSE4},           {"avx2", HWY_AVX2},         {"avx512", HWY_AVX3},
    {"avx3", HWY_AVX3},           {"avx3_dl", HWY_AVX3_DL},
#ifdef HWY_AVX3_ZEN4
    {"avx3_zen4", HWY_AVX3_ZEN4},
#else
    // Highway 1.0.3 has no Zen 4 target of its own: Zen 4 runs AVX3_DL.
    {"avx3_zen4", HWY_AVX3_DL},
#endif
#ifdef HWY_AVX3_SPR
    {"avx3_spr", HWY_AVX3_SPR},
#endif
    {"neon", HWY_NEON},           {"sve", HWY_SVE},           {"sve2", HWY_SVE2},
    {"sve_256", HWY_SVE_256},     {"sve2_128", HWY_SVE2_128},
};

enum Group { kFloats, kIntegers, kLowPrecision, kNumGroups };

Group GroupOf(batonDataType_t dt) {
  switch (dt) {
    case batonFloat32:
    case batonFloat64:
      return kFloats;
    case batonFloat16:
    case batonBfloat16:
    case batonFloat8e4m3:
    case batonFloat8e5m2:
      return kLowPrecision;
    default:
      return kIntegers;
  }
}

// The entry points of every target, by bit position, looked up once.
using TargetGroups = std::array<SimdGroup, kNumGroups>;
const TargetGroups& GroupsOf(int64_t target) {
  static const std::array<TargetGroups, 64> kTable = [] {
    std::array<TargetGroups, 64> table{};
    for (int bit = 0; bit < 63; ++bit) {
      const int64_t t = int64_t{1} << bit;
      if ((CompiledSimdTargets() & t) == 0) continue;
      table[bit] = {FloatSimdGroup(t), IntegerSimdGroup(t), LowPrecisionSimdGroup(t)};
    }
    return table;
  }();
  static const TargetGroups kNone{};
  if (target <= 0 || (target & (target - 1)) != 0) return kNone;
  return kTable[hwy::Num0BitsBelowLS1Bit_Nonzero64(static_cast<uint64_t>(target))];
}

}  // namespace

int64_t CompiledSimdTargets() {
  return HWY_TARGETS & ~static_cast<int64_t>(HWY_SCALAR | HWY_EMU128);
}

int64_t SupportedSimdTargets() {
  static const int64_t supported = hwy::SupportedTargets() & CompiledSimdTargets();
  return supported;
}

const char* SimdTargetName(int64_t target) {
  for (const NamedTarget& named : kNamedTargets) {
    if (named.target == target) return named.name;
  }
  return nullptr;
}

int64_t SimdTargetFromName(std::string_view name) {
  for (const NamedTarget& named : kNamedTargets) {
    if (name == named.name) return named.target;
  }
  return 0;
}

const char* SimdTargetNames() {
  static const std::string names = [] {
    std::string out;
    for (const NamedTarget& named : kNamedTargets) {
      if (!out.empty()) out += ", ";
      out += named.name;
    }
    return out;
  }();
  return names.c_str();
}

bool SimdReduceCopy(int64_t target, const ReduceCopyArgs& args, const SimdOptions& options) {
  const SimdReduceCopyFn fn = GroupsOf(target)[GroupOf(args.datatype)].reduce_copy;
  return fn != nullptr && fn(args, options);
}

bool SimdScale(int64_t target, const ScaleArgs& args) {
  const SimdScaleFn fn = GroupsOf(target)[GroupOf(args.datatype)].scale;
  return fn != nullptr && fn(args);
}

}  // namespace baton
