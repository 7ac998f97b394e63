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
  return previous_.load(std::memory_order_acquire)->allocate(n);  // set before torch calls us
}

c10::DeleterFnPtr SharedCpuAllocator::raw_deleter() const {
  // The replaced allocator's DataPtrs carry its own deleter; a raw pointer
  // from it comes back through Free, which hands it on.
  return previous_.load(std::memory_order_acquire)->raw_deleter() != nullptr
             ? &SharedCpuAllocator::Free
             : nullptr;
}

void SharedCpuAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  default_copy_data(dest, src, count);
}

void SharedCpuAllocator::Free(void* ptr) {
  if (Pool().Free(ptr)) return;
  c10::DeleterFnPtr hand_on = Get().previous_.load(std::memory_order_acquire)->raw_deleter();
  TORCH_CHECK(hand_on != nullptr, "baton.torch: freeing a pointer this allocator did not make");
  hand_on(ptr);
}

}  // namespace baton_torch
