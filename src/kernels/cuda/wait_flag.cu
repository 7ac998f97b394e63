// The stream-side half of the host/device handshake of the staged device
// path (src/cuda/cuda_device.cc): a one-thread kernel that holds back later
// work on its stream until the host publishes a sequence number.
//
// SPDX-License-Identifier: BSD-3-Clause
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_kernels.h"

namespace baton {
namespace {

// Nanoseconds of the GPU's global timer (sm_70 and later).
__device__ __forceinline__ uint64_t GlobalTimerNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void WaitFlagKernel(const volatile uint32_t* flag, uint32_t target,
                               uint64_t timeout_ns) {
  const uint64_t start = GlobalTimerNs();
  // Signed difference: reached once flag - target >= 0 modulo 2^32.
  while (static_cast<int32_t>(*flag - target) < 0) {
    if (GlobalTimerNs() - start > timeout_ns) return;  // the host reports the error
    __nanosleep(1000);                                 // back off: the flag moves at network speed
  }
  // Host writes made before the flag (the staged result) are visible to the
  // copies that follow this kernel on the stream.
  __threadfence_system();
}

}  // namespace

Status LoadWaitFlagKernel() {
  cudaFuncAttributes attributes;
  if (cudaError_t err = cudaFuncGetAttributes(&attributes, WaitFlagKernel); err != cudaSuccess) {
    cudaGetLastError();
    return CudaErrorStatus(err, "loading the wait kernel");
  }
  return Status::Ok();
}

Status LaunchWaitFlagKernel(const volatile uint32_t* flag, uint32_t target, uint64_t timeout_ns,
                            cudaStream_t stream) {
  WaitFlagKernel<<<1, 1, 0, stream>>>(flag, target, timeout_ns);
  if (cudaError_t err = cudaGetLastError(); err != cudaSuccess)
    return CudaErrorStatus(err, "wait kernel launch");
  return Status::Ok();
}

}  // namespace baton
