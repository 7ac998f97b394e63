// Cross-memory attach copies; see cma.h.
#include "transport/cma.h"

#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

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

double MeasureCmaCopySpeed() {
  constexpr size_t kBytes = 4 << 20;
  constexpr int kCopies = 3;
  std::vector<uint8_t> src(kBytes, 1), dst(kBytes, 0);
  const int self = static_cast<int>(getpid());
  auto best_of = [&](auto copy) {
    double best = 1e30;
    for (int i = 0; i <= kCopies; ++i) {  // the first warms the pages and the cache
      const auto start = std::chrono::steady_clock::now();
      if (!copy()) return -1.0;
      const double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (i > 0) best = std::min(best, s);
    }
    return best;
  };
  const double user = best_of([&] {
    std::memcpy(dst.data(), src.data(), kBytes);
    asm volatile("" : : "r"(dst.data()) : "memory");
    return true;
  });
  const double kernel = best_of([&] {
    return CmaRead(self, dst.data(), reinterpret_cast<uint64_t>(src.data()), kBytes).ok();
  });
  if (kernel <= 0 || user <= 0) return 0;
  return user / kernel;
}

}  // namespace

double CmaCopySpeed() {
  static const double speed = MeasureCmaCopySpeed();
  return speed;
}

}  // namespace baton
