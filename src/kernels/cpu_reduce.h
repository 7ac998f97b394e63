/*
 * CPU entry point of the reduce-copy kernels: every host-side step of a
 * collective (reduce a received chunk into a local one, copy to the output,
 * divide for batonAvg) goes through ReduceCopy. The element arithmetic is the
 * portable core in reduce_copy.h, so host and device steps agree bit for bit.
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <string_view>
#include <vector>

#include <baton.h>

namespace baton {

// Most sources / destinations one ReduceCopy call takes.
inline constexpr int kMaxReduceSrcs = 8;
inline constexpr int kMaxReduceDsts = 2;

// One reduce-copy step: for each element i < count,
//   dsts[*][i] = (srcs[0][i] op srcs[1][i] op ... op srcs[nsrcs-1][i]) / post_divisor
// reduced left to right (in float for fp16/bf16, which round once at the end).
// A destination may be the same buffer as a source (in place); partially
// overlapping buffers are not allowed. Pointers need only element alignment.
struct ReduceCopyArgs {
  const void* srcs[kMaxReduceSrcs] = {};
  int nsrcs = 0;  // 1..8; nsrcs == 1 means copy (optionally divided)
  void* dsts[kMaxReduceDsts] = {};
  int ndsts = 0;     // 1..2
  size_t count = 0;  // elements
  batonDataType_t datatype = batonFloat32;
  batonRedOp_t op = batonSum;  // batonAvg reduces as batonSum
  uint32_t post_divisor = 0;   // 0 or 1: none; > 1: divide the result (avg final step)
  // Streaming stores (they bypass the caches and skip the read for
  // ownership) into dsts[0] where its alignment allows, whatever the size:
  // for outputs nobody reads again within the call. dsts[1] always takes
  // cached stores: the copy a later step reads (a reduced chunk that is
  // sent on while it is cached).
  bool non_temporal = false;
};

// Runs one step. Arguments out of range (nsrcs, ndsts, datatype, op) are a
// programming error: they assert in debug builds and do nothing otherwise.
void ReduceCopy(const ReduceCopyArgs& args);

// Convenience for the common two-operand step: dst = a op b, elementwise,
// then divided by post_divisor when > 1. dst may be a or b. non_temporal:
// as in ReduceCopyArgs. `copy`, when not null, gets the same result in the
// same pass, with cached stores (ReduceCopyArgs' second destination).
void ReduceInto(void* dst, const void* a, const void* b, size_t count, batonDataType_t dt,
                batonRedOp_t op, uint32_t post_divisor = 0, bool non_temporal = false,
                void* copy = nullptr);

// memcpy with streaming stores where the vector back end runs (dst and src
// must not overlap): for outputs nobody reads again within the call.
void StreamCopy(void* dst, const void* src, size_t bytes);
// StreamCopy where `streaming`, else memcpy.
void CopyOut(void* dst, const void* src, size_t bytes, bool streaming);

// dst[i] = src[i] * *scalar (one element of dt) for i < count: the
// pre-multiplication of a PreMulSum op (ScaleCopyRange in reduce_copy.h).
// dst may equal src; otherwise they must not overlap.
void ScaleCopy(void* dst, const void* src, size_t count, batonDataType_t dt, const void* scalar);

// A PreMulSum step that reads this rank's own input: dst[i] = own[i] *
// *scalar + other[i] (own_first; else other[i] + own[i] * *scalar), the
// product kept in the accumulation type (ScaleReduceRange in
// reduce_copy.h). dst may equal own or other; no other overlap.
void ScaleReduce(void* dst, const void* own, const void* other, size_t count, batonDataType_t dt,
                 const void* scalar, bool own_first);

// ---- Kernel implementation (BATON_KERNELS) ---------------------------------
//
// ReduceCopy, ScaleCopy and ScaleReduce run either the portable loops or
// one target of the vectorized back end, which Google Highway compiles for
// SSE4, AVX2, AVX-512 and AVX3_DL on x86 and NEON, SVE and SVE2 on aarch64
// (cpu_hwy.h); all give bit-identical results (NaN payloads of sums and
// products aside, as in the portable core). The default is the best the
// CPU has; BATON_KERNELS=auto|portable|<target> overrides it.
//
// A level is kPortable or one Highway target, its value that target's bit
// (HWY_AVX2, ...), which is also its order: a smaller bit is a better
// target on the same architecture.
enum class CpuKernelLevel : int64_t {
  kPortable = 0,  // the core's loops, auto-vectorized for the baseline ISA
};

// The level ReduceCopy uses now. The first call reads BATON_KERNELS and logs
// the choice once at INFO.
CpuKernelLevel CurrentCpuKernelLevel();
// The best level this CPU (and OS) supports among those compiled.
CpuKernelLevel BestCpuKernelLevel();
// kPortable, then every Highway target compiled into this build from the
// least to the most capable, whether or not this CPU runs it.
std::vector<CpuKernelLevel> CompiledCpuKernelLevels();
// Compiled and supported by this CPU (kPortable always is).
bool CpuKernelLevelAvailable(CpuKernelLevel level);
// Makes ReduceCopy use level from now on, for every thread (tests and
// benchmarks compare levels in one process). Returns false, changing
// nothing, when the level is unavailable or out of range.
bool SetCpuKernelLevel(CpuKernelLevel level);
// "portable", "sse4", "avx2", "avx512", "avx3_dl", "neon", "sve", "sve2",
// ...; "invalid" for a value that is none of them.
const char* CpuKernelLevelName(CpuKernelLevel level);
// The level a BATON_KERNELS name stands for ("portable" or a target's name
// or alias, whether or not compiled here: "avx3" is "avx512"); false for
// anything else (including "auto").
bool ParseCpuKernelLevel(std::string_view name, CpuKernelLevel* level);

}  // namespace baton
