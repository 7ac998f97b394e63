#include "transport/rdma/emulated_verbs.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>

#include "base/fd.h"
#include "base/log.h"

namespace baton::rdma {

namespace {

constexpr uint64_t kMemoryMagic = 0x42544e454d554d31ull;      // "BTNEMUM1"
constexpr uint64_t kUserMemoryMagic = 0x42544e454d555531ull;  // "BTNEMUU1"
constexpr size_t kMemoryHeader = 4096;
constexpr uint64_t kInboxDepth = 4096;
// The most inline data an emulated queue pair grants (ConnectX grants a few
// hundred bytes).
constexpr int kMaxInline = 512;

std::atomic<int> g_alive{0};
std::atomic<uint32_t> g_next_id{1};
std::mutex g_faults_mu;
EmulatedFaults g_faults;

EmulatedFaults Faults() {
  std::lock_guard<std::mutex> lock(g_faults_mu);
  return g_faults;
}
// True when the write being posted is the one to fail.
bool TakeWriteFault() {
  std::lock_guard<std::mutex> lock(g_faults_mu);
  if (g_faults.fail_write_at <= 0) return false;
  return --g_faults.fail_write_at == 0;
}

std::string ObjectName(int pid, char kind, uint32_t id) {
  return "/baton-ibemu-" + std::to_string(pid) + "-" + kind + std::to_string(id);
}

struct MemoryHeader {
  uint64_t magic;
  uint64_t base;  // the owner's address of the first byte
  uint64_t bytes;
};

struct InboxEntry {
  uint32_t imm;
  uint32_t len;
};
// One queue pair's receive side, shared with the peer that writes to it.
struct Inbox {
  std::atomic<uint64_t> head;    // entries delivered (peer)
  std::atomic<uint64_t> tail;    // entries consumed (owner)
  std::atomic<uint64_t> posted;  // receives posted (owner)
  std::atomic<uint32_t> dead;    // the owner destroyed the queue pair
  int32_t pid;
  uint32_t cq_id;  // the owner's completion channel
  uint32_t pad;
  InboxEntry entries[kInboxDepth];
};

// A named shared-memory mapping, unmapped (and, for the owner, unlinked)
// on destruction.
class Mapping {
 public:
  ~Mapping() {
    if (addr_ != nullptr) munmap(addr_, bytes_);
    if (!owned_name_.empty()) shm_unlink(owned_name_.c_str());
  }
  static Status Create(const std::string& name, size_t bytes, std::unique_ptr<Mapping>* out) {
    Fd fd(shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600));
    if (!fd.valid()) return ErrnoError("emulated verbs: shm_open " + name, errno);
    auto m = std::make_unique<Mapping>();
    m->owned_name_ = name;
    if (ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0)
      return ErrnoError("emulated verbs: ftruncate " + name, errno);
    BATON_RETURN_IF_ERROR(m->Map(fd.get(), bytes, name));
    *out = std::move(m);
    return Status::Ok();
  }
  static Status Open(const std::string& name, std::unique_ptr<Mapping>* out) {
    Fd fd(shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600));
    if (!fd.valid()) return ErrnoError("emulated verbs: shm_open " + name, errno);
    struct stat st {};
    if (fstat(fd.get(), &st) != 0) return ErrnoError("emulated verbs: fstat " + name, errno);
    auto m = std::make_unique<Mapping>();
    BATON_RETURN_IF_ERROR(m->Map(fd.get(), static_cast<size_t>(st.st_size), name));
    *out = std::move(m);
    return Status::Ok();
  }
  uint8_t* addr() const { return static_cast<uint8_t*>(addr_); }
  size_t bytes() const { return bytes_; }

 private:
  Status Map(int fd, size_t bytes, const std::string& name) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return ErrnoError("emulated verbs: mmap " + name, errno);
    addr_ = p;
    bytes_ = bytes;
    return Status::Ok();
  }
  void* addr_ = nullptr;
  size_t bytes_ = 0;
  std::string owned_name_;
};

// Counts itself among the live objects for as long as it exists.
struct Counted {
  Counted() { g_alive.fetch_add(1); }
  ~Counted() { g_alive.fetch_sub(1); }
  Counted(const Counted&) = delete;
  Counted& operator=(const Counted&) = delete;
};

// A file in /dev/shm rather than an abstract name: abstract sockets belong
// to a network namespace, and ranks of simulated hosts (scripts/netns.sh)
// sit in different ones but share /dev/shm.
std::string ChannelPath(int pid, uint32_t cq_id) {
  return "/dev/shm" + ObjectName(pid, 'c', cq_id);
}

sockaddr_un ChannelAddress(int pid, uint32_t cq_id, socklen_t* len) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  const std::string path = ChannelPath(pid, cq_id);
  memcpy(a.sun_path, path.data(), std::min(path.size(), sizeof(a.sun_path) - 1));
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size() + 1);
  return a;
}

class EmuMemory : public MemoryRegion {
 public:
  Counted counted;
  std::unique_ptr<Mapping> mapping;
  void Init(uint32_t id, size_t bytes) {
    data_ = mapping->addr() + kMemoryHeader;
    bytes_ = bytes;
    lkey_ = rkey_ = id;
    auto* h = reinterpret_cast<MemoryHeader*>(mapping->addr());
    h->base = reinterpret_cast<uint64_t>(data_);
    h->bytes = bytes;
    h->magic = kMemoryMagic;
  }
};

// The registration of a process's own memory: a descriptor named by the
// rkey (magic, address, length, no data); peers write into the memory with
// process_vm_writev. Destruction clears the magic before the name goes, so
// a peer that mapped the descriptor earlier sees the rkey invalid, as a
// NIC does after ibv_dereg_mr.
class EmuUserMemory : public MemoryRegion {
 public:
  Counted counted;
  std::unique_ptr<Mapping> mapping;
  ~EmuUserMemory() override {
    if (mapping != nullptr)
      __atomic_store_n(&reinterpret_cast<MemoryHeader*>(mapping->addr())->magic, uint64_t{0},
                       __ATOMIC_RELEASE);
  }
  void Init(uint32_t id, void* addr, size_t bytes) {
    data_ = static_cast<uint8_t*>(addr);
    bytes_ = bytes;
    lkey_ = rkey_ = id;
    auto* h = reinterpret_cast<MemoryHeader*>(mapping->addr());
    h->base = reinterpret_cast<uint64_t>(addr);
    h->bytes = bytes;
    __atomic_store_n(&h->magic, kUserMemoryMagic, __ATOMIC_RELEASE);
  }
};

// Places `len` bytes at `addr` in process `pid`; an error completion's
// text, or "".
std::string WriteUserMemory(int pid, uint64_t addr, const uint8_t* src, size_t len) {
  if (pid == getpid()) {
    memcpy(reinterpret_cast<void*>(addr), src, len);
    return "";
  }
  while (len > 0) {
    iovec local{const_cast<uint8_t*>(src), len};
    iovec remote{reinterpret_cast<void*>(addr), len};
    const ssize_t n = process_vm_writev(pid, &local, 1, &remote, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == ESRCH) return "transport retry counter exceeded";
    if (n <= 0)
      return std::string("remote access error (process_vm_writev: ") +
             (n < 0 ? strerror(errno) : "wrote nothing") + ")";
    src += n;
    addr += static_cast<uint64_t>(n);
    len -= static_cast<size_t>(n);
  }
  return "";
}

class EmuQp;

class EmuCq : public CompletionQueue {
 public:
  ~EmuCq() override {
    if (bound) unlink(ChannelPath(getpid(), id).c_str());
  }
  Counted counted;
  uint32_t id = 0;
  Fd channel;
  bool bound = false;  // the socket file is ours to remove
  std::mutex mu;
  // The poster's own write completions (with the queue pair they came from
  // and the send queue entries they free), and the delivered immediates.
  struct Pending {
    Completion c;
    uint32_t qpn = 0;
    int frees = 0;
  };
  std::deque<Pending> pending;
  std::vector<EmuQp*> qps;

  Status Poll(Completion* out, int max, int* got) override;
  Status Arm() override { return Status::Ok(); }  // every delivery pokes the channel
  int fd() const override { return channel.get(); }
  void DrainEvents() override {
    char buf[64];
    while (recv(channel.get(), buf, sizeof(buf), MSG_DONTWAIT) > 0) {
    }
  }
};

class EmuQp : public QueuePair {
 public:
  Counted counted;
  uint32_t qpn = 0;
  EmuCq* cq = nullptr;
  std::unique_ptr<Mapping> inbox_mapping;  // ours
  Inbox* inbox = nullptr;
  std::deque<uint64_t> recv_ids;  // posted receives' wr_ids, oldest first
  // The peer: its inbox, its memory as we mapped it, its channel.
  std::unique_ptr<Mapping> remote_inbox_mapping;
  Inbox* remote = nullptr;
  std::map<uint32_t, std::unique_ptr<Mapping>> remote_memory;
  Fd poke;  // unbound datagram socket towards the peer's channel
  bool error_state = false;
  // The send queue as hardware keeps it: an entry per write posted, freed
  // when the write's completion is polled, or for an unsignaled write when
  // a later signaled one's is; posting to a full queue fails.
  int send_depth = 0;
  int sq_used = 0;       // owner's thread (posts, and polls of its cq)
  int unsignaled = 0;    // posted since the last signaled write
  int inline_bytes = 0;  // granted
  struct Parked {
    uint64_t wr_id;
    const uint8_t* src;
    size_t len;
    uint64_t remote_addr;
    uint32_t rkey;
    WriteFlags flags;
    int frees;                     // send queue entries its completion frees
    std::vector<uint8_t> inlined;  // inline writes: the bytes as posted
    const uint8_t* source() const { return flags.inline_data ? inlined.data() : src; }
  };
  std::deque<Parked> parked;

  ~EmuQp() override {
    if (inbox != nullptr) inbox->dead.store(1, std::memory_order_release);
    if (cq != nullptr) {
      std::lock_guard<std::mutex> lock(cq->mu);
      cq->qps.erase(std::remove(cq->qps.begin(), cq->qps.end(), this), cq->qps.end());
    }
  }
  QpAddress address() const override {
    QpAddress a;
    a.qpn = qpn;
    a.mtu = 5;
    const int32_t pid = getpid();
    memcpy(a.gid, &pid, sizeof(pid));
    return a;
  }
  Status Connect(const QpAddress& remote_addr) override {
    int32_t pid;
    memcpy(&pid, remote_addr.gid, sizeof(pid));
    BATON_RETURN_IF_ERROR(
        Mapping::Open(ObjectName(pid, 'q', remote_addr.qpn), &remote_inbox_mapping)
            .WithContext("connecting to the emulated peer"));
    if (remote_inbox_mapping->bytes() < sizeof(Inbox))
      return InternalError("emulated verbs: the peer's inbox is too small");
    remote = reinterpret_cast<Inbox*>(remote_inbox_mapping->addr());
    poke.reset(socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!poke.valid()) return ErrnoError("emulated verbs: socket", errno);
    return Status::Ok();
  }
  int max_inline() const override { return inline_bytes; }
  Status PostWrite(uint64_t wr_id, const MemoryRegion& mr, const uint8_t* src, size_t len,
                   uint64_t remote_addr, uint32_t rkey, const WriteFlags& flags) override {
    if (remote == nullptr) return InvalidUsage("emulated verbs: write on an unconnected QP");
    if (sq_used >= send_depth)
      return SystemError("emulated verbs: send queue full (" + std::to_string(send_depth) +
                         " writes posted whose completions were not polled)");
    if (flags.inline_data && len > static_cast<size_t>(inline_bytes))
      return InvalidUsage("emulated verbs: inline write of " + std::to_string(len) +
                          " bytes, the queue pair takes " + std::to_string(inline_bytes));
    // An inline write's source needs no registration: the NIC copies it now.
    if (!flags.inline_data && (src < mr.data() || src + len > mr.data() + mr.bytes()))
      return InvalidUsage("emulated verbs: write source outside its memory region");
    Parked w{wr_id, src, len, remote_addr, rkey, flags, 0, {}};
    if (flags.inline_data) w.inlined.assign(src, src + len);
    ++sq_used;
    if (flags.signaled) {
      w.frees = unsignaled + 1;
      unsignaled = 0;
    } else {
      w.frees = 0;
      ++unsignaled;
    }
    parked.push_back(std::move(w));
    Flush();
    return Status::Ok();
  }
  Status PostRecvs(uint64_t wr_id, int count) override {
    for (int i = 0; i < count; ++i) recv_ids.push_back(wr_id);
    inbox->posted.fetch_add(static_cast<uint64_t>(count), std::memory_order_release);
    return Status::Ok();
  }
  // Performs the parked writes unless deliveries are held.
  void Flush() {
    if (parked.empty() || Faults().hold_deliveries) return;
    while (!parked.empty()) {
      Parked w = std::move(parked.front());
      parked.pop_front();
      EmuCq::Pending p;
      p.c.wr_id = w.wr_id;
      p.c.op = Completion::Op::kWrite;
      p.c.byte_len = static_cast<uint32_t>(w.len);
      p.qpn = qpn;
      p.frees = w.frees;
      std::string error = error_state ? "Work Request Flushed Error" : Deliver(w);
      if (!error.empty()) {
        // Failed writes complete whether signaled or not, as on hardware.
        p.c.ok = false;
        p.c.error = error;
        error_state = true;
      } else if (!w.flags.signaled) {
        continue;
      }
      std::lock_guard<std::mutex> lock(cq->mu);
      cq->pending.push_back(std::move(p));
    }
  }
  // Places one write at the peer; an error completion's text, or "".
  std::string Deliver(const Parked& w) {
    if (TakeWriteFault()) return "remote access error (injected)";
    if (remote->dead.load(std::memory_order_acquire) != 0 ||
        (kill(remote->pid, 0) != 0 && errno == ESRCH))
      return "transport retry counter exceeded";
    auto it = remote_memory.find(w.rkey);
    if (it == remote_memory.end()) {
      std::unique_ptr<Mapping> m;
      if (!Mapping::Open(ObjectName(remote->pid, 'm', w.rkey), &m).ok())
        return "remote access error (no such rkey)";
      it = remote_memory.emplace(w.rkey, std::move(m)).first;
    }
    const auto* h = reinterpret_cast<const MemoryHeader*>(it->second->addr());
    const uint64_t magic = __atomic_load_n(&h->magic, __ATOMIC_ACQUIRE);
    if ((magic != kMemoryMagic && magic != kUserMemoryMagic) || w.remote_addr < h->base ||
        w.remote_addr + w.len > h->base + h->bytes)
      return "remote access error (outside the region, or the rkey was deregistered)";
    if (w.flags.with_imm) {
      const uint64_t head = remote->head.load(std::memory_order_relaxed);
      if (head >= remote->posted.load(std::memory_order_acquire))
        return "receiver not ready: no receive posted (RNR retry exceeded)";
      if (head - remote->tail.load(std::memory_order_acquire) >= kInboxDepth)
        return "emulated inbox overflow";
    }
    if (magic == kUserMemoryMagic) {
      std::string error = WriteUserMemory(remote->pid, w.remote_addr, w.source(), w.len);
      if (!error.empty()) return error;
    } else {
      memcpy(it->second->addr() + kMemoryHeader + (w.remote_addr - h->base), w.source(), w.len);
    }
    if (w.flags.with_imm) {
      const uint64_t head = remote->head.load(std::memory_order_relaxed);
      remote->entries[head % kInboxDepth] = {w.flags.imm, static_cast<uint32_t>(w.len)};
      remote->head.store(head + 1, std::memory_order_release);
      socklen_t alen;
      sockaddr_un a = ChannelAddress(remote->pid, remote->cq_id, &alen);
      // A full socket buffer is already readable: dropping the poke is fine.
      (void)sendto(poke.get(), "!", 1, MSG_DONTWAIT | MSG_NOSIGNAL, reinterpret_cast<sockaddr*>(&a),
                   alen);
    } else {
      std::atomic_thread_fence(std::memory_order_release);
    }
    return "";
  }
  // Moves delivered immediates to `into` (under the cq's lock).
  void Collect(std::deque<EmuCq::Pending>* into) {
    uint64_t tail = inbox->tail.load(std::memory_order_relaxed);
    const uint64_t head = inbox->head.load(std::memory_order_acquire);
    for (; tail < head && !recv_ids.empty(); ++tail) {
      Completion c;
      c.op = Completion::Op::kRecvImm;
      c.wr_id = recv_ids.front();
      recv_ids.pop_front();
      c.imm = inbox->entries[tail % kInboxDepth].imm;
      c.byte_len = inbox->entries[tail % kInboxDepth].len;
      into->push_back({c, 0, 0});
    }
    inbox->tail.store(tail, std::memory_order_release);
  }
};

Status EmuCq::Poll(Completion* out, int max, int* got) {
  std::vector<EmuQp*> attached;
  {
    std::lock_guard<std::mutex> lock(mu);
    attached = qps;
  }
  for (EmuQp* qp : attached) qp->Flush();
  std::lock_guard<std::mutex> lock(mu);
  for (EmuQp* qp : qps) qp->Collect(&pending);
  int n = 0;
  while (n < max && !pending.empty()) {
    Pending& p = pending.front();
    if (p.frees > 0) {
      // Its queue pair may be gone (destroyed with completions unpolled).
      for (EmuQp* qp : qps)
        if (qp->qpn == p.qpn) qp->sq_used -= p.frees;
    }
    out[n++] = std::move(p.c);
    pending.pop_front();
  }
  if (Faults().reverse_completions) std::reverse(out, out + n);
  *got = n;
  return Status::Ok();
}

class EmuContext : public Context {
 public:
  Counted counted;
  DeviceInfo info;
  const DeviceInfo& device() const override { return info; }
  Status AllocRegistered(size_t bytes, std::unique_ptr<MemoryRegion>* out) override {
    if (bytes == 0) return InvalidUsage("emulated verbs: empty registration");
    auto mr = std::make_unique<EmuMemory>();
    const uint32_t id = g_next_id.fetch_add(1);
    BATON_RETURN_IF_ERROR(
        Mapping::Create(ObjectName(getpid(), 'm', id), kMemoryHeader + bytes, &mr->mapping));
    mr->Init(id, bytes);
    *out = std::move(mr);
    return Status::Ok();
  }
  Status RegisterUser(void* addr, size_t bytes, std::unique_ptr<MemoryRegion>* out) override {
    if (addr == nullptr || bytes == 0) return InvalidUsage("emulated verbs: empty registration");
    auto mr = std::make_unique<EmuUserMemory>();
    const uint32_t id = g_next_id.fetch_add(1);
    BATON_RETURN_IF_ERROR(
        Mapping::Create(ObjectName(getpid(), 'm', id), kMemoryHeader, &mr->mapping));
    // Where Yama restricts ptrace to descendants, let peers (siblings)
    // write into this process, as BATON_CMA does for reads.
    prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
    mr->Init(id, addr, bytes);
    *out = std::move(mr);
    return Status::Ok();
  }
  Status CreateCq(int /*depth*/, std::unique_ptr<CompletionQueue>* out) override {
    auto cq = std::make_unique<EmuCq>();
    cq->id = g_next_id.fetch_add(1);
    cq->channel.reset(socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!cq->channel.valid()) return ErrnoError("emulated verbs: socket", errno);
    socklen_t len;
    sockaddr_un a = ChannelAddress(getpid(), cq->id, &len);
    // A file of this name is left by a crashed process that had our pid.
    unlink(ChannelPath(getpid(), cq->id).c_str());
    if (bind(cq->channel.get(), reinterpret_cast<sockaddr*>(&a), len) != 0)
      return ErrnoError("emulated verbs: bind the completion channel", errno);
    cq->bound = true;
    *out = std::move(cq);
    return Status::Ok();
  }
  Status CreateQp(CompletionQueue* cq, int send_depth, int recv_depth, int max_inline,
                  std::unique_ptr<QueuePair>* out) override {
    if (recv_depth > static_cast<int>(kInboxDepth))
      return InvalidUsage("emulated verbs: receive queue deeper than the inbox");
    if (send_depth < 1) return InvalidUsage("emulated verbs: a send queue of no entries");
    auto* emu_cq = static_cast<EmuCq*>(cq);
    auto qp = std::make_unique<EmuQp>();
    qp->send_depth = send_depth;
    qp->inline_bytes = std::clamp(max_inline, 0, kMaxInline);
    qp->qpn = g_next_id.fetch_add(1);
    BATON_RETURN_IF_ERROR(
        Mapping::Create(ObjectName(getpid(), 'q', qp->qpn), sizeof(Inbox), &qp->inbox_mapping));
    qp->inbox = reinterpret_cast<Inbox*>(qp->inbox_mapping->addr());
    qp->inbox->pid = getpid();
    qp->inbox->cq_id = emu_cq->id;
    qp->cq = emu_cq;
    {
      std::lock_guard<std::mutex> lock(emu_cq->mu);
      emu_cq->qps.push_back(qp.get());
    }
    *out = std::move(qp);
    return Status::Ok();
  }
};

class EmuProvider : public Provider {
 public:
  std::string name() const override { return "emulated verbs"; }
  Status ListDevices(std::vector<DeviceInfo>* out) override {
    out->clear();
    // Two RoCE-like ports on two NUMA nodes, so NIC choice has a choice.
    for (int i = 0; i < 2; ++i) {
      DeviceInfo d;
      d.name = "emu" + std::to_string(i);
      d.port = 1;
      d.active = true;
      d.ethernet = true;
      d.numa_node = i;
      d.speed_mbps = 100000;
      out->push_back(d);
    }
    return Status::Ok();
  }
  Status Open(const DeviceInfo& device, int /*gid_index*/, int /*traffic_class*/,
              std::unique_ptr<Context>* out) override {
    auto ctx = std::make_unique<EmuContext>();
    ctx->info = device;
    *out = std::move(ctx);
    return Status::Ok();
  }
};

}  // namespace

std::unique_ptr<Provider> MakeEmulatedProvider() {
  return std::make_unique<EmuProvider>();
}

void SetEmulatedFaults(const EmulatedFaults& faults) {
  std::lock_guard<std::mutex> lock(g_faults_mu);
  g_faults = faults;
}

int EmulatedObjectsAlive() {
  return g_alive.load();
}

}  // namespace baton::rdma
