// SharedCpuAllocator: torch's CPU allocator once
// baton.torch.use_registered_memory() installs it. Allocations of at least
// min_bytes come from batonMemAlloc memory (a memfd the other processes of
// the host can map) and are registered on every live baton backend's
// communicator, so collectives on ordinary torch tensors (DDP's gradient
// buckets, FSDP's gathered parameters, anything torch.empty made) read the
// peers' tensors in place; smaller ones go to the allocator it replaced.
// What NCCL's backend does for CUDA memory with
// TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK, for host memory.
//
// Freed blocks are kept, by size class (at most 1/8 larger than asked), up
// to cache_bytes, and handed out again: a training step allocates the same
// sizes every time, and a new memfd costs system calls, a descriptor and
// page faults. Blocks stay registered while cached.
//
// Contract: thread-safe. A forked child (DataLoader workers) allocates
// from the replaced allocator and never frees or reuses a block: a block is
// MAP_SHARED, so what the child writes into an inherited tensor of at least
// min_bytes the parent sees (ordinary memory would be copied on write).
// Blocks live until freed past the cache or release_cached_memory().
#pragma once

#include <baton.h>

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include <c10/core/Allocator.h>

namespace baton_torch {

class SharedCpuAllocator final : public c10::Allocator {
 public:
  // The one instance (never destroyed: tensors are freed at exit).
  static SharedCpuAllocator& Get();

  // Makes this torch's CPU allocator (the first time), taking allocations
  // of at least min_bytes from now on; throws when another allocator of
  // higher priority holds torch's place.
  void Enable(size_t min_bytes, size_t cache_bytes);
  // Later allocations go to the replaced allocator; blocks in use stay.
  void Disable();
  // Frees the cached blocks (deregistering them); returns their bytes.
  size_t ReleaseCached();
  // Whether ptr lies in a block of this process.
  bool Contains(const void* ptr) const;

  struct Stats {
    bool enabled = false;
    size_t min_bytes = 0;
    size_t cache_limit = 0;
    size_t blocks_in_use = 0;
    size_t bytes_in_use = 0;  // of the blocks, as rounded up
    size_t blocks_cached = 0;
    size_t bytes_cached = 0;
    uint64_t allocations = 0;  // taken from the pool (new blocks and reused ones)
    uint64_t reused = 0;       // of those, served from the cache
    uint64_t fallbacks = 0;    // no block to be had: the replaced allocator served it
    size_t max_blocks = 0;     // a quarter of the open-file limit
    size_t communicators = 0;
    size_t registrations = 0;  // (block, communicator) pairs
  };
  Stats GetStats() const;

  // A backend's communicator: every block is registered on it from now
  // until Detach, which a backend calls before it destroys or aborts it.
  void Attach(batonComm_t comm);
  void Detach(batonComm_t comm);

  c10::DataPtr allocate(size_t n) override;
  c10::DeleterFnPtr raw_deleter() const override;
  void copy_data(void* dest, const void* src, std::size_t count) const override;

 private:
  struct Block {
    void* base = nullptr;
    size_t bytes = 0;
    bool in_use = false;
    std::vector<std::pair<batonComm_t, void*>> handles;  // one per attached communicator
  };

  SharedCpuAllocator() = default;
  // The deleter of every pooled DataPtr (and raw_deleter): back to the
  // cache, or to the replaced allocator's deleter when ptr is not a block.
  static void Free(void* ptr);
  void FreeBlock(void* ptr);
  bool InOwner() const;
  // Under mu_: registers b on comm (warning once when Baton refuses).
  void RegisterLocked(Block* b, batonComm_t comm);
  // Under mu_: deregisters b everywhere, gives it back to Baton, forgets it.
  void ReleaseLocked(std::map<uintptr_t, std::unique_ptr<Block>>::iterator it);

  mutable std::mutex mu_;
  c10::Allocator* previous_ = nullptr;  // set once, by the first Enable
  pid_t owner_ = 0;                     // the process whose blocks these are
  bool enabled_ = false;
  size_t min_bytes_ = 0;
  size_t cache_limit_ = 0;
  size_t max_blocks_ = 0;  // a quarter of RLIMIT_NOFILE: each block holds a memfd
  size_t bytes_cached_ = 0;
  std::map<uintptr_t, std::unique_ptr<Block>> blocks_;  // by base
  std::multimap<size_t, Block*> cached_;                // by bytes
  std::vector<batonComm_t> comms_;
  uint64_t allocations_ = 0;
  uint64_t reused_ = 0;
  uint64_t fallbacks_ = 0;
};

}  // namespace baton_torch
