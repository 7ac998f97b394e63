// Bandwidth of the CPU reduce-copy kernels (src/kernels) against memcpy and a
// STREAM-style add, measured in the same run so the ratios are meaningful on
// a noisy or unfamiliar machine; and the Highway kernels against the
// hand-written AVX2 / AVX-512 back ends they replaced (perf/old_kernels/),
// interleaved in one run.
//
//   BM_Reduce/<type>/<op>/<impl>/<bytes>  dst = a op b (2 sources, 1
//        destination; avg divides by 2) through ReduceCopy, as collectives
//        run it (no streaming stores). <impl>: portable, a Highway target
//        (sse4, avx2, avx512, avx3_dl, ... what this build compiled and the
//        CPU runs), or old_avx2 / old_avx512 (the old back end, with the
//        portable loops where it had no vector path, as its ReduceCopy did).
//   BM_ReduceNT/<type>/sum/<impl>/<bytes>  the same with streaming stores.
//   BM_ScaleCopy/<type>/<impl>/<bytes>    PreMulSum's dst = a * scalar
//   BM_ScaleReduce/<type>/<impl>/<bytes>  its fused step dst = a * scalar + b
//        (no old back end had these: portable is what ran before).
//   BM_Memcpy/<bytes>                     memcpy(dst, src)
//   BM_StreamAdd/<bytes>                  c[i] = a[i] + b[i] in float
//
// <bytes> is the size of one array (16 KiB: L1, 512 KiB: L2, 4 and 64 MiB:
// beyond the cache). All benchmarks of one size share the same three arrays,
// so every implementation runs on the same pages. bytes_per_second counts
// every array touched once, as STREAM does: 3 x bytes for the reductions and
// the add, 2 x bytes for memcpy (write-allocate traffic is not counted by
// any of them). Run pinned to one core with the repetitions interleaved, and
// summarize with perf/kernels_compare.py (docs/design.md has the figures):
//   taskset -c 0 build/perf/kernels_bench --benchmark_repetitions=5
//     --benchmark_enable_random_interleaving=true --benchmark_min_time=0.05
//     --benchmark_out=kernels.json --benchmark_out_format=json   (one line)
//
// SPDX-License-Identifier: BSD-3-Clause

#include <benchmark/benchmark.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <baton.h>

#include "base/cpu.h"
#include "base/datatype.h"
#include "kernels/cpu_hwy.h"
#include "kernels/cpu_reduce.h"
#include "old_kernels/old_simd.h"

namespace baton {
namespace {

constexpr int64_t kSizes[] = {16 << 10, 512 << 10, 64 << 20};
// Streaming stores pay off, if at all, beyond the cache.
constexpr int64_t kNtSizes[] = {4 << 20, 64 << 20};
// PreMulSum's passes switch between vectors and the portable loop between
// L2 and DRAM sizes (kernels/cpu_hwy_lanes-inl.h).
constexpr int64_t kScaleSizes[] = {16 << 10, 512 << 10, 1 << 20, 4 << 20, 64 << 20};

// Frees what aligned_alloc returned.
struct FreeDeleter {
  void operator()(void* p) const { free(p); }
};

// One array aligned to the cache-line padding, filled so floats and 16-bit floats hold small
// finite values (no denormal or NaN slow paths in any type's view of them,
// nor in their products).
class Array {
 public:
  explicit Array(size_t bytes)
      : bytes_(bytes),
        data_(static_cast<uint8_t*>(aligned_alloc(
            kCacheLinePad, (bytes + kCacheLinePad - 1) / kCacheLinePad * kCacheLinePad))) {
    if (data_ == nullptr) return;
    // 0x3c00 is 1.0 in fp16; 0x3c003c00 is a float near 0.0078; bf16 0x3c00 is 0.0078.
    for (size_t i = 0; i + 2 <= bytes; i += 2) memcpy(data_.get() + i, "\x00\x3c", 2);
  }
  bool ok() const { return data_ != nullptr; }
  uint8_t* data() { return data_.get(); }

 private:
  size_t bytes_;
  std::unique_ptr<uint8_t, FreeDeleter> data_;
};

// The three arrays of one size (two sources and a destination, or source,
// destination and spare), made on first use and kept for the whole run.
struct Arrays {
  explicit Arrays(size_t bytes) : a(bytes), b(bytes), c(bytes) {}
  bool ok() const { return a.ok() && b.ok() && c.ok(); }
  Array a, b, c;
};

Arrays& ArraysOf(size_t bytes) {
  static std::map<size_t, std::unique_ptr<Arrays>> pool;
  std::unique_ptr<Arrays>& arrays = pool[bytes];
  if (arrays == nullptr) arrays = std::make_unique<Arrays>(bytes);
  return *arrays;
}

// One implementation under test: a kernel level of ReduceCopy, or an old
// back end entry (run with the portable level for what it declines).
struct Impl {
  std::string name;
  CpuKernelLevel level = CpuKernelLevel::kPortable;
  bool (*old)(const ReduceCopyArgs&, const old_kernels::SimdOptions&) = nullptr;
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

// What the old ReduceCopy did at an old level: check the arguments, copy
// for one source, the old back end, else the portable loops.
void OldReduceCopy(const ReduceCopyArgs& args, const Impl& impl,
                   const old_kernels::SimdOptions& options) {
  const bool args_ok = args.nsrcs >= 1 && args.nsrcs <= kMaxReduceSrcs && args.ndsts >= 1 &&
                       args.ndsts <= kMaxReduceDsts && DatatypeSize(args.datatype) != 0 &&
                       static_cast<int>(args.op) >= 0 && args.op < batonNumOps;
  if (!args_ok || args.count == 0) return;
  if (args.nsrcs == 1 && args.post_divisor <= 1) {
    memcpy(args.dsts[0], args.srcs[0], args.count * DatatypeSize(args.datatype));
    return;
  }
  if (!impl.old(args, options)) ReduceCopy(args);
}

// nt_min_bytes: the streaming-store threshold for the run.
void Reduce(benchmark::State& state, batonDataType_t dt, batonRedOp_t op, const Impl& impl,
            size_t nt_min_bytes) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  KernelLevelScope scope(impl.level, nt_min_bytes);
  if (!scope.ok()) {
    state.SkipWithError("kernel level not available on this CPU");
    return;
  }
  Arrays& arrays = ArraysOf(bytes);
  if (!arrays.ok()) {
    state.SkipWithError("out of memory");
    return;
  }
  ReduceCopyArgs args;
  args.srcs[0] = arrays.a.data();
  args.srcs[1] = arrays.b.data();
  args.nsrcs = 2;
  args.dsts[0] = arrays.c.data();
  args.ndsts = 1;
  args.count = bytes / DatatypeSize(dt);
  args.datatype = dt;
  args.op = op;
  args.post_divisor = op == batonAvg ? 2 : 0;
  old_kernels::SimdOptions old_options;
  old_options.non_temporal_min_bytes = nt_min_bytes;
  for (auto _ : state) {
    if (impl.old != nullptr) {
      OldReduceCopy(args, impl, old_options);
    } else {
      ReduceCopy(args);
    }
    benchmark::DoNotOptimize(arrays.c.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * 3 * bytes);
}

// PreMulSum's passes at impl's level (never an old back end): ScaleCopy
// when reduce is false, else ScaleReduce.
void Scale(benchmark::State& state, batonDataType_t dt, const Impl& impl, bool reduce) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  KernelLevelScope scope(impl.level, kDefaultNonTemporalMinBytes);
  if (!scope.ok()) {
    state.SkipWithError("kernel level not available on this CPU");
    return;
  }
  Arrays& arrays = ArraysOf(bytes);
  if (!arrays.ok()) {
    state.SkipWithError("out of memory");
    return;
  }
  const size_t count = bytes / DatatypeSize(dt);
  // 1.0 in fp16 and E5M2 (0x3c and 0x3c00), a small finite value elsewhere.
  const uint64_t scalar = 0x3c003c003c003c00ull;
  for (auto _ : state) {
    if (reduce) {
      ScaleReduce(arrays.c.data(), arrays.a.data(), arrays.b.data(), count, dt, &scalar, true);
    } else {
      ScaleCopy(arrays.c.data(), arrays.a.data(), count, dt, &scalar);
    }
    benchmark::DoNotOptimize(arrays.c.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * (reduce ? 3 : 2) * bytes);
}

void BM_Memcpy(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  Arrays& arrays = ArraysOf(bytes);
  if (!arrays.ok()) {
    state.SkipWithError("out of memory");
    return;
  }
  for (auto _ : state) {
    memcpy(arrays.c.data(), arrays.a.data(), bytes);
    benchmark::DoNotOptimize(arrays.c.data());
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
  Arrays& arrays = ArraysOf(bytes);
  if (!arrays.ok()) {
    state.SkipWithError("out of memory");
    return;
  }
  const size_t n = bytes / sizeof(float);
  for (auto _ : state) {
    StreamAdd(reinterpret_cast<float*>(arrays.c.data()),
              reinterpret_cast<const float*>(arrays.a.data()),
              reinterpret_cast<const float*>(arrays.b.data()), n);
    benchmark::DoNotOptimize(arrays.c.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * 3 * bytes);
}

// Every implementation this CPU runs: the kernel levels, and each old back
// end after the Highway target that replaced it.
std::vector<Impl> Implementations() {
  std::vector<Impl> impls;
  for (CpuKernelLevel level : CompiledCpuKernelLevels()) {
    if (!CpuKernelLevelAvailable(level)) continue;  // nothing to measure
    const std::string name = CpuKernelLevelName(level);
    if (name == "avx2" && old_kernels::CpuSupportsAvx2()) {
      impls.push_back({"old_avx2", CpuKernelLevel::kPortable, old_kernels::ReduceCopyAvx2});
    }
    if (name == "avx512" && old_kernels::CpuSupportsAvx512()) {
      impls.push_back({"old_avx512", CpuKernelLevel::kPortable, old_kernels::ReduceCopyAvx512});
    }
    impls.push_back({name, level, nullptr});
  }
  return impls;
}

void RegisterAll() {
  for (int64_t size : kSizes) {
    benchmark::RegisterBenchmark("BM_Memcpy", BM_Memcpy)->Arg(size);
    benchmark::RegisterBenchmark("BM_StreamAdd", BM_StreamAdd)->Arg(size);
  }
  const std::vector<Impl> impls = Implementations();
  for (batonDataType_t dt :
       {batonFloat32, batonFloat64, batonFloat16, batonBfloat16, batonFloat8e4m3, batonFloat8e5m2,
        batonInt8, batonUint8, batonInt32, batonUint32, batonInt64, batonUint64}) {
    for (batonRedOp_t op : {batonSum, batonProd, batonMax, batonMin, batonAvg}) {
      for (const Impl& impl : impls) {
        const std::string name =
            std::string("BM_Reduce/") + DatatypeName(dt) + "/" + RedOpName(op) + "/" + impl.name;
        auto* bench = benchmark::RegisterBenchmark(name.c_str(), Reduce, dt, op, impl,
                                                   kDefaultNonTemporalMinBytes);
        for (int64_t size : kSizes) bench->Arg(size);
      }
    }
    for (const Impl& impl : impls) {
      if (impl.old != nullptr) continue;
      for (bool reduce : {false, true}) {
        const std::string name = std::string(reduce ? "BM_ScaleReduce/" : "BM_ScaleCopy/") +
                                 DatatypeName(dt) + "/" + impl.name;
        auto* bench = benchmark::RegisterBenchmark(name.c_str(), Scale, dt, impl, reduce);
        for (int64_t size : kScaleSizes) bench->Arg(size);
      }
    }
    for (const Impl& impl : impls) {
      if (impl.name == "portable") continue;  // never streams
      const std::string name = std::string("BM_ReduceNT/") + DatatypeName(dt) + "/sum/" + impl.name;
      auto* bench = benchmark::RegisterBenchmark(name.c_str(), Reduce, dt, batonSum, impl, 0);
      for (int64_t size : kNtSizes) bench->Arg(size);
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
