#include "cuda/cuda_util.h"

#include <cuda.h>  // cuStreamWaitValue32's types (no libcuda link: the runtime's entry point)

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "base/cpu.h"
#include "base/deadline.h"
#include "base/log.h"
#include "base/settings.h"

namespace baton {
namespace {

using StreamWaitValue32Fn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

// cuStreamWaitValue32; null where the driver lacks it.
StreamWaitValue32Fn StreamWaitValue32() {
  static const auto fn =
      reinterpret_cast<StreamWaitValue32Fn>(DriverFunction("cuStreamWaitValue32"));
  return fn;
}

// Set once the driver refused the memory operation: kernels from then on.
std::atomic<bool> memop_refused{false};

}  // namespace

Status StreamWaitFlag(const volatile uint32_t* device_flag, uint32_t target,
                      uint64_t kernel_timeout_ns, cudaStream_t stream) {
  if (ProcessSettings().cuda_stream_wait != "kernel" &&
      !memop_refused.load(std::memory_order_relaxed)) {
    if (StreamWaitValue32Fn wait = StreamWaitValue32(); wait != nullptr) {
      // GEQ compares cyclically, (int32_t)(*flag - target) >= 0, as the kernel does.
      const CUresult r =
          wait(reinterpret_cast<CUstream>(stream), reinterpret_cast<CUdeviceptr>(device_flag),
               target, CU_STREAM_WAIT_VALUE_GEQ);
      if (r == CUDA_SUCCESS) return Status::Ok();
      BATON_INFO(kLogColl, "cuStreamWaitValue32 failed (CUresult %d): streams wait with a kernel",
                 static_cast<int>(r));
    } else {
      BATON_INFO(kLogColl, "no cuStreamWaitValue32 in this driver: streams wait with a kernel");
    }
    memop_refused.store(true, std::memory_order_relaxed);
  }
  return LaunchWaitFlagKernel(device_flag, target, kernel_timeout_ns, stream);
}

Placement Locate(const void* p) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError();  // not a pointer CUDA knows: plain host memory
    return {};
  }
  // Managed memory is host-accessible: the host path reads it directly.
  if (attr.type == cudaMemoryTypeDevice) return {true, attr.device};
  return {};
}

Status RecordEvent(cudaStream_t stream, cudaEvent_t* event, const char* what) {
  if (cudaError_t err = cudaEventCreateWithFlags(event, cudaEventDisableTiming);
      err != cudaSuccess) {
    *event = nullptr;
    return CudaErrorStatus(err, std::string("cudaEventCreate(") + what + ")");
  }
  if (cudaError_t err = cudaEventRecord(*event, stream); err != cudaSuccess) {
    cudaEventDestroy(*event);
    *event = nullptr;
    return CudaErrorStatus(err, std::string("cudaEventRecord(") + what + ")");
  }
  return Status::Ok();
}

void* DriverFunction(const char* name) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion(name, &p, CUDA_VERSION, cudaEnableDefault, &found) !=
          cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return p;
}

Status LaunchCopyKernel(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (bytes == 0 || dst == src) return Status::Ok();
  return LaunchReduceCopyKernel({.srcs = {src},
                                 .nsrcs = 1,
                                 .dsts = {dst},
                                 .ndsts = 1,
                                 .count = bytes,
                                 .datatype = batonUint8},
                                stream);
}

Status WaitCudaEvent(cudaEvent_t event, double timeout_s, const char* what,
                     const SpinPolicy& spin) {
  const Deadline deadline = DeadlineIn(timeout_s);
  Spinner spinner(spin, Clock::now());
  auto pause = std::chrono::microseconds(5);
  for (;;) {
    const cudaError_t err = cudaEventQuery(event);
    if (err == cudaSuccess) return Status::Ok();
    if (err != cudaErrorNotReady) return CudaErrorStatus(err, what);
    const auto now = Clock::now();
    if (spinner.Pause(now)) continue;
    if (now > deadline)
      return TimeoutError(std::string(what) + ": not complete after BATON_TIMEOUT=" +
                          std::to_string(static_cast<int>(timeout_s)) +
                          " s (is the stream blocked by earlier work?)");
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
  }
}

}  // namespace baton
