// IpcBounce: device scratch that stands in for a user's buffer CUDA IPC
// cannot share (memory from cudaMallocAsync's pools, VMM allocations made
// without an IPC handle type, which PyTorch's expandable segments are).
//
// Without it such a call falls back to staging on the device worker after
// the user's stream has begun waiting for the call's flag, the order in
// which a copy waited for that wait under MPS. With it the user's stream
// copies the input into the scratch before it waits and the output back
// after, and every rank stays on the IPC path: two device-to-device copies
// in stream order, at the GPU's memory bandwidth, instead of two trips
// through pinned host memory.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <thread>
#include <utility>
#include <vector>

#include "base/status.h"
#include "cuda/cuda_device.h"

namespace baton {

// The copy of a replaced output back into the user's buffer.
struct IpcBounceBack {
  void* dst = nullptr;
  const void* src = nullptr;
  size_t bytes = 0;  // 0: nothing to copy
  // Queues the copy on `stream`, after the call.
  Status Queue(cudaStream_t stream) const;
};

// Scratch per stream, grown on demand, never shrunk; a buffer outgrown is
// kept until the owner goes, since calls queued earlier on the stream (and
// peers' mappings) may still use it. Not thread-safe: the owner serialises
// (the device channel's launch mutex).
class IpcBounceBuffers {
 public:
  IpcBounceBuffers() = default;
  ~IpcBounceBuffers();
  IpcBounceBuffers(const IpcBounceBuffers&) = delete;
  IpcBounceBuffers& operator=(const IpcBounceBuffers&) = delete;

  // Replaces in *buffers each buffer IPC cannot share by scratch of the
  // same size, and queues on `stream` (device `device`) the copies the call
  // needs before it: the input, and the output too where the call must
  // keep what it does not write. *back says what to copy back after the
  // call (nothing where the output was not replaced).
  Status BounceIn(cudaStream_t stream, int device, CudaCallBuffers* buffers, IpcBounceBack* back);

 private:
  struct Scratch {
    uint8_t* ptr = nullptr;
    size_t bytes = 0;
  };
  Status Get(cudaStream_t stream, int device, size_t bytes, uint8_t** out);

  // By stream; cudaStreamPerThread names a different stream in each thread,
  // so it is told apart by the calling thread.
  using StreamKey = std::pair<cudaStream_t, std::thread::id>;
  std::map<StreamKey, Scratch> by_stream_;
  std::vector<Scratch> outgrown_;
};

}  // namespace baton
