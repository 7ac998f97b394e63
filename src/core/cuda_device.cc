// The staged device path: see cuda_device.h and docs/cuda.md.
//
// Ordering of one call on a cudaStream_t s (seq = the call's number on its
// communicator's channel):
//   user thread:  cudaMemcpyAsync(pinned <- device input, s); record ev_in on s;
//                 queue the host task; wait kernel(flag >= seq) on s;
//                 cudaMemcpyAsync(device output <- pinned, s); record ev_out on s
//   worker:       poll ev_in (deadline BATON_TIMEOUT); run the collective on the
//                 pinned buffers; store flag = seq
// The worker is an ordinary thread (never a CUDA host-callback thread), so
// waiting on the network there blocks nothing inside CUDA. The flag lives in
// mapped pinned memory; the one-thread kernel spinning on it is what makes
// later work on s wait, with a timeout of its own so a stream can never hang
// forever. Pinned buffers go back to the pool only after ev_out completed and
// the host task finished.
#include "core/cuda_device.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "core/cuda_ipc.h"
#include "core/env.h"
#include "core/log.h"
#include "core/stream.h"
#include "kernels/cuda/cuda_kernels.h"

namespace baton {
namespace {

using Clock = std::chrono::steady_clock;

double TimeoutSeconds() {
  return static_cast<double>(std::max<int64_t>(1, GetEnvInt("BATON_TIMEOUT", 300)));
}

// Makes `device` current for the scope, restoring the previous one after.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (device >= 0 && device != previous_) {
      status_ = cudaSetDevice(device);
      switched_ = status_ == cudaSuccess;
    }
  }
  ~DeviceGuard() {
    if (switched_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  cudaError_t status() const { return status_; }

 private:
  int previous_ = -1;
  bool switched_ = false;
  cudaError_t status_ = cudaSuccess;
};

// Pinned (page-locked) host memory from cudaHostAlloc, freed on destruction.
class PinnedMemory {
 public:
  PinnedMemory() = default;
  ~PinnedMemory() {
    if (ptr_) cudaFreeHost(ptr_);  // errors at process exit (runtime unloading) are moot
  }
  PinnedMemory(const PinnedMemory&) = delete;
  PinnedMemory& operator=(const PinnedMemory&) = delete;

  Status allocate(size_t bytes, unsigned flags) {
    if (cudaError_t err = cudaHostAlloc(&ptr_, bytes, flags); err != cudaSuccess) {
      ptr_ = nullptr;
      return CudaErrorStatus(err, "cudaHostAlloc(" + std::to_string(bytes) + " bytes)");
    }
    bytes_ = bytes;
    return Status::Ok();
  }
  uint8_t* data() const { return static_cast<uint8_t*>(ptr_); }
  size_t size() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// One staging buffer and what must happen before it may be reused: the
// launching thread is done with it (sealed), the host side of its call has
// finished (host_done) and the stream has passed its last copy (done event).
struct StagingSlot {
  PinnedMemory memory;
  bool in_use = false;
  bool sealed = false;
  cudaEvent_t done = nullptr;  // owned; nullptr when no stream work follows
  std::atomic<bool> host_done{false};
};

// Process-wide pool of pinned staging buffers: cudaHostAlloc costs
// milliseconds, so buffers are kept and reused (sizes rounded up to powers of
// two). Never shrinks; the memory goes back at process exit.
class StagingPool {
 public:
  static StagingPool& Get() {
    static StagingPool pool;
    return pool;
  }

  Status acquire(size_t bytes, StagingSlot** out) {
    std::lock_guard<std::mutex> lock(mu_);
    StagingSlot* best = nullptr;
    for (auto& slot : slots_) {
      if (slot->in_use) reclaim(slot.get());
      if (!slot->in_use && slot->memory.size() >= bytes &&
          (best == nullptr || slot->memory.size() < best->memory.size()))
        best = slot.get();
    }
    if (best == nullptr) {
      size_t rounded = size_t{1} << 20;
      while (rounded < bytes) rounded <<= 1;
      auto slot = std::make_unique<StagingSlot>();
      BATON_RETURN_IF_ERROR(slot->memory.allocate(rounded, cudaHostAllocPortable));
      best = slot.get();
      slots_.push_back(std::move(slot));
    }
    best->in_use = true;
    best->sealed = false;
    best->host_done.store(false);
    *out = best;
    return Status::Ok();
  }

  // The launching thread is done; `done` (may be nullptr) completes after
  // the last stream operation on the slot. Takes ownership of the event.
  void seal(StagingSlot* slot, cudaEvent_t done) {
    std::lock_guard<std::mutex> lock(mu_);
    slot->done = done;
    slot->sealed = true;
  }

 private:
  void reclaim(StagingSlot* slot) {
    if (!slot->sealed || !slot->host_done.load(std::memory_order_acquire)) return;
    if (slot->done != nullptr) {
      const cudaError_t err = cudaEventQuery(slot->done);
      if (err == cudaErrorNotReady) return;
      if (err != cudaSuccess) {
        cudaGetLastError();  // a failed stream: keep the slot out of use for good
        return;
      }
      cudaEventDestroy(slot->done);
      slot->done = nullptr;
    }
    slot->in_use = false;
  }

  std::mutex mu_;
  std::vector<std::unique_ptr<StagingSlot>> slots_;
};

// Per communicator: the worker that runs the host sides of its device calls
// in call order, and the mapped flag through which the worker tells the
// streams how far it has got.
class DeviceChannel {
 public:
  Status init() {
    BATON_RETURN_IF_ERROR(
        flag_memory_.allocate(sizeof(uint32_t), cudaHostAllocMapped | cudaHostAllocPortable));
    flag_ = reinterpret_cast<uint32_t*>(flag_memory_.data());
    std::atomic_ref<uint32_t>(*flag_).store(0);
    void* device_ptr = nullptr;
    if (cudaError_t err = cudaHostGetDevicePointer(&device_ptr, flag_memory_.data(), 0);
        err != cudaSuccess)
      return CudaErrorStatus(err, "cudaHostGetDevicePointer(flag)");
    device_flag_ = static_cast<const volatile uint32_t*>(device_ptr);
    return Status::Ok();
  }

  HostStream& worker() { return worker_; }
  CudaIpcContext& ipc() { return ipc_; }
  std::mutex& launch_mutex() { return launch_mu_; }
  uint32_t nextSequence() { return ++issued_; }  // under launch_mutex()
  const volatile uint32_t* deviceFlag() const { return device_flag_; }
  // Release: the staged result written before is visible to the stream's copy.
  void publish(uint32_t seq) {
    std::atomic_ref<uint32_t>(*flag_).store(seq, std::memory_order_release);
  }

 private:
  PinnedMemory flag_memory_;
  uint32_t* flag_ = nullptr;  // host view of the pinned word
  const volatile uint32_t* device_flag_ = nullptr;
  std::mutex launch_mu_;
  uint32_t issued_ = 0;
  CudaIpcContext ipc_;
  HostStream worker_;  // last: destroyed first, draining tasks that use the flag and ipc_
};

// Channels by communicator. An entry lives until its communicator is gone
// (checked whenever a channel is looked up).
class ChannelRegistry {
 public:
  static ChannelRegistry& Get() {
    static ChannelRegistry registry;
    return registry;
  }

  Status get(const std::shared_ptr<Communicator>& comm, DeviceChannel** out) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = channels_.begin(); it != channels_.end();) {
      if (it->second.comm.expired() && it->first != comm.get())
        it = channels_.erase(it);
      else
        ++it;
    }
    auto it = channels_.find(comm.get());
    if (it != channels_.end() && it->second.comm.lock() == comm) {
      *out = it->second.channel.get();
      return Status::Ok();
    }
    Entry entry;
    entry.comm = comm;
    entry.channel = std::make_unique<DeviceChannel>();
    BATON_RETURN_IF_ERROR(entry.channel->init());
    *out = entry.channel.get();
    channels_[comm.get()] = std::move(entry);
    return Status::Ok();
  }

  // The channel of comm if one exists (nullptr otherwise).
  DeviceChannel* find(const std::shared_ptr<Communicator>& comm) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = channels_.find(comm.get());
    if (it == channels_.end() || it->second.comm.lock() != comm) return nullptr;
    return it->second.channel.get();
  }

 private:
  struct Entry {
    std::weak_ptr<Communicator> comm;
    std::unique_ptr<DeviceChannel> channel;
  };
  std::mutex mu_;
  std::map<Communicator*, Entry> channels_;
};

// Where a buffer lives, from cudaPointerGetAttributes.
struct Placement {
  bool device = false;
  int device_id = -1;
};

Placement Locate(const void* p) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError();  // not a pointer CUDA knows: plain host memory
    return {};
  }
  // Managed memory is host-accessible: the host path reads it directly.
  if (attr.type == cudaMemoryTypeDevice) return {true, attr.device};
  return {};
}

// Host addresses standing in for the user's buffers inside one slot. When
// the two ranges overlap (in place) one staged region covers both, at the
// same relative offsets.
struct StagedLayout {
  size_t bytes = 0;
  size_t send_offset = 0;
  size_t recv_offset = 0;
};

StagedLayout LayoutFor(const CudaCallBuffers& b) {
  StagedLayout l;
  const auto s0 = reinterpret_cast<uintptr_t>(b.send), s1 = s0 + b.send_bytes;
  const auto r0 = reinterpret_cast<uintptr_t>(b.recv), r1 = r0 + b.recv_bytes;
  if (b.send_bytes > 0 && b.recv_bytes > 0 && s0 < r1 && r0 < s1) {
    const uintptr_t lo = std::min(s0, r0);
    l.bytes = std::max(s1, r1) - lo;
    l.send_offset = s0 - lo;
    l.recv_offset = r0 - lo;
  } else {
    l.send_offset = 0;
    l.recv_offset = (b.send_bytes + 255) & ~size_t{255};
    l.bytes = l.recv_offset + b.recv_bytes;
  }
  return l;
}

// The parts of one staged launch (one call, or the device calls of one
// communicator in a group) laid out one after the other in one staging slot,
// each part's region 256-byte aligned.
class StagedParts {
 public:
  explicit StagedParts(std::vector<StagedPart> parts) {
    size_t offset = 0;
    for (auto& part : parts) {
      Entry e;
      e.layout = LayoutFor(part.buffers);
      e.offset = offset;
      e.part = std::move(part);
      offset += (e.layout.bytes + 255) & ~size_t{255};
      entries_.push_back(std::move(e));
    }
    bytes_ = offset;
  }

  size_t bytes() const { return bytes_; }

  // Places the parts at `base` (a slot of at least bytes()).
  void bind(uint8_t* base) {
    for (Entry& e : entries_) {
      const CudaCallBuffers& b = e.part.buffers;
      e.send = b.send_bytes ? base + e.offset + e.layout.send_offset : nullptr;
      e.recv = b.recv_bytes ? base + e.offset + e.layout.recv_offset : nullptr;
    }
  }

  // Queues or runs the copies in (device -> staged) or out (staged ->
  // device) through copy(dst, src, bytes, kind, what); stops at the first
  // failure.
  template <typename Copy>
  Status copyInputs(const Copy& copy) const {
    for (const Entry& e : entries_)
      if (e.send != nullptr)
        BATON_RETURN_IF_ERROR(copy(e.send, e.part.buffers.send, e.part.buffers.send_bytes,
                                   cudaMemcpyDeviceToHost, "device input -> pinned staging"));
    return Status::Ok();
  }
  template <typename Copy>
  Status copyOutputs(const Copy& copy) const {
    for (const Entry& e : entries_)
      if (e.recv != nullptr)
        BATON_RETURN_IF_ERROR(copy(e.part.buffers.recv, e.recv, e.part.buffers.recv_bytes,
                                   cudaMemcpyHostToDevice, "pinned staging -> device output"));
    return Status::Ok();
  }

  // The host schedule of all parts on the staged buffers; a group's parts
  // merge into one schedule, as host calls in a group do.
  void build(Schedule* s) const {
    if (entries_.size() == 1) return entries_[0].part.build(entries_[0].send, entries_[0].recv, s);
    for (const Entry& e : entries_) {
      Schedule part;
      e.part.build(e.send, e.recv, &part);
      s->append(std::move(part));
    }
  }

 private:
  struct Entry {
    StagedPart part;
    StagedLayout layout;
    size_t offset = 0;
    uint8_t* send = nullptr;
    uint8_t* recv = nullptr;
  };
  std::vector<Entry> entries_;
  size_t bytes_ = 0;
};

// Device calls on a NULL stream: synchronous, on the calling thread, after
// the communicator's queued device calls (so call order is kept).
Status RunSynchronous(const std::shared_ptr<Communicator>& comm, std::vector<StagedPart> parts) {
  if (DeviceChannel* channel = ChannelRegistry::Get().find(comm)) {
    Status earlier = channel->worker().synchronize();  // already reported as async errors
    (void)earlier;
  }
  StagedParts staged(std::move(parts));
  StagingSlot* slot = nullptr;
  BATON_RETURN_IF_ERROR(StagingPool::Get().acquire(std::max<size_t>(staged.bytes(), 1), &slot));
  staged.bind(slot->memory.data());
  // cudaMemcpy on the legacy default stream waits for earlier work on every
  // blocking stream of the device, as a synchronous call should.
  auto copy = [](void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                 const char* what) -> Status {
    if (cudaError_t err = cudaMemcpy(dst, src, bytes, kind); err != cudaSuccess)
      return CudaErrorStatus(err, std::string("cudaMemcpy(") + what + ")");
    return Status::Ok();
  };
  Status st = staged.copyInputs(copy);
  if (st.ok()) st = comm->run([&staged](Schedule* s) { staged.build(s); });
  if (st.ok()) st = staged.copyOutputs(copy);
  slot->host_done.store(true, std::memory_order_release);
  StagingPool::Get().seal(slot, nullptr);
  return st;
}

// Records a fresh event on `stream` into *event.
Status RecordEvent(cudaStream_t stream, cudaEvent_t* event, const char* what) {
  if (cudaError_t err = cudaEventCreateWithFlags(event, cudaEventDisableTiming);
      err != cudaSuccess) {
    *event = nullptr;
    return CudaErrorStatus(err, std::string("cudaEventCreate(") + what + ")");
  }
  if (cudaError_t err = cudaEventRecord(*event, stream); err != cudaSuccess) {
    cudaEventDestroy(*event);
    *event = nullptr;
    return CudaErrorStatus(err, std::string("cudaEventRecord(") + what + ")");
  }
  return Status::Ok();
}

// Device calls on a cudaStream_t: queued, stream-ordered (see the top).
Status RunOnStream(const std::shared_ptr<Communicator>& comm, cudaStream_t stream, int device,
                   std::vector<StagedPart> parts) {
  DeviceChannel* channel = nullptr;
  BATON_RETURN_IF_ERROR(ChannelRegistry::Get().get(comm, &channel));
  auto staged = std::make_shared<StagedParts>(std::move(parts));
  StagingSlot* slot = nullptr;
  BATON_RETURN_IF_ERROR(StagingPool::Get().acquire(std::max<size_t>(staged->bytes(), 1), &slot));
  staged->bind(slot->memory.data());
  const double timeout_s = TimeoutSeconds();
  auto copy_async = [stream](void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                             const char* what) -> Status {
    if (cudaError_t err = cudaMemcpyAsync(dst, src, bytes, kind, stream); err != cudaSuccess)
      return CudaErrorStatus(err, std::string("cudaMemcpyAsync(") + what + ")");
    return Status::Ok();
  };

  // Until the host task is queued, a failure leaves nothing behind but the
  // slot (sealed with whatever event covers the copies already queued).
  cudaEvent_t input_ready = nullptr;
  Status st = staged->copyInputs(copy_async);
  if (st.ok()) st = RecordEvent(stream, &input_ready, "input staged");
  if (!st.ok()) {
    slot->host_done.store(true);
    cudaEvent_t fence = nullptr;
    if (!RecordEvent(stream, &fence, "staging fence").ok()) return st;  // slot stays in use
    StagingPool::Get().seal(slot, fence);
    return st;
  }

  std::lock_guard<std::mutex> order(channel->launch_mutex());
  const uint32_t seq = channel->nextSequence();
  comm->addPending();
  channel->worker().enqueue([comm, channel, slot, seq, device, input_ready, timeout_s, staged]() {
    Status result;
    if (device >= 0) cudaSetDevice(device);  // this thread's current device
    result = WaitCudaEvent(input_ready, timeout_s, "device input copy");
    cudaEventDestroy(input_ready);
    if (result.ok()) {
      result = comm->run([&staged](Schedule* s) { staged->build(s); });
    } else {
      // This rank cannot take part: stop the communicator so the peers get
      // an error instead of waiting for it until their own timeout.
      comm->abort();
    }
    if (!result.ok()) comm->setLastError("device call (cudaStream_t): " + result.message());
    slot->host_done.store(true, std::memory_order_release);
    channel->publish(seq);  // also on failure: the stream must go on
    comm->removePending();
    return result;
  });

  // The stream waits for the host side, then copies the results back. The
  // kernel's own timeout covers the input wait plus the collective.
  const uint64_t kernel_timeout_ns = static_cast<uint64_t>((2 * timeout_s + 30) * 1e9);
  st = launchWaitFlagKernel(channel->deviceFlag(), seq, kernel_timeout_ns, stream);
  if (st.ok()) st = staged->copyOutputs(copy_async);
  cudaEvent_t output_done = nullptr;
  if (Status ev = RecordEvent(stream, &output_done, "output copied"); !ev.ok()) {
    if (st.ok()) st = ev;
    return st;  // no event covers the slot's last copy: it stays out of use
  }
  StagingPool::Get().seal(slot, output_done);
  return st;
}

// The staged way, run entirely on the calling thread on the IPC context's
// non-blocking stream: the fallback of an IPC call on the device worker,
// where the user's stream is already waiting for this call's completion
// flag (so neither it nor the legacy default stream may be used).
Status RunStagedHere(const std::shared_ptr<Communicator>& comm, DeviceChannel* channel, int device,
                     const StagedPart& part, double timeout_s) {
  cudaStream_t s = nullptr;
  BATON_RETURN_IF_ERROR(channel->ipc().workStream(device, &s));
  StagedParts staged({part});
  StagingSlot* slot = nullptr;
  BATON_RETURN_IF_ERROR(StagingPool::Get().acquire(std::max<size_t>(staged.bytes(), 1), &slot));
  staged.bind(slot->memory.data());
  cudaEvent_t copied = nullptr;
  // `copied` completes after the stream's last use of the slot, so the slot
  // can go back to the pool with it whatever happens below.
  auto copy_and_wait = [&](void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                           const char* what) -> Status {
    if (cudaError_t err = cudaMemcpyAsync(dst, src, bytes, kind, s); err != cudaSuccess)
      return CudaErrorStatus(err, std::string("cudaMemcpyAsync(") + what + ")");
    if (copied == nullptr) {
      BATON_RETURN_IF_ERROR(RecordEvent(s, &copied, what));
    } else if (cudaError_t err = cudaEventRecord(copied, s); err != cudaSuccess) {
      return CudaErrorStatus(err, what);
    }
    return WaitCudaEvent(copied, timeout_s, what);
  };
  Status st = staged.copyInputs(copy_and_wait);
  if (st.ok()) st = comm->run([&staged](Schedule* sched) { staged.build(sched); });
  if (st.ok()) st = staged.copyOutputs(copy_and_wait);
  slot->host_done.store(true, std::memory_order_release);
  StagingPool::Get().seal(slot, copied);
  return st;
}

CudaIpcCall MakeIpcCall(const IpcCall& call, const CudaCallBuffers& b) {
  CudaIpcCall c;
  c.call = call;
  if (b.send_bytes > 0) {
    c.send = b.send;
    c.send_bytes = b.send_bytes;
  }
  if (b.recv_bytes > 0) {
    c.recv = b.recv;
    c.recv_bytes = b.recv_bytes;
  }
  return c;
}

// A collective on device buffers of one host, on a cudaStream_t: the device
// worker runs it through CUDA IPC (or, where the ranks agree IPC cannot
// serve it, staged) once the stream has produced the input; the stream
// waits for the worker's flag as on the staged path.
Status RunIpcOnStream(const std::shared_ptr<Communicator>& comm, cudaStream_t stream, int device,
                      StagedPart part, const IpcCall& call) {
  DeviceChannel* channel = nullptr;
  BATON_RETURN_IF_ERROR(ChannelRegistry::Get().get(comm, &channel));
  const double timeout_s = TimeoutSeconds();
  cudaEvent_t input_ready = nullptr;
  BATON_RETURN_IF_ERROR(RecordEvent(stream, &input_ready, "input ready"));

  std::lock_guard<std::mutex> order(channel->launch_mutex());
  const uint32_t seq = channel->nextSequence();
  comm->addPending();
  const CudaIpcCall ipc_call = MakeIpcCall(call, part.buffers);
  channel->worker().enqueue(
      [comm, channel, seq, device, input_ready, timeout_s, ipc_call, part = std::move(part)]() {
        if (device >= 0) cudaSetDevice(device);
        Status result = WaitCudaEvent(input_ready, timeout_s, "device input");
        cudaEventDestroy(input_ready);
        if (!result.ok()) {
          comm->abort();  // see RunOnStream
        } else {
          CudaIpcOutcome outcome = CudaIpcOutcome::kDone;
          result = channel->ipc().run(comm, ipc_call, timeout_s, &outcome);
          if (result.ok() && outcome == CudaIpcOutcome::kFallback)
            result = RunStagedHere(comm, channel, device, part, timeout_s);
        }
        if (!result.ok()) comm->setLastError("device call (cudaStream_t): " + result.message());
        channel->publish(seq);  // also on failure: the stream must go on
        comm->removePending();
        return result;
      });
  const uint64_t kernel_timeout_ns = static_cast<uint64_t>((2 * timeout_s + 30) * 1e9);
  return launchWaitFlagKernel(channel->deviceFlag(), seq, kernel_timeout_ns, stream);
}

// The same with a NULL stream: synchronous, on the calling thread, after the
// communicator's queued device calls and after all earlier work of blocking
// streams (an event on the legacy default stream).
Status RunIpcSynchronous(const std::shared_ptr<Communicator>& comm, StagedPart part,
                         const IpcCall& call) {
  DeviceChannel* channel = nullptr;
  BATON_RETURN_IF_ERROR(ChannelRegistry::Get().get(comm, &channel));
  Status earlier = channel->worker().synchronize();  // already reported as async errors
  (void)earlier;
  const double timeout_s = TimeoutSeconds();
  cudaEvent_t input_ready = nullptr;
  BATON_RETURN_IF_ERROR(RecordEvent(cudaStreamLegacy, &input_ready, "input ready"));
  Status st = WaitCudaEvent(input_ready, timeout_s, "device input");
  cudaEventDestroy(input_ready);
  if (!st.ok()) {
    comm->abort();
    return st;
  }
  CudaIpcOutcome outcome = CudaIpcOutcome::kDone;
  BATON_RETURN_IF_ERROR(
      channel->ipc().run(comm, MakeIpcCall(call, part.buffers), timeout_s, &outcome));
  if (outcome == CudaIpcOutcome::kFallback) return RunSynchronous(comm, {std::move(part)});
  return Status::Ok();
}

}  // namespace

bool CudaDeviceAvailable() {
  static const bool available = [] {
    if (GetEnvInt("BATON_CUDA", 1) == 0) return false;
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
      cudaGetLastError();
      BATON_INFO(kLogInit, "no CUDA device path: cudaGetDeviceCount: %s", cudaGetErrorString(err));
      return false;
    }
    BATON_INFO(kLogInit, "%d CUDA device(s): device buffers are staged through pinned memory",
               count);
    return count > 0;
  }();
  return available;
}

CudaCallBuffers CudaBuffersFor(Collective collective, const void* send, void* recv, size_t count,
                               size_t elem_size, int nranks, int rank, int root) {
  const size_t one = count * elem_size, all = one * static_cast<size_t>(nranks);
  switch (collective) {
    case Collective::kAllReduce:
      return {send, one, recv, one};
    case Collective::kBroadcast:
      return {send, rank == root ? one : 0, recv, one};
    case Collective::kReduce:
      return {send, one, recv, rank == root ? one : 0};
    case Collective::kAllGather:
      return {send, one, recv, all};
    case Collective::kReduceScatter:
      return {send, all, recv, one};
    case Collective::kAlltoAll:
      return {send, all, recv, all};
  }
  return {};
}

CudaRoute CudaTryLaunch(const std::shared_ptr<Communicator>& comm, batonStream_t stream,
                        bool host_stream, bool in_group, const CudaCallBuffers& buffers,
                        const StagedBuilder& build, const IpcCall* ipc, Status* status) {
  const bool cuda_stream = stream != nullptr && !host_stream;
  Placement send, recv;
  if (buffers.send_bytes > 0) send = Locate(buffers.send);
  if (buffers.recv_bytes > 0) recv = Locate(buffers.recv);
  const bool any_device = send.device || recv.device;
  if (!any_device && !cuda_stream) return CudaRoute::kHost;  // the host path, unchanged

  *status = Status::Ok();
  if ((buffers.send_bytes > 0 && buffers.recv_bytes > 0 && send.device != recv.device) ||
      (send.device && recv.device && send.device_id != recv.device_id)) {
    *status = InvalidArgument(
        "sendbuff and recvbuff must both be host memory or both device memory of one GPU "
        "(sendbuff on " +
        (send.device ? "device " + std::to_string(send.device_id) : std::string("host")) +
        ", recvbuff on " +
        (recv.device ? "device " + std::to_string(recv.device_id) : std::string("host")) + ")");
  } else if (!any_device && (buffers.send_bytes > 0 || buffers.recv_bytes > 0)) {
    *status = InvalidArgument(
        "stream is neither a live batonStream_t nor usable as a cudaStream_t here: a "
        "cudaStream_t needs CUDA device buffers (host buffers take NULL or a batonStream_t)");
  } else if (host_stream) {
    *status = InvalidArgument(
        "device buffers need a cudaStream_t (or NULL) as the stream, not a Baton host stream");
  }
  if (!status->ok()) return CudaRoute::kDone;
  if (in_group) return CudaRoute::kQueue;

  int device = send.device ? send.device_id : recv.device_id;
  if (device < 0 && cudaGetDevice(&device) != cudaSuccess) device = -1;  // no buffers: current
  DeviceGuard guard(device);
  if (guard.status() != cudaSuccess) {
    *status = CudaErrorStatus(guard.status(), "cudaSetDevice(" + std::to_string(device) + ")");
    return CudaRoute::kDone;
  }
  StagedPart part{buffers, build};
  if (ipc != nullptr && any_device && CudaIpcEnabled(*comm)) {
    *status = cuda_stream ? RunIpcOnStream(comm, reinterpret_cast<cudaStream_t>(stream), device,
                                           std::move(part), *ipc)
                          : RunIpcSynchronous(comm, std::move(part), *ipc);
    return CudaRoute::kDone;
  }
  *status = cuda_stream ? RunOnStream(comm, reinterpret_cast<cudaStream_t>(stream), device,
                                      {std::move(part)})
                        : RunSynchronous(comm, {std::move(part)});
  return CudaRoute::kDone;
}

Status CudaLaunchGroup(const std::shared_ptr<Communicator>& comm, batonStream_t stream,
                       std::vector<StagedPart> parts) {
  int device = -1;
  for (const StagedPart& part : parts) {
    for (const void* p :
         {part.buffers.send_bytes ? part.buffers.send : nullptr,
          part.buffers.recv_bytes ? static_cast<const void*>(part.buffers.recv) : nullptr}) {
      if (p == nullptr) continue;
      const Placement where = Locate(p);
      if (!where.device) return InternalError("a host buffer among a group's device calls");
      if (device >= 0 && where.device_id != device)
        return InvalidArgument(
            "the device calls of one communicator in a group use buffers on "
            "devices " +
            std::to_string(device) + " and " + std::to_string(where.device_id) +
            "; they must share one GPU");
      device = where.device_id;
    }
  }
  if (device < 0 && cudaGetDevice(&device) != cudaSuccess) device = -1;
  DeviceGuard guard(device);
  if (guard.status() != cudaSuccess)
    return CudaErrorStatus(guard.status(), "cudaSetDevice(" + std::to_string(device) + ")");
  return stream != nullptr
             ? RunOnStream(comm, reinterpret_cast<cudaStream_t>(stream), device, std::move(parts))
             : RunSynchronous(comm, std::move(parts));
}

}  // namespace baton
