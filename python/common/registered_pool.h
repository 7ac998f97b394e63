// RegisteredPool: host memory for a language's own allocator (torch's CPU
// allocator, NumPy's data-memory handler) that the other processes of the
// host can read in place. Allocations of at least min_bytes come from
// batonMemAlloc memory (a memfd the peers map) and are registered on every
// attached communicator, so collectives on arrays and tensors the program
// made the usual way take the registered path; smaller ones, and any the
// pool declines, are the caller's to serve from its ordinary allocator.
// What NCCL's torch backend does for CUDA memory with
// TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK, for host memory.
//
// Freed blocks are kept, by size class (at most 1/8 larger than asked), up
// to cache_bytes, and handed out again: a training step allocates the same
// sizes every time, and a new memfd costs system calls, a descriptor and
// page faults. Blocks stay registered while cached. Each block holds a
// descriptor, so the pool takes at most a quarter of RLIMIT_NOFILE, making
// room by freeing cached blocks of other sizes first.
//
// Contract: thread-safe. A forked child allocates nothing from the pool
// until it calls Enable itself, and never frees or reuses the parent's
// blocks: a block is MAP_SHARED, so what the child writes into an inherited
// array the parent sees (ordinary memory would be copied on write). Each
// extension that links this file has its own pool.
#pragma once

#include <baton.h>

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace baton_python {

class RegisteredPool {
 public:
  // The one instance of this extension (never destroyed: arrays are freed at exit).
  static RegisteredPool& Get();

  // How the pool reports what it declined (once per kind): torch's warning,
  // a line on stderr. Set before Enable.
  void SetWarn(void (*warn)(const std::string& message)) { warn_ = warn; }

  // Takes allocations of at least min_bytes from now on, in this process:
  // in a child forked after an earlier call, a pool of its own from here
  // (the parent's blocks, which the child's inherited arrays lie in, are
  // left alone, never reused or freed).
  void Enable(size_t min_bytes, size_t cache_bytes);
  // Later allocations are declined; blocks in use stay.
  void Disable();

  // A block of at least n bytes, registered on every attached communicator;
  // nullptr when the caller should allocate instead (off, smaller than
  // min_bytes, in a forked child, no block to be had). Not zeroed. Off or
  // below min_bytes (most of a program's allocations) it returns without
  // taking the lock.
  void* Allocate(size_t n);
  // Whether ptr starts a block; then it is cached or freed (in a forked
  // child, left alone). False: not the pool's, the caller frees it.
  // `bytes`, where the caller knows what it asked for, lets an allocation
  // smaller than any the pool ever took return at once.
  bool Free(void* ptr, size_t bytes = SIZE_MAX);
  // The smallest allocation the pool has taken or may take (SIZE_MAX before
  // the first Enable): a caller shrinking a block below it moves the data
  // out, so that Free's size shortcut holds.
  size_t SmallestTaken() const { return smallest_taken_.load(std::memory_order_relaxed); }
  // The bytes of the block starting at ptr (a forked child's parent's
  // blocks too); 0 when ptr starts none.
  size_t BlockBytes(const void* ptr) const;
  // Frees the cached blocks (deregistering them); returns their bytes.
  size_t ReleaseCached();
  // Whether ptr lies in a block.
  bool Contains(const void* ptr) const;

  struct Stats {
    bool enabled = false;
    size_t min_bytes = 0;
    size_t cache_limit = 0;
    size_t blocks_in_use = 0;
    size_t bytes_in_use = 0;  // of the blocks, as rounded up
    size_t blocks_cached = 0;
    size_t bytes_cached = 0;
    uint64_t allocations = 0;  // served by the pool (new blocks and reused ones)
    uint64_t reused = 0;       // of those, from the cache
    uint64_t fallbacks = 0;    // no block to be had: declined
    size_t max_blocks = 0;     // a quarter of the open-file limit
    size_t communicators = 0;
    size_t registrations = 0;  // (block, communicator) pairs
    // Every figure but `enabled`, by the names registered_memory_stats() gives them.
    std::vector<std::pair<const char*, uint64_t>> Figures() const;
  };
  Stats GetStats() const;

  // A communicator: every block is registered on it from now until Detach,
  // which its owner calls before destroying or aborting it.
  void Attach(batonComm_t comm);
  void Detach(batonComm_t comm);

 private:
  struct Block {
    void* base = nullptr;
    size_t bytes = 0;
    std::vector<std::pair<batonComm_t, void*>> handles;  // one per attached communicator
  };
  using BlockMap = std::map<uintptr_t, std::unique_ptr<Block>>;

  RegisteredPool() = default;
  bool InOwner() const;
  void WarnOnce(bool* warned, const std::string& message);
  // Under mu_: a new block of `bytes`, or nullptr.
  Block* NewBlockLocked(size_t bytes);
  // Under mu_: registers b on comm (warning once when Baton refuses).
  void RegisterLocked(Block* b, batonComm_t comm);
  // Under mu_: deregisters the block everywhere, gives it back to Baton, forgets it.
  void ReleaseLocked(BlockMap::iterator it);
  // Under mu_: the same for a cached block.
  void ReleaseCachedLocked(std::multimap<size_t, Block*>::iterator it);

  mutable std::mutex mu_;
  void (*warn_)(const std::string&) = nullptr;
  pid_t owner_ = 0;  // the process whose blocks these are; 0 before the first Enable
  bool enabled_ = false;
  size_t min_bytes_ = 0;
  // Read without the lock: min_bytes_ while enabled, else SIZE_MAX; and the
  // smallest min_bytes_ ever enabled.
  std::atomic<size_t> take_from_{SIZE_MAX};
  std::atomic<size_t> smallest_taken_{SIZE_MAX};
  size_t cache_limit_ = 0;
  size_t max_blocks_ = 0;
  size_t bytes_cached_ = 0;
  BlockMap blocks_;                       // by base
  std::multimap<size_t, Block*> cached_;  // free blocks by bytes; equal keys in the order freed
  struct Attached {
    batonComm_t comm;
    pid_t pid;  // the process that attached it: a forked child keeps only its own
  };
  std::vector<Attached> comms_;
  std::map<uintptr_t, size_t> inherited_;  // a forked child's: its parent's blocks (bytes)
  uint64_t allocations_ = 0;
  uint64_t reused_ = 0;
  uint64_t fallbacks_ = 0;
  bool warned_limit_ = false;
  bool warned_alloc_ = false;
  bool warned_register_ = false;
  bool warned_free_ = false;
};

}  // namespace baton_python
