// IpcBounce: see ipc_bounce.h.
#include "cuda/ipc_bounce.h"

#include <algorithm>
#include <string>

#include "algorithms/ipc_bounce_layout.h"
#include "base/log.h"
#include "cuda/cuda_ipc.h"
#include "cuda/cuda_util.h"

namespace baton {

IpcBounceBuffers::~IpcBounceBuffers() {
  // Errors at process exit (the runtime unloading) are moot.
  for (auto& [key, scratch] : by_stream_) cudaFree(scratch.ptr);
  for (Scratch& scratch : outgrown_) cudaFree(scratch.ptr);
}

Status IpcBounceBuffers::Get(cudaStream_t stream, int device, size_t bytes, uint8_t** out) {
  const StreamKey key{
      stream, stream == cudaStreamPerThread ? std::this_thread::get_id() : std::thread::id()};
  Scratch& scratch = by_stream_[key];
  if (scratch.bytes < bytes) {
    // Doubling keeps what is outgrown (and kept) under the largest size.
    const size_t want = std::max(bytes, scratch.bytes * 2);
    if (device >= 0) cudaSetDevice(device);
    void* p = nullptr;
    if (cudaError_t err = cudaMalloc(&p, want); err != cudaSuccess) {
      cudaGetLastError();
      return CudaErrorStatus(err, "cudaMalloc(" + std::to_string(want) +
                                      " bytes of IPC scratch for a buffer IPC cannot share)");
    }
    if (scratch.ptr != nullptr) outgrown_.push_back(scratch);
    scratch = {static_cast<uint8_t*>(p), want};
    BATON_INFO(kLogColl,
               "CUDA IPC: a buffer IPC cannot share (stream-ordered pool or VMM memory) goes "
               "through %zu bytes of scratch on its stream",
               want);
  }
  *out = scratch.ptr;
  return Status::Ok();
}

Status IpcBounceBuffers::BounceIn(cudaStream_t stream, int device, CudaCallBuffers* buffers,
                                  IpcBounceBack* back) {
  *back = {};
  const CudaCallBuffers user = *buffers;
  const bool send = user.send != nullptr && user.send_bytes > 0 && !CudaIpcShareable(user.send);
  const bool recv = user.recv != nullptr && user.recv_bytes > 0 && !CudaIpcShareable(user.recv);
  if (!send && !recv) return Status::Ok();
  const IpcBounceLayout layout = PlanIpcBounce(
      user.send_bytes, user.recv_bytes, user.send == user.recv, send, recv, user.preserve_recv);
  uint8_t* base = nullptr;
  BATON_RETURN_IF_ERROR(Get(stream, device, layout.bytes, &base));
  if (layout.send) {
    buffers->send = base + layout.send_offset;
    BATON_RETURN_IF_ERROR(
        LaunchCopyKernel(base + layout.send_offset, user.send, layout.copy_in_send, stream));
  }
  if (layout.recv) {
    buffers->recv = base + layout.recv_offset;
    BATON_RETURN_IF_ERROR(
        LaunchCopyKernel(base + layout.recv_offset, user.recv, layout.copy_in_recv, stream));
    *back = {user.recv, buffers->recv, layout.copy_out_recv};
  }
  return Status::Ok();
}

Status IpcBounceBack::Queue(cudaStream_t stream) const {
  return LaunchCopyKernel(dst, src, bytes, stream);
}

}  // namespace baton
