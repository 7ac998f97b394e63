// Host memory that other processes of the host can map: batonMemAlloc's
// allocations (memfd_create + mmap MAP_SHARED), the process-wide registry of
// them (address range -> memfd), and read-only mappings of a peer process's
// allocation through /proc/<pid>/fd/<fd>.
//
// Why a memfd: a registered collective reads its peers' user buffers in
// place (comm/host_ipc.cc), which needs the very pages the peer's program
// writes, not a copy. A memfd is anonymous shared memory with a descriptor
// another process of the same user can open, so the peer maps it once per
// allocation and every later call on any buffer inside it costs nothing.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/status.h"

namespace baton {

// Where a buffer lies in a shared allocation, as a peer needs it to map it.
struct SharedAllocInfo {
  int32_t pid = 0;      // the owning process
  int32_t fd = -1;      // the memfd, in the owner's descriptor table
  uint64_t serial = 0;  // unique per allocation in the owning process (fds are reused)
  uint64_t size = 0;    // bytes of the whole mapping
  uint64_t offset = 0;  // of the buffer in the allocation
  uint64_t inode = 0;   // the memfd's inode: proves a descriptor opened by pid is this one
};

// batonMemAlloc: `size` bytes (rounded up to pages), zeroed, recorded in
// the registry. batonInvalidArgument for a null `ptr` or a zero size.
Status SharedAlloc(size_t size, void** ptr);
// batonMemFree: `ptr` must be what SharedAlloc returned and not pinned.
Status SharedFree(void* ptr);
// The allocation holding all of [ptr, ptr + bytes) (bytes may be 0); false
// when there is none.
bool FindSharedAlloc(const void* ptr, size_t bytes, SharedAllocInfo* out);
// Registrations pin their allocation (`delta` +1 / -1), so batonMemFree of
// a buffer still registered on a live communicator is refused.
void PinSharedAlloc(uint64_t serial, int delta);

// A peer's allocation mapped into this process, readable and writable (a
// registered allreduce writes its share of the result into the peers'
// outputs); unmapped when destroyed. Open fails (never maps something else) when the descriptor
// cannot be opened through /proc (another user, another pid namespace,
// ptrace restrictions) or what it opens is not the allocation `info`
// names (its inode differs: `pid` means another process here). The
// mapping holds the pages: a peer that frees or dies leaves them mapped
// here until then.
class PeerMapping {
 public:
  static Status Open(const SharedAllocInfo& info, PeerMapping* out);
  PeerMapping() = default;
  PeerMapping(PeerMapping&& other) noexcept;
  PeerMapping& operator=(PeerMapping&& other) noexcept;
  PeerMapping(const PeerMapping&) = delete;
  PeerMapping& operator=(const PeerMapping&) = delete;
  ~PeerMapping();
  uint8_t* base() const { return base_; }

 private:
  void Reset();
  uint8_t* base_ = nullptr;
  size_t size_ = 0;
};

}  // namespace baton
