// Cross-memory attach copies; see cma.h.
#include "transport/cma.h"

#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

namespace baton {
namespace {

Status CmaError(const char* call, int pid, int err) {
  if (err == ESRCH)
    return RemoteError(std::string(call) + ": process " + std::to_string(pid) + " is gone");
  return ErrnoError(std::string(call) + " with process " + std::to_string(pid), err);
}

// Both directions: process_vm_readv and process_vm_writev share a signature,
// and a copy may stop short (a page boundary, a signal) and go on from there.
using CmaCall = ssize_t (*)(pid_t, const iovec*, unsigned long, const iovec*, unsigned long,
                            unsigned long);

Status CmaCopyAll(CmaCall call, const char* name, int pid, uint8_t* local, uint64_t remote,
                  size_t bytes) {
  while (bytes > 0) {
    iovec l{local, bytes};
    iovec r{reinterpret_cast<void*>(remote), bytes};
    const ssize_t n = call(pid, &l, 1, &r, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return CmaError(name, pid, n < 0 ? errno : EFAULT);
    local += n;
    remote += static_cast<uint64_t>(n);
    bytes -= static_cast<size_t>(n);
  }
  return Status::Ok();
}

}  // namespace

Status CmaRead(int pid, void* local, uint64_t remote, size_t bytes) {
  return CmaCopyAll(process_vm_readv, "process_vm_readv", pid, static_cast<uint8_t*>(local), remote,
                    bytes);
}

Status CmaWrite(int pid, uint64_t remote, const void* local, size_t bytes) {
  // process_vm_writev only reads the local iovec's memory.
  return CmaCopyAll(process_vm_writev, "process_vm_writev", pid,
                    static_cast<uint8_t*>(const_cast<void*>(local)), remote, bytes);
}

int CmaTryRead(int pid, void* local, uint64_t remote, size_t bytes) {
  iovec l{local, bytes};
  iovec r{reinterpret_cast<void*>(remote), bytes};
  const ssize_t n = process_vm_readv(pid, &l, 1, &r, 1, 0);
  if (n < 0) return errno;
  return static_cast<size_t>(n) == bytes ? 0 : EFAULT;
}

namespace {

// Anonymous memory faulted in by one call (MADV_POPULATE_WRITE, Linux
// 5.14): a page fault per page of a fresh vector took two thirds of the
// check's time here.
class PopulatedBytes {
 public:
  explicit PopulatedBytes(size_t bytes) : bytes_(bytes) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return;
    data_ = static_cast<uint8_t*>(p);
    // Base pages, as the users' buffers mostly are: the kernel pins each
    // page it copies, so huge pages would flatter its copy.
    madvise(data_, bytes, MADV_NOHUGEPAGE);
    constexpr int kMadvPopulateWrite = 23;  // older C libraries do not name it
    if (madvise(data_, bytes, kMadvPopulateWrite) != 0) std::memset(data_, 0, bytes);
  }
  ~PopulatedBytes() {
    if (data_ != nullptr) munmap(data_, bytes_);
  }
  PopulatedBytes(const PopulatedBytes&) = delete;
  PopulatedBytes& operator=(const PopulatedBytes&) = delete;
  uint8_t* data() const { return data_; }

 private:
  size_t bytes_;
  uint8_t* data_ = nullptr;
};

double MeasureCmaCopySpeed() {
  // 2 MiB read the same ratio as 4 and 8 MiB here (docs/performance.md,
  // "The single-copy check's cost"); 1 MiB and less swung more.
  constexpr size_t kBytes = 2 << 20;
  constexpr int kCopies = 3;
  PopulatedBytes memory(2 * kBytes);
  if (memory.data() == nullptr) return 0;
  uint8_t* src = memory.data();
  uint8_t* dst = src + kBytes;
  std::memset(src, 1, kBytes);
  const int self = static_cast<int>(getpid());
  auto seconds = [](auto copy) {
    const auto start = std::chrono::steady_clock::now();
    if (!copy()) return -1.0;
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  auto user_copy = [&] {
    std::memcpy(dst, src, kBytes);
    asm volatile("" : : "r"(dst) : "memory");
    return true;
  };
  auto kernel_copy = [&] {
    return CmaRead(self, dst, reinterpret_cast<uint64_t>(src), kBytes).ok();
  };
  // In turns, so that a machine that changes pace mid-check slows both;
  // the first round warms the pages and the caches.
  double user = 1e30, kernel = 1e30;
  for (int i = 0; i <= kCopies; ++i) {
    const double u = seconds(user_copy), k = seconds(kernel_copy);
    if (u <= 0 || k <= 0) return 0;
    if (i == 0) continue;
    user = std::min(user, u);
    kernel = std::min(kernel, k);
  }
  return user / kernel;
}

}  // namespace

double CmaCopySpeed() {
  static const double speed = MeasureCmaCopySpeed();
  return speed;
}

}  // namespace baton
