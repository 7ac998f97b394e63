// SharedCpuAllocator: torch's CPU allocator once
// baton.torch.use_registered_memory() installs it: allocations the pool
// takes (../common/registered_pool.h: at least min_bytes, in batonMemAlloc
// memory registered on every live baton backend's communicator) come from
// it, so collectives on ordinary torch tensors (DDP's gradient buckets,
// FSDP's gathered parameters, anything torch.empty made) read the peers'
// tensors in place; the rest go to the allocator it replaced.
#pragma once

#include <atomic>

#include <c10/core/Allocator.h>

#include "../common/registered_pool.h"

namespace baton_torch {

class SharedCpuAllocator final : public c10::Allocator {
 public:
  // The one instance (never destroyed: tensors are freed at exit).
  static SharedCpuAllocator& Get();
  static baton_python::RegisteredPool& Pool() { return baton_python::RegisteredPool::Get(); }

  // Makes this torch's CPU allocator (the first time) and the pool take
  // allocations of at least min_bytes; throws when another allocator of
  // higher priority holds torch's place.
  void Enable(size_t min_bytes, size_t cache_bytes);

  c10::DataPtr allocate(size_t n) override;
  c10::DeleterFnPtr raw_deleter() const override;
  void copy_data(void* dest, const void* src, std::size_t count) const override;

 private:
  SharedCpuAllocator() = default;
  // The deleter of every pooled DataPtr (and raw_deleter): back to the
  // pool, or to the replaced allocator's deleter when ptr is not a block.
  static void Free(void* ptr);

  // Set once, by the first Enable, before torch can call allocate.
  std::atomic<c10::Allocator*> previous_{nullptr};
};

}  // namespace baton_torch
