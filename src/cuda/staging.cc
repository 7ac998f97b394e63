#include "cuda/staging.h"

#include <algorithm>

namespace baton {

StagingPool& StagingPool::Get() {
  static StagingPool pool;
  return pool;
}

Status StagingPool::Acquire(size_t bytes, StagingSlot** out) {
  std::lock_guard<std::mutex> lock(mu_);
  StagingSlot* best = nullptr;
  for (auto& slot : slots_) {
    if (slot->in_use) Reclaim(slot.get());
    if (!slot->in_use && slot->memory.size() >= bytes &&
        (best == nullptr || slot->memory.size() < best->memory.size()))
      best = slot.get();
  }
  if (best == nullptr) {
    size_t rounded = size_t{1} << 20;
    while (rounded < bytes) rounded <<= 1;
    auto slot = std::make_unique<StagingSlot>();
    BATON_RETURN_IF_ERROR(
        slot->memory.Allocate(rounded, cudaHostAllocPortable | cudaHostAllocMapped));
    best = slot.get();
    slots_.push_back(std::move(slot));
  }
  best->in_use = true;
  best->sealed = false;
  best->host_done.store(false);
  *out = best;
  return Status::Ok();
}

void StagingPool::Seal(StagingSlot* slot, cudaEvent_t done) {
  std::lock_guard<std::mutex> lock(mu_);
  slot->done = done;
  slot->sealed = true;
}

void StagingPool::Reclaim(StagingSlot* slot) {
  if (!slot->sealed || !slot->host_done.load(std::memory_order_acquire)) return;
  if (slot->done != nullptr) {
    const cudaError_t err = cudaEventQuery(slot->done);
    if (err == cudaErrorNotReady) return;
    if (err != cudaSuccess) {
      cudaGetLastError();  // a failed stream: keep the slot out of use for good
      return;
    }
    cudaEventDestroy(slot->done);
    slot->done = nullptr;
  }
  slot->in_use = false;
}

StagedLayout LayoutFor(const CudaCallBuffers& b) {
  StagedLayout l;
  const auto s0 = reinterpret_cast<uintptr_t>(b.send), s1 = s0 + b.send_bytes;
  const auto r0 = reinterpret_cast<uintptr_t>(b.recv), r1 = r0 + b.recv_bytes;
  if (b.send_bytes > 0 && b.recv_bytes > 0 && s0 < r1 && r0 < s1) {
    const uintptr_t lo = std::min(s0, r0);
    l.bytes = std::max(s1, r1) - lo;
    l.send_offset = s0 - lo;
    l.recv_offset = r0 - lo;
  } else {
    l.send_offset = 0;
    l.recv_offset = (b.send_bytes + 255) & ~size_t{255};
    l.bytes = l.recv_offset + b.recv_bytes;
  }
  return l;
}

StagedParts::StagedParts(std::vector<StagedPart> parts) {
  size_t offset = 0;
  for (auto& part : parts) {
    Entry e;
    e.layout = LayoutFor(part.buffers);
    e.offset = offset;
    e.part = std::move(part);
    offset += (e.layout.bytes + 255) & ~size_t{255};
    entries_.push_back(std::move(e));
  }
  bytes_ = offset;
}

void StagedParts::Bind(uint8_t* base) {
  for (Entry& e : entries_) {
    const CudaCallBuffers& b = e.part.buffers;
    e.send = b.send_bytes ? base + e.offset + e.layout.send_offset : nullptr;
    e.recv = b.recv_bytes ? base + e.offset + e.layout.recv_offset : nullptr;
  }
}

void StagedParts::Build(Schedule* s) const {
  if (entries_.size() == 1) return entries_[0].part.build(entries_[0].send, entries_[0].recv, s);
  for (const Entry& e : entries_) {
    Schedule part;
    e.part.build(e.send, e.recv, &part);
    s->Append(std::move(part));
  }
}

}  // namespace baton
