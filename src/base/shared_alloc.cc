// batonMemAlloc's memfd allocations and their registry; see shared_alloc.h.
#include "base/shared_alloc.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "base/fd.h"

namespace baton {
namespace {

struct Allocation {
  size_t size = 0;  // of the mapping
  Fd fd;
  uint64_t inode = 0;
  uint64_t serial = 0;
  int pins = 0;  // live registrations inside it
};

struct Registry {
  std::mutex mu;
  std::map<uintptr_t, Allocation> by_start;  // guarded by mu
  uint64_t next_serial = 1;                  // guarded by mu
};

// Never destroyed: allocations may be freed from static destructors.
Registry& TheRegistry() {
  static auto* r = new Registry;  // NOLINT: intentionally leaked singleton
  return *r;
}

size_t PageRound(size_t size) {
  const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (size + page - 1) / page * page;
}

}  // namespace

Status SharedAlloc(size_t size, void** ptr) {
  if (ptr == nullptr) return InvalidArgument("ptr is NULL");
  if (size == 0) return InvalidArgument("size is 0");
  *ptr = nullptr;
  const size_t bytes = PageRound(size);
  if (bytes < size) return InvalidArgument("size " + std::to_string(size) + " is too large");
  Fd fd(static_cast<int>(memfd_create("baton-mem", MFD_CLOEXEC)));
  if (!fd.valid()) return ErrnoError("memfd_create", errno);
  if (ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0)
    return ErrnoError("ftruncate(memfd, " + std::to_string(bytes) + ")", errno);
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) return ErrnoError("fstat(memfd)", errno);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED) return ErrnoError("mmap(memfd, " + std::to_string(bytes) + ")", errno);
  Registry& reg = TheRegistry();
  std::lock_guard<std::mutex> lock(reg.mu);
  Allocation& a = reg.by_start[reinterpret_cast<uintptr_t>(p)];
  a.size = bytes;
  a.fd = std::move(fd);
  a.inode = st.st_ino;
  a.serial = reg.next_serial++;
  *ptr = p;
  return Status::Ok();
}

Status SharedFree(void* ptr) {
  if (ptr == nullptr) return InvalidArgument("ptr is NULL");
  Registry& reg = TheRegistry();
  std::lock_guard<std::mutex> lock(reg.mu);
  auto it = reg.by_start.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == reg.by_start.end())
    return InvalidArgument("ptr was not returned by batonMemAlloc (or is freed already)");
  if (it->second.pins > 0)
    return InvalidArgument("ptr is still registered (" + std::to_string(it->second.pins) +
                           " registrations on live communicators; batonCommDeregister first)");
  munmap(ptr, it->second.size);
  reg.by_start.erase(it);  // closes the memfd
  return Status::Ok();
}

bool FindSharedAlloc(const void* ptr, size_t bytes, SharedAllocInfo* out) {
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  Registry& reg = TheRegistry();
  std::lock_guard<std::mutex> lock(reg.mu);
  auto it = reg.by_start.upper_bound(p);
  if (it == reg.by_start.begin()) return false;
  --it;
  const Allocation& a = it->second;
  if (p - it->first > a.size || bytes > a.size - (p - it->first)) return false;
  out->pid = static_cast<int32_t>(getpid());
  out->fd = a.fd.get();
  out->serial = a.serial;
  out->size = a.size;
  out->offset = p - it->first;
  out->inode = a.inode;
  return true;
}

void PinSharedAlloc(uint64_t serial, int delta) {
  Registry& reg = TheRegistry();
  std::lock_guard<std::mutex> lock(reg.mu);
  for (auto& [start, a] : reg.by_start)
    if (a.serial == serial) a.pins += delta;
}

Status PeerMapping::Open(const SharedAllocInfo& info, PeerMapping* out) {
  // Opening another process's descriptor through /proc needs the same
  // permission as ptrace-reading it (same user, Yama permitting), as CMA.
  const std::string path = "/proc/" + std::to_string(info.pid) + "/fd/" + std::to_string(info.fd);
  Fd fd(open(path.c_str(), O_RDWR | O_CLOEXEC));
  if (!fd.valid()) return ErrnoError("open(" + path + ")", errno);
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) return ErrnoError("fstat(" + path + ")", errno);
  // The pid is the peer's own: in another pid namespace it names another
  // process here, whose descriptor of the same number is something else.
  if (static_cast<uint64_t>(st.st_ino) != info.inode ||
      static_cast<uint64_t>(st.st_size) < info.size)
    return SystemError(path + " is not the peer's allocation (inode " + std::to_string(st.st_ino) +
                       ", " + std::to_string(st.st_size) + " bytes; expected inode " +
                       std::to_string(info.inode) + ", " + std::to_string(info.size) +
                       " bytes): the peer runs in another pid namespace?");
  void* p = mmap(nullptr, info.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED) return ErrnoError("mmap(" + path + ")", errno);
  out->Reset();
  out->base_ = static_cast<uint8_t*>(p);
  out->size_ = info.size;
  return Status::Ok();
}

PeerMapping::PeerMapping(PeerMapping&& other) noexcept
    : base_(std::exchange(other.base_, nullptr)), size_(std::exchange(other.size_, 0)) {}

PeerMapping& PeerMapping::operator=(PeerMapping&& other) noexcept {
  if (this != &other) {
    Reset();
    base_ = std::exchange(other.base_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

PeerMapping::~PeerMapping() {
  Reset();
}

void PeerMapping::Reset() {
  if (base_ != nullptr) munmap(base_, size_);
  base_ = nullptr;
  size_ = 0;
}

}  // namespace baton
