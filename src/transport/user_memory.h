// UserMemory: the user buffers whose lifetime Baton knows (batonCommRegister
// until batonCommDeregister), as a transport sees them. comm/ implements it
// (Registrations); a transport that registers those buffers with a device
// (RDMA zero-copy) finds them here and is told when one goes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

namespace baton {

struct UserRange {
  uintptr_t begin = 0;
  size_t size = 0;
  uint64_t id = 0;  // unique in the process, never reused
};

class UserMemory {
 public:
  virtual ~UserMemory() = default;
  // Nothing is registered: one relaxed load, for the hot path.
  virtual bool none() const = 0;
  // Whether [ptr, ptr + bytes) lies in one registered range; *out is it.
  virtual bool Find(const void* ptr, size_t bytes, UserRange* out) const = 0;
  // `released(id)` runs (on the deregistering thread, no lock held) after
  // range `id` was deregistered. Hooks are added at set-up only.
  virtual void OnRelease(std::function<void(uint64_t)> released) = 0;
};

}  // namespace baton
