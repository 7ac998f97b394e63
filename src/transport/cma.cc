// Cross-memory attach copies; see cma.h.
#include "transport/cma.h"

#include <sys/uio.h>

#include <cerrno>
#include <string>

namespace baton {
namespace {

Status CmaError(const char* call, int pid, int err) {
  if (err == ESRCH)
    return RemoteError(std::string(call) + ": process " + std::to_string(pid) + " is gone");
  return ErrnoError(std::string(call) + " with process " + std::to_string(pid), err);
}

}  // namespace

Status CmaRead(int pid, void* local, uint64_t remote, size_t bytes) {
  auto* dst = static_cast<uint8_t*>(local);
  while (bytes > 0) {
    iovec l{dst, bytes};
    iovec r{reinterpret_cast<void*>(remote), bytes};
    const ssize_t n = process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return CmaError("process_vm_readv", pid, n < 0 ? errno : EFAULT);
    dst += n;
    remote += static_cast<uint64_t>(n);
    bytes -= static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status CmaWrite(int pid, uint64_t remote, const void* local, size_t bytes) {
  const auto* src = static_cast<const uint8_t*>(local);
  while (bytes > 0) {
    iovec l{const_cast<uint8_t*>(src), bytes};
    iovec r{reinterpret_cast<void*>(remote), bytes};
    const ssize_t n = process_vm_writev(pid, &l, 1, &r, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return CmaError("process_vm_writev", pid, n < 0 ? errno : EFAULT);
    src += n;
    remote += static_cast<uint64_t>(n);
    bytes -= static_cast<size_t>(n);
  }
  return Status::Ok();
}

int CmaTryRead(int pid, void* local, uint64_t remote, size_t bytes) {
  iovec l{local, bytes};
  iovec r{reinterpret_cast<void*>(remote), bytes};
  const ssize_t n = process_vm_readv(pid, &l, 1, &r, 1, 0);
  if (n < 0) return errno;
  return static_cast<size_t>(n) == bytes ? 0 : EFAULT;
}

}  // namespace baton
