#include "shared_allocator.h"

#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include <bit>

#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

namespace baton_torch {
namespace {

// Above the default CPU allocator's (0); another library that installs its
// own with a higher one keeps its place, and Enable says so.
constexpr uint8_t kPriority = 10;

// The block size for n bytes: whole pages, rounded up to an eighth of the
// power of two below n, so a step's recurring sizes meet their cached
// blocks again and no block is more than 1/8 larger than asked.
size_t SizeClass(size_t n) {
  const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t step = std::max(page, std::bit_floor(n) / 8);
  return (n + step - 1) / step * step;
}

}  // namespace

SharedCpuAllocator& SharedCpuAllocator::Get() {
  static auto* allocator = [] {
    auto* a = new SharedCpuAllocator();  // NOLINT: never destroyed (tensors outlive statics)
    // A child forked while another thread holds the lock would find it held
    // forever: fork waits for it, and both sides let it go.
    pthread_atfork([] { Get().mu_.lock(); }, [] { Get().mu_.unlock(); },
                   [] { Get().mu_.unlock(); });
    return a;
  }();
  return *allocator;
}

bool SharedCpuAllocator::InOwner() const {
  return owner_ == getpid();
}

void SharedCpuAllocator::Enable(size_t min_bytes, size_t cache_bytes) {
  TORCH_CHECK(min_bytes > 0, "baton.torch.use_registered_memory: min_bytes must be positive");
  std::lock_guard<std::mutex> lock(mu_);
  if (previous_ == nullptr) {
    c10::Allocator* current = c10::GetCPUAllocator();
    c10::SetCPUAllocator(this, kPriority);
    TORCH_CHECK(c10::GetCPUAllocator() == this,
                "baton.torch.use_registered_memory: torch keeps another CPU allocator installed "
                "with a higher priority, so tensors cannot be put in registered memory");
    previous_ = current;
    owner_ = getpid();
    // Each block holds a descriptor (its memfd, which the peers open): a
    // quarter of the process's limit at most, the rest left to the program.
    rlimit limit{};
    max_blocks_ = getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY
                      ? static_cast<size_t>(limit.rlim_cur / 4)
                      : 4096;
  }
  TORCH_CHECK(InOwner(),
              "baton.torch.use_registered_memory: not in a process forked after it "
              "was first called (the blocks belong to the parent)");
  enabled_ = true;
  min_bytes_ = min_bytes;
  cache_limit_ = cache_bytes;
}

void SharedCpuAllocator::Disable() {
  std::lock_guard<std::mutex> lock(mu_);
  enabled_ = false;
}

c10::DataPtr SharedCpuAllocator::allocate(size_t n) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (enabled_ && n >= min_bytes_ && InOwner()) {
      const size_t bytes = SizeClass(n);
      Block* b = nullptr;
      // The block of this class freed last (equal keys keep their order):
      // its pages are the likeliest still in the cache.
      if (auto hit = cached_.upper_bound(bytes);
          hit != cached_.begin() && (--hit)->first == bytes) {
        b = hit->second;
        cached_.erase(hit);
        bytes_cached_ -= bytes;
        ++reused_;
      } else {
        void* base = nullptr;
        if (blocks_.size() >= max_blocks_ && !cached_.empty()) {
          // At the limit: a cached block of another size makes room.
          auto evict = cached_.begin();
          bytes_cached_ -= evict->first;
          ReleaseLocked(blocks_.find(reinterpret_cast<uintptr_t>(evict->second->base)));
          cached_.erase(evict);
        }
        if (blocks_.size() >= max_blocks_) {
          ++fallbacks_;
          TORCH_WARN_ONCE("baton.torch.use_registered_memory: ", blocks_.size(),
                          " blocks hold a quarter of the open-file limit (ulimit -n); later "
                          "tensors take ordinary memory and the ordinary path (raise the limit, "
                          "or min_bytes)");
        } else if (batonMemAlloc(&base, bytes) == batonSuccess) {
          auto owned = std::make_unique<Block>();
          b = owned.get();
          b->base = base;
          b->bytes = bytes;
          blocks_.emplace(reinterpret_cast<uintptr_t>(base), std::move(owned));
          for (batonComm_t comm : comms_) RegisterLocked(b, comm);
        } else {
          ++fallbacks_;
          TORCH_WARN_ONCE("baton.torch.use_registered_memory: batonMemAlloc of ", bytes,
                          " bytes failed (",
                          batonGetLastError(nullptr) ? batonGetLastError(nullptr) : "",
                          "); such tensors take ordinary memory and the ordinary path");
        }
      }
      if (b != nullptr) {
        b->in_use = true;
        ++allocations_;
        return c10::DataPtr(b->base, b->base, &SharedCpuAllocator::Free, c10::Device(c10::kCPU));
      }
    }
  }
  return previous_ != nullptr ? previous_->allocate(n) : c10::GetDefaultCPUAllocator()->allocate(n);
}

c10::DeleterFnPtr SharedCpuAllocator::raw_deleter() const {
  // The replaced allocator's DataPtrs carry its own deleter; a raw pointer
  // from it comes back through Free, which hands it on.
  return previous_ != nullptr && previous_->raw_deleter() != nullptr ? &SharedCpuAllocator::Free
                                                                     : nullptr;
}

void SharedCpuAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  default_copy_data(dest, src, count);
}

void SharedCpuAllocator::Free(void* ptr) {
  Get().FreeBlock(ptr);
}

void SharedCpuAllocator::FreeBlock(void* ptr) {
  c10::DeleterFnPtr hand_on = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = blocks_.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == blocks_.end()) {
      hand_on = previous_ != nullptr ? previous_->raw_deleter() : nullptr;
    } else if (!InOwner()) {
      return;  // the parent's block: the child leaves it alone (see the header)
    } else {
      Block* b = it->second.get();
      b->in_use = false;
      if (bytes_cached_ + b->bytes <= cache_limit_) {
        cached_.emplace(b->bytes, b);
        bytes_cached_ += b->bytes;
      } else {
        ReleaseLocked(it);
      }
      return;
    }
  }
  TORCH_CHECK(hand_on != nullptr, "baton.torch: freeing a pointer this allocator did not make");
  hand_on(ptr);
}

size_t SharedCpuAllocator::ReleaseCached() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!InOwner()) return 0;
  size_t released = 0;
  for (auto& [bytes, b] : cached_) {
    released += bytes;
    ReleaseLocked(blocks_.find(reinterpret_cast<uintptr_t>(b->base)));
  }
  cached_.clear();
  bytes_cached_ = 0;
  return released;
}

bool SharedCpuAllocator::Contains(const void* ptr) const {
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = blocks_.upper_bound(p);
  if (it == blocks_.begin()) return false;
  --it;
  return p - it->first < it->second->bytes;
}

SharedCpuAllocator::Stats SharedCpuAllocator::GetStats() const {
  std::lock_guard<std::mutex> lock(mu_);
  Stats s;
  s.enabled = enabled_;
  s.min_bytes = min_bytes_;
  s.cache_limit = cache_limit_;
  for (const auto& [base, b] : blocks_) {
    (b->in_use ? s.blocks_in_use : s.blocks_cached) += 1;
    if (b->in_use) s.bytes_in_use += b->bytes;
    s.registrations += b->handles.size();
  }
  s.bytes_cached = bytes_cached_;
  s.allocations = allocations_;
  s.reused = reused_;
  s.fallbacks = fallbacks_;
  s.max_blocks = max_blocks_;
  s.communicators = comms_.size();
  return s;
}

void SharedCpuAllocator::Attach(batonComm_t comm) {
  std::lock_guard<std::mutex> lock(mu_);
  comms_.push_back(comm);
  if (!InOwner()) return;
  for (auto& [base, b] : blocks_) RegisterLocked(b.get(), comm);
}

void SharedCpuAllocator::Detach(batonComm_t comm) {
  std::lock_guard<std::mutex> lock(mu_);
  std::erase(comms_, comm);
  for (auto& [base, b] : blocks_) {
    std::erase_if(b->handles, [comm](const std::pair<batonComm_t, void*>& h) {
      if (h.first != comm) return false;
      batonCommDeregister(comm, h.second);
      return true;
    });
  }
}

void SharedCpuAllocator::RegisterLocked(Block* b, batonComm_t comm) {
  void* handle = nullptr;
  if (batonCommRegister(comm, b->base, b->bytes, &handle) == batonSuccess) {
    b->handles.emplace_back(comm, handle);
    return;
  }
  TORCH_WARN_ONCE("baton.torch.use_registered_memory: batonCommRegister failed (",
                  batonGetLastError(comm) ? batonGetLastError(comm) : "",
                  "); calls on that block take the ordinary path");
}

void SharedCpuAllocator::ReleaseLocked(std::map<uintptr_t, std::unique_ptr<Block>>::iterator it) {
  Block* b = it->second.get();
  for (const auto& [comm, handle] : b->handles) batonCommDeregister(comm, handle);
  if (batonMemFree(b->base) != batonSuccess) {
    // Still pinned by a registration made outside this allocator: the
    // memory stays mapped (a leak, not a fault).
    TORCH_WARN_ONCE("baton.torch: batonMemFree of a cached block failed (",
                    batonGetLastError(nullptr) ? batonGetLastError(nullptr) : "",
                    "); the block stays allocated");
  }
  blocks_.erase(it);
}

}  // namespace baton_torch
