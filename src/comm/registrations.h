// A communicator's registered buffers (batonCommRegister): which user
// ranges this rank declared, and for those inside a batonMemAlloc
// allocation, how peers map them. Registration is local, as in NCCL: each
// rank registers on its own; a collective checks per call whether every
// rank's buffers are registered (comm/host_ipc.cc).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <vector>

#include "base/shared_alloc.h"
#include "base/status.h"
#include "transport/user_memory.h"

namespace baton {

// Also the transports' view of them (UserMemory: every registration, not
// only the shareable ones; RDMA registers them with the NIC).
class Registrations : public UserMemory {
 public:
  Registrations() = default;
  ~Registrations() override;  // unpins what is still registered
  Registrations(const Registrations&) = delete;
  Registrations& operator=(const Registrations&) = delete;

  // Registers [buff, buff + size). Memory not from batonMemAlloc is
  // accepted (as NCCL accepts any host pointer) but marked not shareable:
  // calls on it take the ordinary path, said once at INFO.
  Status Register(void* buff, size_t size, void** handle);
  // batonInvalidArgument for a handle Register did not return (or gave
  // back already).
  Status Deregister(void* handle);
  // Whether [ptr, ptr + bytes) lies in one shareable registration; *out
  // then says how a peer maps it. Cheap when nothing is registered.
  bool FindShareable(const void* ptr, size_t bytes, SharedAllocInfo* out) const;
  bool empty() const { return shareable_.load(std::memory_order_relaxed) == 0; }

  // UserMemory.
  bool none() const override { return registered_.load(std::memory_order_relaxed) == 0; }
  bool Find(const void* ptr, size_t bytes, UserRange* out) const override;
  void OnRelease(std::function<void(uint64_t)> released) override;

 private:
  struct Entry {
    uintptr_t begin = 0;
    size_t size = 0;
    bool shareable = false;
    SharedAllocInfo alloc;  // shareable only
  };
  // The entry (and its handle) holding [p, p + bytes) whole, shareable
  // ones only if asked; nullptr if none. Under mu_.
  const std::pair<const uintptr_t, Entry>* FindLocked(uintptr_t p, size_t bytes,
                                                      bool shareable_only) const;

  mutable std::mutex mu_;
  std::map<uintptr_t, Entry> by_handle_;                      // guarded by mu_
  std::atomic<int> shareable_{0};                             // shareable entries
  std::atomic<int> registered_{0};                            // all entries
  std::vector<std::function<void(uint64_t)>> release_hooks_;  // guarded by mu_
  bool noted_unshareable_ = false;                            // guarded by mu_
};

}  // namespace baton
