// CUDA reduce-copy kernels: the portable core (reduce_copy.h) through the
// per-thread body of reduce_copy_device.h, one kernel per (datatype, op),
// with the number of sources and destinations a runtime argument (so the
// build stays at 48 kernels per architecture; see docs/cuda.md).
//
// SPDX-License-Identifier: BSD-3-Clause
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/reduce_copy_device.h"

namespace baton {
namespace {

template <typename T, typename Op>
__global__ void __launch_bounds__(cudakern::kThreadsPerBlock)
    ReduceCopyKernel(cudakern::KernelArgs args, cudakern::VectorSplit split) {
  const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t nthreads = static_cast<size_t>(gridDim.x) * blockDim.x;
  cudakern::ReduceCopyThread<T, Op>(args, split, tid, nthreads);
}

}  // namespace

Status CudaErrorStatus(cudaError_t err, const std::string& what) {
  return Status(batonUnhandledCudaError,
                what + ": " + cudaGetErrorName(err) + ": " + cudaGetErrorString(err));
}

Status LoadWaitFlagKernel();  // wait_flag.cu

Status LoadCudaKernels() {
  cudaError_t first_error = cudaSuccess;
  for (int t = 0; t < batonNumTypes; ++t) {
    for (int o = 0; o < batonNumOps; ++o) {
      DispatchReduce(static_cast<batonDataType_t>(t), static_cast<batonRedOp_t>(o),
                     [&](auto type_tag, auto op_tag) {
                       using T = typename decltype(type_tag)::type;
                       using Op = typename decltype(op_tag)::type;
                       cudaFuncAttributes attributes;
                       const cudaError_t err =
                           cudaFuncGetAttributes(&attributes, ReduceCopyKernel<T, Op>);
                       if (first_error == cudaSuccess) first_error = err;
                     });
    }
  }
  if (first_error != cudaSuccess) {
    cudaGetLastError();
    return CudaErrorStatus(first_error, "loading the reduce-copy kernels");
  }
  return LoadWaitFlagKernel();
}

Status LaunchReduceCopyKernel(const ReduceCopyArgs& args, cudaStream_t stream) {
  if (args.nsrcs < 1 || args.nsrcs > cudakern::kMaxSrcs || args.ndsts < 1 ||
      args.ndsts > cudakern::kMaxDsts)
    return InvalidArgument("reduce-copy kernel: " + std::to_string(args.nsrcs) + " sources and " +
                           std::to_string(args.ndsts) + " destinations (1..8 and 1..2)");
  if (args.count == 0) return Status::Ok();
  cudakern::KernelArgs k{};
  for (int s = 0; s < args.nsrcs; ++s) k.srcs[s] = args.srcs[s];
  for (int d = 0; d < args.ndsts; ++d) k.dsts[d] = args.dsts[d];
  k.nsrcs = args.nsrcs;
  k.ndsts = args.ndsts;
  k.count = args.count;
  k.post_divisor = args.post_divisor;
  bool launched = false;
  const bool valid = DispatchReduce(args.datatype, args.op, [&](auto type_tag, auto op_tag) {
    using T = typename decltype(type_tag)::type;
    using Op = typename decltype(op_tag)::type;
    const cudakern::VectorSplit split = cudakern::SplitForVectors(k, sizeof(T));
    const cudakern::LaunchShape shape = cudakern::ShapeFor(split);
    ReduceCopyKernel<T, Op><<<shape.blocks, shape.threads, 0, stream>>>(k, split);
    launched = true;
  });
  if (!valid || !launched)
    return InvalidArgument("reduce-copy kernel: invalid datatype " +
                           std::to_string(static_cast<int>(args.datatype)) + " or op " +
                           std::to_string(static_cast<int>(args.op)));
  if (cudaError_t err = cudaGetLastError(); err != cudaSuccess)
    return CudaErrorStatus(err, "reduce-copy kernel launch");
  return Status::Ok();
}

}  // namespace baton
