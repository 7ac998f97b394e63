// Bandwidth of the CUDA reduce-copy kernels (src/kernels/cuda) against a device-to-device
// cudaMemcpy, the GPU's memory roofline, measured in the same run so the ratio holds on any GPU.
//
//   cuda_kernels_bench [-e BYTES] [-n ITERS] [-J FILE]
//
// For every datatype (sum) and every op (float), and for the step shapes collectives launch
// (1 source: a copy; 2 sources into 1 or 2 destinations; 8 sources, the most one kernel takes),
// it times ITERS launches on BYTES-sized arrays with CUDA events and prints the median. GB/s counts
// every array touched once, (sources + destinations) x BYTES per launch, as STREAM does; the
// memcpy counts 2 x BYTES. "of memcpy" is the ratio of the two. The arrays hold small finite
// values in every type's view (no NaN, infinity or denormal paths).
//
// SPDX-License-Identifier: BSD-3-Clause

#include <cuda_runtime_api.h>
#include <getopt.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <baton.h>

#include "base/datatype.h"
#include "kernels/cuda/cuda_kernels.h"

namespace baton {
namespace {

struct Shape {
  int nsrcs;
  int ndsts;
};
constexpr Shape kShapes[] = {{1, 1}, {2, 1}, {2, 2}, {8, 1}};

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "cuda_kernels_bench: %s\n", what.c_str());
  std::exit(1);
}

void CheckCuda(cudaError_t err, const char* what) {
  if (err != cudaSuccess) Die(std::string(what) + ": " + cudaGetErrorString(err));
}

// Median milliseconds of `iters` runs of `launch` on `stream`, after two untimed ones.
template <typename Launch>
double MedianMs(int iters, cudaStream_t stream, Launch launch) {
  cudaEvent_t start, stop;
  CheckCuda(cudaEventCreate(&start), "cudaEventCreate");
  CheckCuda(cudaEventCreate(&stop), "cudaEventCreate");
  for (int i = 0; i < 2; ++i) launch();
  std::vector<float> ms(static_cast<size_t>(iters));
  for (float& t : ms) {
    CheckCuda(cudaEventRecord(start, stream), "cudaEventRecord");
    launch();
    CheckCuda(cudaEventRecord(stop, stream), "cudaEventRecord");
    CheckCuda(cudaEventSynchronize(stop), "cudaEventSynchronize");
    CheckCuda(cudaEventElapsedTime(&t, start, stop), "cudaEventElapsedTime");
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

int Main(int argc, char** argv) {
  size_t bytes = size_t{256} << 20;
  int iters = 20;
  std::string json_path;
  for (int c; (c = getopt(argc, argv, "e:n:J:h")) != -1;) {
    switch (c) {
      case 'e':
        bytes = std::strtoull(optarg, nullptr, 0);
        break;
      case 'n':
        iters = std::atoi(optarg);
        break;
      case 'J':
        json_path = optarg;
        break;
      default:
        std::printf("usage: %s [-e bytes per array] [-n iterations] [-J json file]\n", argv[0]);
        return c == 'h' ? 0 : 1;
    }
  }
  if (bytes < 64 || iters < 1) Die("-e must be at least 64 and -n at least 1");

  int device = 0;
  CheckCuda(cudaGetDevice(&device), "cudaGetDevice");
  cudaDeviceProp prop = {};
  CheckCuda(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  cudaStream_t stream;
  CheckCuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");

  constexpr int kArrays = kMaxReduceSrcs + kMaxReduceDsts;
  std::vector<void*> arrays(kArrays);
  for (void*& a : arrays) {
    CheckCuda(cudaMalloc(&a, bytes), "cudaMalloc");
    // 0x3c: fp16 1.0 pairs, small floats, bf16 0.0078, fp8 1.5 (e4m3) / 1.0 (e5m2), small ints.
    CheckCuda(cudaMemset(a, 0x3c, bytes), "cudaMemset");
  }
  std::FILE* json = json_path.empty() ? nullptr : std::fopen(json_path.c_str(), "w");
  if (!json_path.empty() && json == nullptr) Die("cannot write " + json_path);

  const double copy_ms = MedianMs(iters, stream, [&] {
    CheckCuda(cudaMemcpyAsync(arrays[1], arrays[0], bytes, cudaMemcpyDeviceToDevice, stream),
              "cudaMemcpyAsync");
  });
  const double copy_gbs = 2.0 * static_cast<double>(bytes) / (copy_ms * 1e6);
  std::printf("# %s, %d SMs, %zu bytes per array, median of %d\n", prop.name,
              prop.multiProcessorCount, bytes, iters);
  std::printf("# cudaMemcpy device to device: %.3f ms, %.1f GB/s (2 x bytes)\n", copy_ms, copy_gbs);
  std::printf("# %-9s %-5s %4s %4s %10s %10s %9s\n", "type", "op", "srcs", "dsts", "time(ms)",
              "GB/s", "of memcpy");
  if (json) {
    std::fprintf(json, "{\"gpu\":\"%s\",\"bytes\":%zu,\"memcpy_ms\":%.6f,\"memcpy_gbs\":%.3f}\n",
                 prop.name, bytes, copy_ms, copy_gbs);
  }

  double worst = 1e9;
  for (int t = 0; t < batonNumTypes; ++t) {
    const auto type = static_cast<batonDataType_t>(t);
    for (int o = 0; o < batonNumOps; ++o) {
      const auto op = static_cast<batonRedOp_t>(o);
      if (op != batonSum && type != batonFloat) continue;  // every op once, on float
      for (const Shape& shape : kShapes) {
        if (shape.nsrcs == 1 && op != batonSum) continue;  // a copy reduces nothing
        ReduceCopyArgs args;
        args.nsrcs = shape.nsrcs;
        args.ndsts = shape.ndsts;
        for (int s = 0; s < shape.nsrcs; ++s) args.srcs[s] = arrays[s];
        for (int d = 0; d < shape.ndsts; ++d) args.dsts[d] = arrays[kMaxReduceSrcs + d];
        args.count = bytes / DatatypeSize(type);
        args.datatype = type;
        args.op = op;
        const double ms = MedianMs(iters, stream, [&] {
          const Status st = LaunchReduceCopyKernel(args, stream);
          if (!st.ok()) Die("LaunchReduceCopyKernel: " + st.message());
        });
        CheckCuda(cudaStreamSynchronize(stream), "a reduce-copy kernel");
        const double moved = static_cast<double>(shape.nsrcs + shape.ndsts) *
                             static_cast<double>(args.count * DatatypeSize(type));
        const double gbs = moved / (ms * 1e6);
        worst = std::min(worst, gbs / copy_gbs);
        std::printf("  %-9s %-5s %4d %4d %10.3f %10.1f %9.2f\n", DatatypeName(type), RedOpName(op),
                    shape.nsrcs, shape.ndsts, ms, gbs, gbs / copy_gbs);
        if (json) {
          std::fprintf(json,
                       "{\"type\":\"%s\",\"op\":\"%s\",\"srcs\":%d,\"dsts\":%d,\"ms\":%.6f,"
                       "\"gbs\":%.3f,\"of_memcpy\":%.4f}\n",
                       DatatypeName(type), RedOpName(op), shape.nsrcs, shape.ndsts, ms, gbs,
                       gbs / copy_gbs);
        }
      }
    }
  }
  std::printf("# lowest fraction of memcpy: %.2f\n", worst);
  if (json) std::fclose(json);
  for (void* a : arrays) cudaFree(a);
  cudaStreamDestroy(stream);
  return 0;
}

}  // namespace
}  // namespace baton

int main(int argc, char** argv) {
  return baton::Main(argc, argv);
}
