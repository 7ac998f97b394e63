#include "cuda/cuda_util.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "base/deadline.h"

namespace baton {

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

Status WaitCudaEvent(cudaEvent_t event, double timeout_s, const char* what) {
  const Deadline deadline = DeadlineIn(timeout_s);
  auto pause = std::chrono::microseconds(5);
  for (;;) {
    const cudaError_t err = cudaEventQuery(event);
    if (err == cudaSuccess) return Status::Ok();
    if (err != cudaErrorNotReady) return CudaErrorStatus(err, what);
    if (Clock::now() > deadline)
      return TimeoutError(std::string(what) + ": not complete after BATON_TIMEOUT=" +
                          std::to_string(static_cast<int>(timeout_s)) +
                          " s (is the stream blocked by earlier work?)");
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
  }
}

}  // namespace baton
