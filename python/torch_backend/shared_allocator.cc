#include "shared_allocator.h"

#include <mutex>

#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

namespace baton_torch {
namespace {

// Above the default CPU allocator's (0); another library that installs its
// own with a higher one keeps its place, and Enable says so.
constexpr uint8_t kPriority = 10;

void Warn(const std::string& message) {
  TORCH_WARN("baton.torch.use_registered_memory: ", message);
}

}  // namespace

SharedCpuAllocator& SharedCpuAllocator::Get() {
  static auto* allocator = new SharedCpuAllocator();  // NOLINT: never destroyed
  return *allocator;
}

void SharedCpuAllocator::Enable(size_t min_bytes, size_t cache_bytes) {
  TORCH_CHECK(min_bytes > 0, "baton.torch.use_registered_memory: min_bytes must be positive");
  static std::once_flag installed;
  std::call_once(installed, [this] {
    previous_.store(c10::GetCPUAllocator(), std::memory_order_release);
    Pool().SetWarn(&Warn);
    c10::SetCPUAllocator(this, kPriority);
    TORCH_CHECK(c10::GetCPUAllocator() == this,
                "baton.torch.use_registered_memory: torch keeps another CPU allocator installed "
                "with a higher priority, so tensors cannot be put in registered memory");
  });
  Pool().Enable(min_bytes, cache_bytes);
}

c10::DataPtr SharedCpuAllocator::allocate(size_t n) {
  if (void* p = Pool().Allocate(n))
    return c10::DataPtr(p, p, &SharedCpuAllocator::Free, c10::Device(c10::kCPU));
  c10::Allocator* previous = previous_.load(std::memory_order_acquire);
  return previous != nullptr ? previous->allocate(n) : c10::GetDefaultCPUAllocator()->allocate(n);
}

c10::DeleterFnPtr SharedCpuAllocator::raw_deleter() const {
  // The replaced allocator's DataPtrs carry its own deleter; a raw pointer
  // from it comes back through Free, which hands it on.
  c10::Allocator* previous = previous_.load(std::memory_order_acquire);
  return previous != nullptr && previous->raw_deleter() != nullptr ? &SharedCpuAllocator::Free
                                                                   : nullptr;
}

void SharedCpuAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  default_copy_data(dest, src, count);
}

void SharedCpuAllocator::Free(void* ptr) {
  if (Pool().Free(ptr)) return;
  c10::Allocator* previous = Get().previous_.load(std::memory_order_acquire);
  c10::DeleterFnPtr hand_on = previous != nullptr ? previous->raw_deleter() : nullptr;
  TORCH_CHECK(hand_on != nullptr, "baton.torch: freeing a pointer this allocator did not make");
  hand_on(ptr);
}

}  // namespace baton_torch
