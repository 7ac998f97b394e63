// UserMrCache: the NIC registrations (ibv_reg_mr) of user buffers whose
// lifetime Baton knows (batonCommRegister'd ranges, UserMemory), shared by
// the RDMA channels of one communicator (one protection domain).
//
// Bounded: at most `capacity` ranges stay registered; the least recently
// used goes first. A range's registration is released when the user
// deregisters it (UserMemory::OnRelease), when evicted, and when the cache
// goes with its communicator. A channel holds the region (shared_ptr) for
// the message that uses it, so a release while a write is in flight
// unpins the pages only once the message is over.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "base/status.h"
#include "transport/rdma/verbs.h"
#include "transport/user_memory.h"

namespace baton::rdma {

// User buffers one communicator keeps registered with its NIC at most.
inline constexpr size_t kUserMrCacheEntries = 64;

class UserMrCache {
 public:
  struct Counters {
    uint64_t registered = 0;  // ibv_reg_mr calls that succeeded
    uint64_t hits = 0;
    uint64_t evicted = 0;
    uint64_t released = 0;  // by deregistration
  };
  UserMrCache(std::shared_ptr<Context> context, size_t capacity);
  // Registers itself for `memory`'s releases; `memory` must outlive the
  // hook's calls (the communicator destroys its channels first).
  static void Watch(const std::shared_ptr<UserMrCache>& cache, UserMemory* memory);

  // The registration of range `r`, made on first use.
  Status Get(const UserRange& r, std::shared_ptr<MemoryRegion>* out);
  void Release(uint64_t id);
  size_t size() const;
  Counters counters() const;

 private:
  struct Entry {
    UserRange range;
    std::shared_ptr<MemoryRegion> mr;
    uint64_t used = 0;  // tick of the last Get
  };
  std::shared_ptr<Context> context_;
  const size_t capacity_;
  mutable std::mutex mu_;
  std::map<uint64_t, Entry> entries_;  // by range id; guarded by mu_
  uint64_t tick_ = 0;                  // guarded by mu_
  Counters counters_;                  // guarded by mu_
};

}  // namespace baton::rdma
