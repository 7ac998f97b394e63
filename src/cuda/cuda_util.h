// Small CUDA helpers of the device path: RAII for the current device and
// for pinned memory, where a pointer lives, and events with deadlines.
// CUDA builds only.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/deadline.h"
#include "base/log.h"
#include "base/spin.h"
#include "base/status.h"
#include "kernels/cuda/cuda_kernels.h"

namespace baton {

// Makes `device` current for the scope, restoring the previous one after.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (device >= 0 && device != previous_) {
      status_ = cudaSetDevice(device);
      switched_ = status_ == cudaSuccess;
    }
  }
  ~DeviceGuard() {
    if (switched_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  cudaError_t status() const { return status_; }

 private:
  int previous_ = -1;
  bool switched_ = false;
  cudaError_t status_ = cudaSuccess;
};

// Pinned (page-locked) host memory from cudaHostAlloc, freed on destruction.
class PinnedMemory {
 public:
  PinnedMemory() = default;
  ~PinnedMemory() {
    if (ptr_) cudaFreeHost(ptr_);  // errors at process exit (runtime unloading) are moot
  }
  PinnedMemory(const PinnedMemory&) = delete;
  PinnedMemory& operator=(const PinnedMemory&) = delete;

  Status Allocate(size_t bytes, unsigned flags) {
    if (cudaError_t err = cudaHostAlloc(&ptr_, bytes, flags); err != cudaSuccess) {
      ptr_ = nullptr;
      return CudaErrorStatus(err, "cudaHostAlloc(" + std::to_string(bytes) + " bytes)");
    }
    bytes_ = bytes;
    return Status::Ok();
  }
  uint8_t* data() const { return static_cast<uint8_t*>(ptr_); }
  size_t size() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Where a buffer lives, from cudaPointerGetAttributes.
struct Placement {
  bool device = false;
  int device_id = -1;
};

Placement Locate(const void* p);

// Records a fresh event on `stream` into *event.
Status RecordEvent(cudaStream_t stream, cudaEvent_t* event, const char* what);

// Makes `stream` wait until the mapped pinned word behind `device_flag`
// reaches `target` (modulo 2^32), without blocking any host thread. By
// default with cuStreamWaitValue32, which waits in the GPU's front end: no SM
// spins, so ranks that share one GPU do not take each other's time slices.
// With BATON_CUDA_STREAM_WAIT=kernel, or where the driver refuses the memory
// operation, a one-thread kernel that spins, giving up after
// `kernel_timeout_ns`.
Status StreamWaitFlag(const volatile uint32_t* device_flag, uint32_t target,
                      uint64_t kernel_timeout_ns, cudaStream_t stream);

// A driver API function by name, through the runtime's entry point lookup
// (so libbaton does not link libcuda); nullptr where the driver lacks it.
void* DriverFunction(const char* name);

// Queues a copy of `bytes` bytes on `stream` with Baton's copy kernel, which
// LoadCudaKernels loaded before any stream waited: where a stream may be
// waiting for the device worker, the runtime's own copy between two buffers
// of one GPU (a kernel of its own, loaded at first use) is not safe
// (docs/cuda.md). dst and src must be device-accessible (pinned host memory
// included).
Status LaunchCopyKernel(void* dst, const void* src, size_t bytes, cudaStream_t stream);

// Waits for `event` by polling so the wait has a deadline: as `spin` says
// first (the communicator's BATON_SPIN_*, base/spin.h: kernels of a small
// call end within tens of microseconds, which a sleep would overshoot by the
// timer's slack), then with a growing sleep up to 1 ms. `what` names it in
// the error.
Status WaitCudaEvent(cudaEvent_t event, double timeout_s, const char* what, const SpinPolicy& spin);

// Where one device call's time goes, for BATON_DEBUG=TRACE (subsystem COLL):
// Mark("what") after each part, then Report prints one line of the parts'
// microseconds. Reads no clock unless that log level is on.
class CallSplits {
 public:
  CallSplits() : on_(LogEnabled(LogLevel::kTrace, kLogColl)) {
    if (on_) last_ = Clock::now();
  }
  void Mark(const char* what) {
    if (!on_) return;
    const auto now = Clock::now();
    text_ +=
        std::string(text_.empty() ? "" : ", ") + what + " " +
        std::to_string(std::chrono::duration_cast<std::chrono::microseconds>(now - last_).count()) +
        " us";
    last_ = now;
  }
  void Report(const char* call) const {
    if (on_) BATON_TRACE(kLogColl, "%s: %s", call, text_.c_str());
  }

 private:
  bool on_;
  Clock::time_point last_{};
  std::string text_;
};

}  // namespace baton
