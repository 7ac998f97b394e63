// Staging: device buffers copied through pinned host memory, so that the
// host transports can run a collective on them. A process-wide pool keeps
// the pinned buffers; one launch (a call, or a group's device calls on one
// communicator) takes one slot and lays its parts out in it. CUDA builds
// only; docs/cuda.md.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "algorithms/schedule.h"
#include "base/status.h"
#include "cuda/cuda_device.h"
#include "cuda/cuda_util.h"

namespace baton {

// One staging buffer and what must happen before it may be reused: the
// launching thread is done with it (sealed), the host side of its call has
// finished (host_done) and the stream has passed its last copy (done event).
struct StagingSlot {
  PinnedMemory memory;
  bool in_use = false;
  bool sealed = false;
  cudaEvent_t done = nullptr;  // owned; nullptr when no stream work follows
  std::atomic<bool> host_done{false};
};

// Process-wide pool of pinned staging buffers: cudaHostAlloc costs
// milliseconds, so buffers are kept and reused (sizes rounded up to powers of
// two). Never shrinks; the memory goes back at process exit.
class StagingPool {
 public:
  static StagingPool& Get();

  // A slot of at least `bytes`, marked in use.
  Status Acquire(size_t bytes, StagingSlot** out);

  // The launching thread is done; `done` (may be nullptr) completes after
  // the last stream operation on the slot. Takes ownership of the event.
  void Seal(StagingSlot* slot, cudaEvent_t done);

 private:
  // Returns the slot to the pool once sealed, host_done and `done` passed.
  void Reclaim(StagingSlot* slot);

  std::mutex mu_;
  std::vector<std::unique_ptr<StagingSlot>> slots_;
};

// Host addresses standing in for the user's buffers inside one slot. When
// the two ranges overlap (in place) one staged region covers both, at the
// same relative offsets.
struct StagedLayout {
  size_t bytes = 0;
  size_t send_offset = 0;
  size_t recv_offset = 0;
};

StagedLayout LayoutFor(const CudaCallBuffers& b);

// The parts of one staged launch (one call, or the device calls of one
// communicator in a group) laid out one after the other in one staging slot,
// each part's region 256-byte aligned.
class StagedParts {
 public:
  explicit StagedParts(std::vector<StagedPart> parts);

  size_t bytes() const { return bytes_; }

  // Places the parts at `base` (a slot of at least bytes()).
  void Bind(uint8_t* base);

  // Queues or runs the copies in (device -> staged) or out (staged ->
  // device) through copy(dst, src, bytes, kind, what); stops at the first
  // failure.
  template <typename Copy>
  Status CopyInputs(const Copy& copy) const {
    for (const Entry& e : entries_) {
      // Before the input: in place, the input's bytes win.
      if (e.recv != nullptr && e.part.buffers.preserve_recv)
        BATON_RETURN_IF_ERROR(copy(e.recv, e.part.buffers.recv, e.part.buffers.recv_bytes,
                                   cudaMemcpyDeviceToHost, "device output -> pinned staging"));
      if (e.send != nullptr)
        BATON_RETURN_IF_ERROR(copy(e.send, e.part.buffers.send, e.part.buffers.send_bytes,
                                   cudaMemcpyDeviceToHost, "device input -> pinned staging"));
    }
    return Status::Ok();
  }
  template <typename Copy>
  Status CopyOutputs(const Copy& copy) const {
    for (const Entry& e : entries_)
      if (e.recv != nullptr)
        BATON_RETURN_IF_ERROR(copy(e.part.buffers.recv, e.recv, e.part.buffers.recv_bytes,
                                   cudaMemcpyHostToDevice, "pinned staging -> device output"));
    return Status::Ok();
  }

  // The host schedule of all parts on the staged buffers; a group's parts
  // merge into one schedule, as host calls in a group do.
  void Build(Schedule* s) const;

 private:
  struct Entry {
    StagedPart part;
    StagedLayout layout;
    size_t offset = 0;
    uint8_t* send = nullptr;
    uint8_t* recv = nullptr;
  };
  std::vector<Entry> entries_;
  size_t bytes_ = 0;
};

}  // namespace baton
