// The few verbs the RDMA transport uses, behind a small interface so that
// the protocol above them (rdma_channel.h) runs in tests over an emulation
// (emulated_verbs.h) and on real NICs over libibverbs (ibverbs.cc) alike.
//
// Objects are owned through std::unique_ptr and released by their
// destructors; an owner must destroy queue pairs before the completion
// queue they report to, and every object before the context that made it
// (RdmaChannel's member order does this).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"

namespace baton::rdma {

// One port of one device, as discovery found it.
struct DeviceInfo {
  std::string name;  // "mlx5_0"
  int port = 1;
  bool active = false;    // IBV_PORT_ACTIVE
  bool ethernet = false;  // link layer: RoCE (true) or InfiniBand
  int numa_node = -1;     // of the device's PCI function (-1: unknown)
  uint32_t speed_mbps = 0;
};

// What a peer needs to reach one queue pair (exchanged at set-up).
struct QpAddress {
  uint32_t qpn = 0;
  uint32_t psn = 0;
  uint16_t lid = 0;  // InfiniBand; 0 on RoCE
  uint8_t mtu = 0;   // enum ibv_mtu (1: 256 ... 5: 4096)
  uint8_t gid_index = 0;
  uint8_t gid[16] = {};  // RoCE (and routed IB); the emulation keeps its pid here
};

// A registered buffer: local key for the sources of our writes, remote key
// and address for the peer's writes into it.
class MemoryRegion {
 public:
  virtual ~MemoryRegion() = default;
  uint8_t* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  uint32_t lkey() const { return lkey_; }
  uint32_t rkey() const { return rkey_; }

 protected:
  uint8_t* data_ = nullptr;
  size_t bytes_ = 0;
  uint32_t lkey_ = 0, rkey_ = 0;
};

struct Completion {
  enum class Op : uint8_t { kWrite, kRecvImm };
  uint64_t wr_id = 0;
  Op op = Op::kWrite;
  bool ok = true;
  std::string error;  // ibv_wc_status_str when !ok
  uint32_t imm = 0;   // kRecvImm
  uint32_t byte_len = 0;
};

class CompletionQueue {
 public:
  virtual ~CompletionQueue() = default;
  // Up to `max` completions; never blocks. A failure here (not an error
  // completion) means the queue itself is broken.
  virtual Status Poll(Completion* out, int max, int* got) = 0;
  // Asks for an event on fd() at the next completion. The caller polls
  // once more after arming: a completion that came before it fires nothing.
  virtual Status Arm() = 0;
  // Readable when an armed completion came (the completion channel's fd).
  virtual int fd() const = 0;
  // Consumes (and acknowledges) the events fd() reported; never blocks.
  virtual void DrainEvents() = 0;
};

// How one RDMA write is posted.
struct WriteFlags {
  bool with_imm = false;  // also consumes one posted receive at the peer,
  uint32_t imm = 0;       // which completes with this immediate data
  // false: no completion unless it fails (IBV_SEND_SIGNALED unset). Its
  // send queue entry is freed only when a later signaled write of the same
  // queue pair completes, so a sender must signal one write every so often.
  bool signaled = true;
  // IBV_SEND_INLINE: the NIC takes the bytes at post time (the source may be
  // reused at once, no memory key is used); at most max_inline() bytes.
  bool inline_data = false;
};

// One reliable-connected queue pair.
class QueuePair {
 public:
  virtual ~QueuePair() = default;
  virtual QpAddress address() const = 0;
  // The largest inline write the queue pair takes (what the device granted).
  virtual int max_inline() const = 0;
  // INIT -> RTR -> RTS towards `remote`.
  virtual Status Connect(const QpAddress& remote) = 0;
  // RDMA write of `len` bytes at `src` (inside `mr`, unless inline) to the
  // peer's `remote_addr` under `rkey`. Fails, posting nothing, when the
  // send queue is full or an inline write is too long.
  virtual Status PostWrite(uint64_t wr_id, const MemoryRegion& mr, const uint8_t* src, size_t len,
                           uint64_t remote_addr, uint32_t rkey, const WriteFlags& flags) = 0;
  // Posts `count` receives without buffers (writes with immediate carry
  // their data in the write itself).
  virtual Status PostRecvs(uint64_t wr_id, int count) = 0;
};

// An opened device port with its protection domain.
class Context {
 public:
  virtual ~Context() = default;
  virtual const DeviceInfo& device() const = 0;
  // Allocates `bytes` of page-aligned memory and registers it for local
  // and remote write.
  virtual Status AllocRegistered(size_t bytes, std::unique_ptr<MemoryRegion>* out) = 0;
  // Registers the caller's own memory [addr, addr + bytes) for local and
  // remote write (ibv_reg_mr; the pages stay pinned until the region is
  // destroyed). The memory must outlive the region.
  virtual Status RegisterUser(void* addr, size_t bytes, std::unique_ptr<MemoryRegion>* out) = 0;
  virtual Status CreateCq(int depth, std::unique_ptr<CompletionQueue>* out) = 0;
  // `max_inline`: the inline writes asked for, in bytes (0: none); the
  // queue pair may grant less (QueuePair::max_inline).
  virtual Status CreateQp(CompletionQueue* cq, int send_depth, int recv_depth, int max_inline,
                          std::unique_ptr<QueuePair>* out) = 0;
};

// A source of devices: libibverbs, or the emulation.
class Provider {
 public:
  virtual ~Provider() = default;
  virtual std::string name() const = 0;
  // Every port of every device; an empty list (with Ok) when there is none.
  virtual Status ListDevices(std::vector<DeviceInfo>* out) = 0;
  // gid_index < 0: choose (RoCE v2 IPv4-mapped GID first); tc: traffic class.
  virtual Status Open(const DeviceInfo& device, int gid_index, int traffic_class,
                      std::unique_ptr<Context>* out) = 0;
};

// libibverbs; null when Baton was built without it (ibverbs.cc).
std::unique_ptr<Provider> MakeIbverbsProvider();

}  // namespace baton::rdma
