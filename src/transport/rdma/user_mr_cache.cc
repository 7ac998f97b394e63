#include "transport/rdma/user_mr_cache.h"

#include <string>
#include <utility>

namespace baton::rdma {

UserMrCache::UserMrCache(std::shared_ptr<Context> context, size_t capacity)
    : context_(std::move(context)), capacity_(capacity < 1 ? 1 : capacity) {}

void UserMrCache::Watch(const std::shared_ptr<UserMrCache>& cache, UserMemory* memory) {
  std::weak_ptr<UserMrCache> weak = cache;
  memory->OnRelease([weak](uint64_t id) {
    if (std::shared_ptr<UserMrCache> c = weak.lock()) c->Release(id);
  });
}

Status UserMrCache::Get(const UserRange& r, std::shared_ptr<MemoryRegion>* out) {
  std::shared_ptr<MemoryRegion> evicted;  // released outside the lock
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(r.id);
  if (it != entries_.end() && it->second.range.begin == r.begin &&
      it->second.range.size == r.size) {
    it->second.used = ++tick_;
    ++counters_.hits;
    *out = it->second.mr;
    return Status::Ok();
  }
  std::unique_ptr<MemoryRegion> made;
  BATON_RETURN_IF_ERROR(context_->RegisterUser(reinterpret_cast<void*>(r.begin), r.size, &made)
                            .WithContext("registering a user buffer with the RDMA device"));
  if (it == entries_.end() && entries_.size() >= capacity_) {
    auto oldest = entries_.begin();
    for (auto e = entries_.begin(); e != entries_.end(); ++e)
      if (e->second.used < oldest->second.used) oldest = e;
    evicted = std::move(oldest->second.mr);
    entries_.erase(oldest);
    ++counters_.evicted;
  }
  Entry& e = entries_[r.id];
  e.range = r;
  e.mr = std::shared_ptr<MemoryRegion>(std::move(made));
  e.used = ++tick_;
  ++counters_.registered;
  *out = e.mr;
  return Status::Ok();
}

void UserMrCache::Release(uint64_t id) {
  std::shared_ptr<MemoryRegion> gone;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  gone = std::move(it->second.mr);
  entries_.erase(it);
  ++counters_.released;
}

size_t UserMrCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

UserMrCache::Counters UserMrCache::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

}  // namespace baton::rdma
