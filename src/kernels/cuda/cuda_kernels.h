/*
 * Host-callable launchers of the CUDA kernels (reduce_copy.cu, wait_flag.cu).
 * Only built when nvcc was found (BATON_HAVE_CUDA); see docs/cuda.md.
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#pragma once

#include <stdint.h>

#include <string>

#include <cuda_runtime_api.h>

#include "base/status.h"
#include "kernels/cpu_reduce.h"

namespace baton {

// A batonUnhandledCudaError Status: "<what>: <CUDA error name>: <description>".
Status CudaErrorStatus(cudaError_t err, const std::string& what);

// Queues one reduce-copy step (same semantics as ReduceCopy in cpu_reduce.h)
// on `stream`, for buffers the current device can access. Returns at once:
// InvalidArgument for arguments out of range, batonUnhandledCudaError with
// CUDA's message when the launch fails; faults inside the kernel surface later
// on the stream, as for any CUDA kernel.
Status LaunchReduceCopyKernel(const ReduceCopyArgs& args, cudaStream_t stream);

// Loads every kernel of this file into the current device's context now.
// With lazy loading (CUDA's default since 12.2) a kernel is otherwise loaded
// at its first launch, which may wait for the whole context to go idle: a
// deadlock while a stream waits for the host side of a collective whose
// kernels are the ones being loaded. NCCL preloads its kernels likewise.
Status LoadCudaKernels();

// Queues a one-thread kernel on `stream` that spins until the host-written
// word *flag (mapped pinned memory) reaches `target` (compared modulo 2^32,
// so sequence numbers may wrap) or `timeout_ns` has passed, whichever comes
// first. Work queued on the stream after it starts only then: this is how a
// stream waits for the host side of a collective without blocking any host
// thread (a host callback must never wait on the network).
Status LaunchWaitFlagKernel(const volatile uint32_t* flag, uint32_t target, uint64_t timeout_ns,
                            cudaStream_t stream);

}  // namespace baton
