#include "registered_pool.h"

#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <bit>

namespace baton_python {
namespace {

// The block size for n bytes: whole pages, rounded up to an eighth of the
// power of two below n, so a step's recurring sizes meet their cached
// blocks again and no block is more than 1/8 larger than asked.
size_t SizeClass(size_t n) {
  const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t step = std::max(page, std::bit_floor(n) / 8);
  return (n + step - 1) / step * step;
}

std::string LastError(batonComm_t comm) {
  const char* text = batonGetLastError(comm);
  return text != nullptr ? text : "";
}

}  // namespace

RegisteredPool& RegisteredPool::Get() {
  static auto* pool = [] {
    auto* p = new RegisteredPool();  // NOLINT: never destroyed (arrays outlive statics)
    // A child forked while another thread holds the lock would find it held
    // forever: fork waits for it, and both sides let it go.
    pthread_atfork([] { Get().mu_.lock(); }, [] { Get().mu_.unlock(); },
                   [] { Get().mu_.unlock(); });
    return p;
  }();
  return *pool;
}

bool RegisteredPool::InOwner() const {
  return owner_ == getpid();
}

void RegisteredPool::WarnOnce(bool* warned, const std::string& message) {
  if (*warned || warn_ == nullptr) return;
  *warned = true;
  warn_(message);
}

void RegisteredPool::Enable(size_t min_bytes, size_t cache_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!InOwner()) {
    if (owner_ != 0) {
      // A child forked after the parent's first call: a pool of its own.
      // The parent's blocks stay mapped under the arrays the child
      // inherited; their frees are ignored (Free), never passed to the
      // caller's allocator. The parent's communicators are not the child's.
      for (const auto& [base, b] : blocks_) inherited_.emplace(base, b->bytes);
      blocks_.clear();
      cached_.clear();
      std::erase_if(comms_, [](const Attached& a) { return a.pid != getpid(); });
      bytes_cached_ = 0;
      allocations_ = reused_ = fallbacks_ = 0;
    }
    owner_ = getpid();
    rlimit limit{};
    max_blocks_ = getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY
                      ? static_cast<size_t>(limit.rlim_cur / 4)
                      : 4096;
  }
  enabled_ = true;
  min_bytes_ = std::max<size_t>(min_bytes, 1);
  cache_limit_ = cache_bytes;
  take_from_.store(min_bytes_, std::memory_order_relaxed);
  smallest_taken_.store(std::min(smallest_taken_.load(std::memory_order_relaxed), min_bytes_),
                        std::memory_order_relaxed);
}

void RegisteredPool::Disable() {
  std::lock_guard<std::mutex> lock(mu_);
  enabled_ = false;
  take_from_.store(SIZE_MAX, std::memory_order_relaxed);
}

void* RegisteredPool::Allocate(size_t n) {
  if (n < take_from_.load(std::memory_order_relaxed)) return nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  if (!enabled_ || n < min_bytes_ || !InOwner()) return nullptr;
  const size_t bytes = SizeClass(n);
  Block* b = nullptr;
  // The block of this class freed last: its pages are the likeliest still
  // in the cache.
  if (auto hit = cached_.upper_bound(bytes); hit != cached_.begin() && (--hit)->first == bytes) {
    b = hit->second;
    cached_.erase(hit);
    bytes_cached_ -= bytes;
    ++reused_;
  } else {
    b = NewBlockLocked(bytes);
    if (b == nullptr) {
      ++fallbacks_;
      return nullptr;
    }
  }
  ++allocations_;
  return b->base;
}

RegisteredPool::Block* RegisteredPool::NewBlockLocked(size_t bytes) {
  // At the limit: a cached block of another size makes room.
  if (blocks_.size() >= max_blocks_ && !cached_.empty()) ReleaseCachedLocked(cached_.begin());
  if (blocks_.size() >= max_blocks_) {
    WarnOnce(&warned_limit_, std::to_string(blocks_.size()) +
                                 " blocks of registered memory hold a quarter of the open-file "
                                 "limit (ulimit -n); later ones take ordinary memory and the "
                                 "ordinary path (raise the limit, or min_bytes)");
    return nullptr;
  }
  void* base = nullptr;
  if (batonMemAlloc(&base, bytes) != batonSuccess) {
    WarnOnce(&warned_alloc_, "batonMemAlloc of " + std::to_string(bytes) + " bytes failed (" +
                                 LastError(nullptr) +
                                 "); such allocations take ordinary memory and the ordinary path");
    return nullptr;
  }
  auto owned = std::make_unique<Block>();
  Block* b = owned.get();
  b->base = base;
  b->bytes = bytes;
  blocks_.emplace(reinterpret_cast<uintptr_t>(base), std::move(owned));
  for (const Attached& a : comms_) RegisterLocked(b, a.comm);
  return b;
}

bool RegisteredPool::Free(void* ptr, size_t bytes) {
  if (bytes < smallest_taken_.load(std::memory_order_relaxed)) return false;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = blocks_.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == blocks_.end()) return inherited_.contains(reinterpret_cast<uintptr_t>(ptr));
  if (!InOwner()) return true;  // the parent's block: the child leaves it alone
  Block* b = it->second.get();
  if (bytes_cached_ + b->bytes <= cache_limit_) {
    cached_.emplace(b->bytes, b);
    bytes_cached_ += b->bytes;
  } else {
    ReleaseLocked(it);
  }
  return true;
}

size_t RegisteredPool::BlockBytes(const void* ptr) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  if (auto it = blocks_.find(p); it != blocks_.end()) return it->second->bytes;
  auto parent = inherited_.find(p);
  return parent == inherited_.end() ? 0 : parent->second;
}

size_t RegisteredPool::ReleaseCached() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!InOwner()) return 0;
  const size_t released = bytes_cached_;
  while (!cached_.empty()) ReleaseCachedLocked(cached_.begin());
  return released;
}

bool RegisteredPool::Contains(const void* ptr) const {
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = blocks_.upper_bound(p);
  if (it == blocks_.begin()) return false;
  --it;
  return p - it->first < it->second->bytes;
}

RegisteredPool::Stats RegisteredPool::GetStats() const {
  std::lock_guard<std::mutex> lock(mu_);
  Stats s;
  s.enabled = enabled_;
  s.min_bytes = min_bytes_;
  s.cache_limit = cache_limit_;
  for (const auto& [base, b] : blocks_) {
    s.bytes_in_use += b->bytes;
    s.registrations += b->handles.size();
  }
  s.blocks_cached = cached_.size();
  s.blocks_in_use = blocks_.size() - s.blocks_cached;
  s.bytes_cached = bytes_cached_;
  s.bytes_in_use -= bytes_cached_;
  s.allocations = allocations_;
  s.reused = reused_;
  s.fallbacks = fallbacks_;
  s.max_blocks = max_blocks_;
  s.communicators = comms_.size();
  return s;
}

std::vector<std::pair<const char*, uint64_t>> RegisteredPool::Stats::Figures() const {
  return {{"min_bytes", min_bytes},         {"cache_bytes", cache_limit},
          {"blocks_in_use", blocks_in_use}, {"bytes_in_use", bytes_in_use},
          {"blocks_cached", blocks_cached}, {"bytes_cached", bytes_cached},
          {"allocations", allocations},     {"reused", reused},
          {"fallbacks", fallbacks},         {"max_blocks", max_blocks},
          {"communicators", communicators}, {"registrations", registrations}};
}

void RegisteredPool::Attach(batonComm_t comm) {
  std::lock_guard<std::mutex> lock(mu_);
  comms_.push_back({comm, getpid()});
  if (!InOwner()) return;
  for (auto& [base, b] : blocks_) RegisterLocked(b.get(), comm);
}

void RegisteredPool::Detach(batonComm_t comm) {
  std::lock_guard<std::mutex> lock(mu_);
  std::erase_if(comms_, [comm](const Attached& a) { return a.comm == comm; });
  for (auto& [base, b] : blocks_) {
    std::erase_if(b->handles, [comm](const std::pair<batonComm_t, void*>& h) {
      if (h.first != comm) return false;
      batonCommDeregister(comm, h.second);
      return true;
    });
  }
}

void RegisteredPool::RegisterLocked(Block* b, batonComm_t comm) {
  void* handle = nullptr;
  if (batonCommRegister(comm, b->base, b->bytes, &handle) == batonSuccess) {
    b->handles.emplace_back(comm, handle);
    return;
  }
  WarnOnce(&warned_register_, "batonCommRegister of a block failed (" + LastError(comm) +
                                  "); calls on it take the ordinary path");
}

void RegisteredPool::ReleaseCachedLocked(std::multimap<size_t, Block*>::iterator it) {
  bytes_cached_ -= it->first;
  ReleaseLocked(blocks_.find(reinterpret_cast<uintptr_t>(it->second->base)));
  cached_.erase(it);
}

void RegisteredPool::ReleaseLocked(BlockMap::iterator it) {
  Block* b = it->second.get();
  for (const auto& [comm, handle] : b->handles) batonCommDeregister(comm, handle);
  if (batonMemFree(b->base) != batonSuccess) {
    // Still pinned by a registration made outside the pool: the memory
    // stays mapped (a leak, not a fault).
    WarnOnce(&warned_free_, "batonMemFree of a block failed (" + LastError(nullptr) +
                                "); the block stays allocated");
  }
  blocks_.erase(it);
}

}  // namespace baton_python
