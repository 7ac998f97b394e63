// A communicator's registered buffers; see registrations.h.
#include "comm/registrations.h"

#include <string>

#include "base/log.h"

namespace baton {
namespace {

// Handles are unique in the process and never reused, so a handle given
// back twice, or one of another communicator, is always an error.
std::atomic<uintptr_t> next_handle{0x7e9000};

}  // namespace

Registrations::~Registrations() {
  for (auto& [handle, e] : by_handle_)
    if (e.shareable) PinSharedAlloc(e.alloc.serial, -1);
}

Status Registrations::Register(void* buff, size_t size, void** handle) {
  if (handle == nullptr) return InvalidArgument("handle is NULL");
  if (buff == nullptr) return InvalidArgument("buff is NULL");
  if (size == 0) return InvalidArgument("size is 0");
  Entry e;
  e.begin = reinterpret_cast<uintptr_t>(buff);
  e.size = size;
  e.shareable = FindSharedAlloc(buff, size, &e.alloc);
  if (e.shareable) PinSharedAlloc(e.alloc.serial, +1);
  const uintptr_t h = next_handle.fetch_add(16);
  std::lock_guard<std::mutex> lock(mu_);
  if (!e.shareable && !noted_unshareable_) {
    noted_unshareable_ = true;
    BATON_INFO(kLogColl,
               "batonCommRegister: buffer %p (%zu bytes) is not inside a batonMemAlloc allocation; "
               "peers cannot map it, so calls on it take the ordinary path",
               buff, size);
  }
  if (e.shareable) shareable_.fetch_add(1, std::memory_order_relaxed);
  registered_.fetch_add(1, std::memory_order_relaxed);
  by_handle_.emplace(h, e);
  *handle = reinterpret_cast<void*>(h);
  return Status::Ok();
}

Status Registrations::Deregister(void* handle) {
  const auto h = reinterpret_cast<uintptr_t>(handle);
  std::vector<std::function<void(uint64_t)>> hooks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_handle_.find(h);
    if (it == by_handle_.end())
      return InvalidArgument("handle is not registered on this communicator (deregistered twice?)");
    if (it->second.shareable) {
      PinSharedAlloc(it->second.alloc.serial, -1);
      shareable_.fetch_sub(1, std::memory_order_relaxed);
    }
    registered_.fetch_sub(1, std::memory_order_relaxed);
    by_handle_.erase(it);
    hooks = release_hooks_;
  }
  // Outside the lock: a hook takes its own (a device registration cache's).
  for (const auto& hook : hooks) hook(h);
  return Status::Ok();
}

const std::pair<const uintptr_t, Registrations::Entry>* Registrations::FindLocked(
    uintptr_t p, size_t bytes, bool shareable_only) const {
  for (const auto& entry : by_handle_) {
    const Entry& e = entry.second;
    if ((shareable_only && !e.shareable) || p < e.begin || p - e.begin > e.size ||
        bytes > e.size - (p - e.begin))
      continue;
    return &entry;
  }
  return nullptr;
}

bool Registrations::Find(const void* ptr, size_t bytes, UserRange* out) const {
  if (none()) return false;
  std::lock_guard<std::mutex> lock(mu_);
  const auto* found = FindLocked(reinterpret_cast<uintptr_t>(ptr), bytes, false);
  if (found == nullptr) return false;
  *out = {found->second.begin, found->second.size, found->first};
  return true;
}

void Registrations::OnRelease(std::function<void(uint64_t)> released) {
  std::lock_guard<std::mutex> lock(mu_);
  release_hooks_.push_back(std::move(released));
}

bool Registrations::FindShareable(const void* ptr, size_t bytes, SharedAllocInfo* out) const {
  if (empty()) return false;
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(mu_);
  const auto* found = FindLocked(p, bytes, true);
  if (found == nullptr) return false;
  *out = found->second.alloc;
  out->offset += p - found->second.begin;
  return true;
}

}  // namespace baton
