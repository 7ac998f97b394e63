// Bandwidth of the CPU reduce-copy kernels (src/kernels) against memcpy and a
// STREAM-style add, measured in the same run so the ratios are meaningful on
// a noisy or unfamiliar machine.
//
//   BM_ReduceSum/<type>/<level>/<bytes>  dst = a + b (2 sources, 1 destination)
//                                        through ReduceCopy at one kernel level,
//                                        as collectives run it (streaming stores
//                                        from kDefaultNonTemporalMinBytes up)
//   BM_ReduceSumNT/float/<level>/<bytes> the same, always streaming stores
//   BM_ReduceSumCached/float/<level>/<bytes>  never streaming stores
//   BM_Memcpy/<bytes>                    memcpy(dst, src)
//   BM_StreamAdd/<bytes>                 c[i] = a[i] + b[i] in float
//
// <bytes> is the size of one array (16 KiB: L1, 512 KiB: L2, 64 MiB: DRAM).
// bytes_per_second counts every array touched once, as STREAM does: 3 x bytes
// for the reductions and the add, 2 x bytes for memcpy (write-allocate
// traffic is not counted by any of them). Run pinned to one core, e.g.
//   taskset -c 0 build/perf/kernels_bench --benchmark_repetitions=3
//
// SPDX-License-Identifier: BSD-3-Clause

#include <benchmark/benchmark.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <memory>
#include <string>
#include <vector>

#include <baton.h>

#include "base/datatype.h"
#include "kernels/cpu_reduce.h"
#include "kernels/cpu_simd.h"

namespace baton {
namespace {

constexpr int64_t kSizes[] = {16 << 10, 512 << 10, 64 << 20};
// Where streaming stores start to pay off lies between L2 and DRAM sizes:
// fp32 is also measured at these, with and without them.
constexpr int64_t kNtSizes[] = {512 << 10, 4 << 20, 16 << 20, 64 << 20};

// Frees what aligned_alloc returned.
struct FreeDeleter {
  void operator()(void* p) const { free(p); }
};

// One 64-byte aligned array, filled so floats and 16-bit floats hold small
// finite values (no denormal or NaN slow paths in any type's view of them).
class Array {
 public:
  explicit Array(size_t bytes)
      : bytes_(bytes), data_(static_cast<uint8_t*>(aligned_alloc(64, (bytes + 63) / 64 * 64))) {
    if (data_ == nullptr) return;
    // 0x3c00 is 1.0 in fp16; 0x3c003c00 is a float near 0.0078; bf16 0x3c00 is 0.0078.
    for (size_t i = 0; i + 2 <= bytes; i += 2) memcpy(data_.get() + i, "\x00\x3c", 2);
  }
  bool ok() const { return data_ != nullptr; }
  uint8_t* data() { return data_.get(); }
  size_t bytes() const { return bytes_; }

 private:
  size_t bytes_;
  std::unique_ptr<uint8_t, FreeDeleter> data_;
};

// Restores the process-wide kernel level and streaming threshold.
class KernelLevelScope {
 public:
  KernelLevelScope(CpuKernelLevel level, size_t nt_min_bytes)
      : saved_(CurrentCpuKernelLevel()), saved_nt_(SimdNonTemporalMinBytes()) {
    ok_ = SetCpuKernelLevel(level);
    SetSimdNonTemporalMinBytes(nt_min_bytes);
  }
  ~KernelLevelScope() {
    SetCpuKernelLevel(saved_);
    SetSimdNonTemporalMinBytes(saved_nt_);
  }
  bool ok() const { return ok_; }

 private:
  CpuKernelLevel saved_;
  size_t saved_nt_;
  bool ok_ = false;
};

// nt_min_bytes: SimdOptions::non_temporal_min_bytes for the run.
void ReduceSum(benchmark::State& state, batonDataType_t dt, CpuKernelLevel level,
               size_t nt_min_bytes) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  KernelLevelScope scope(level, nt_min_bytes);
  if (!scope.ok()) {
    state.SkipWithError("kernel level not available on this CPU");
    return;
  }
  Array a(bytes), b(bytes), dst(bytes);
  if (!a.ok() || !b.ok() || !dst.ok()) {
    state.SkipWithError("out of memory");
    return;
  }
  ReduceCopyArgs args;
  args.srcs[0] = a.data();
  args.srcs[1] = b.data();
  args.nsrcs = 2;
  args.dsts[0] = dst.data();
  args.ndsts = 1;
  args.count = bytes / DatatypeSize(dt);
  args.datatype = dt;
  args.op = batonSum;
  for (auto _ : state) {
    ReduceCopy(args);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * 3 * bytes);
}

void BM_Memcpy(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  Array src(bytes), dst(bytes);
  if (!src.ok() || !dst.ok()) {
    state.SkipWithError("out of memory");
    return;
  }
  for (auto _ : state) {
    memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * 2 * bytes);
}

// STREAM "Add", compiled for the baseline ISA like the portable kernels.
__attribute__((noinline)) void StreamAdd(float* __restrict__ c, const float* __restrict__ a,
                                         const float* __restrict__ b, size_t n) {
  for (size_t i = 0; i < n; ++i) c[i] = a[i] + b[i];
}

void BM_StreamAdd(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  Array a(bytes), b(bytes), c(bytes);
  if (!a.ok() || !b.ok() || !c.ok()) {
    state.SkipWithError("out of memory");
    return;
  }
  const size_t n = bytes / sizeof(float);
  for (auto _ : state) {
    StreamAdd(reinterpret_cast<float*>(c.data()), reinterpret_cast<const float*>(a.data()),
              reinterpret_cast<const float*>(b.data()), n);
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * 3 * bytes);
}

void RegisterAll() {
  for (int64_t size : kSizes) {
    benchmark::RegisterBenchmark("BM_Memcpy", BM_Memcpy)->Arg(size);
    benchmark::RegisterBenchmark("BM_StreamAdd", BM_StreamAdd)->Arg(size);
  }
  const struct {
    batonDataType_t dt;
    const char* name;
  } kTypes[] = {{batonFloat32, "float"},
                {batonBfloat16, "bfloat16"},
                {batonFloat16, "half"},
                {batonFloat8e4m3, "f8e4m3"},
                {batonFloat8e5m2, "f8e5m2"}};
  for (auto type : kTypes) {
    for (CpuKernelLevel level :
         {CpuKernelLevel::kPortable, CpuKernelLevel::kAvx2, CpuKernelLevel::kAvx512}) {
      if (!CpuKernelLevelAvailable(level)) continue;  // nothing to measure
      const std::string name =
          std::string("BM_ReduceSum/") + type.name + "/" + CpuKernelLevelName(level);
      auto* plain = benchmark::RegisterBenchmark(name.c_str(), ReduceSum, type.dt, level,
                                                 kDefaultNonTemporalMinBytes);
      for (int64_t size : kSizes) plain->Arg(size);
      if (type.dt == batonFloat32 && level != CpuKernelLevel::kPortable) {
        const std::string suffix = std::string("/") + type.name + "/" + CpuKernelLevelName(level);
        auto* streaming = benchmark::RegisterBenchmark(("BM_ReduceSumNT" + suffix).c_str(),
                                                       ReduceSum, type.dt, level, size_t{0});
        auto* cached = benchmark::RegisterBenchmark(("BM_ReduceSumCached" + suffix).c_str(),
                                                    ReduceSum, type.dt, level, SIZE_MAX);
        for (int64_t size : kNtSizes) {
          streaming->Arg(size);
          cached->Arg(size);
        }
      }
    }
  }
}

}  // namespace
}  // namespace baton

int main(int argc, char** argv) {
  baton::RegisterAll();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
