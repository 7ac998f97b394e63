/*
 * Which Highway targets the CPU reduce-copy kernels are compiled for, and
 * how a target's entry is found in a HWY_EXPORT table. Every translation
 * unit of the Highway back end (cpu_hwy*.cc) includes this before any other
 * Highway header, so all of them agree on HWY_TARGETS.
 *
 * On x86: SSE4, AVX2, AVX3 (AVX-512 F/BW/DQ/VL) and AVX3_DL (Ice Lake and
 * Zen 4), with the scalar fallback compiled as the static target; on
 * aarch64: NEON (the static target), SVE and SVE2. HWY_TARGETS follows from
 * the compiler's baseline, so a -march=native build compiles only the
 * targets at least as good as its baseline (and CompiledSimdTargets says so).
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#pragma once

// AVX3_DL is opt-in in Highway 1.0.3. It is the target Highway picks on
// Zen 4 (Highway 1.0.3 has no AVX3_ZEN4 target of its own; newer versions
// do, and HWY_WANT_AVX3_ZEN4 asks for it there).
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL
#endif
#ifndef HWY_WANT_AVX3_ZEN4
#define HWY_WANT_AVX3_ZEN4
#endif

// Left out to keep compile time down: SSSE3 (CPUs from before 2008, which
// keep the portable loops) and the fixed-width SVE specializations (the
// generic SVE and SVE2 code runs on those CPUs). The names are expanded
// only inside Highway's #if tests, after it has defined them.
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SSSE3 | HWY_SVE_256 | HWY_SVE2_128)
#endif

#include <hwy/targets.h>
#include <stddef.h>
#include <stdint.h>

namespace baton {

// The entry of target (one HWY_* bit) in table, a HWY_DISPATCH_TABLE of
// HWY_EXPORT; nullptr when that target was not compiled. HWY_EXPORT's table
// has one slot per dynamic target after its initializing entry, in the
// order of hwy::ChosenTarget's mask, or a single entry when only one
// target is compiled. The scalar fallback (last slot) is never returned:
// the portable loops stand for it.
template <typename Fn, size_t kSize>
Fn SimdTableEntry(Fn const (&table)[kSize], int64_t target) {
  if (target == 0 || (target & (target - 1)) != 0) return nullptr;  // one bit
  if ((target & (HWY_SCALAR | HWY_EMU128)) != 0) return nullptr;
  if constexpr (kSize == 1) {
    return target == HWY_STATIC_TARGET ? table[0] : nullptr;
  } else {
    const uint64_t chosen = static_cast<uint64_t>(HWY_CHOSEN_TARGET_SHIFT(target));
    if (chosen == 0) return nullptr;  // not a dynamic target of this architecture
    const size_t index = hwy::Num0BitsBelowLS1Bit_Nonzero64(chosen);
    return index + 1 < kSize ? table[index] : nullptr;
  }
}

}  // namespace baton
