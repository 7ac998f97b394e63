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
#include "cuda/cuda_device.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <vector>

#include "base/log.h"
#include "base/settings.h"
#include "cuda/cuda_ipc.h"
#include "cuda/cuda_util.h"
#include "cuda/device_channel.h"
#include "cuda/ipc_bounce.h"
#include "cuda/staging.h"
#include "kernels/cuda/cuda_kernels.h"

namespace baton {
namespace {

// A rank whose device call fails before its host side runs (a staging copy,
// the pinned pool) never joins the collective its peers are in: stop the
// communicator so they fail now with this reason, instead of waiting for it
// or meeting its next call in this one's place.
Status LeaveCall(const std::shared_ptr<Communicator>& comm, Status st) {
  comm->Abort(st.message());
  return st;
}

// Device calls on a NULL stream: synchronous, on the calling thread, after
// the communicator's queued device calls (so call order is kept).
Status RunSynchronous(const std::shared_ptr<Communicator>& comm, std::vector<StagedPart> parts) {
  if (DeviceChannel* channel = ChannelRegistry::Get().Find(comm)) channel->Drain();
  StagedParts staged(std::move(parts));
  StagingSlot* slot = nullptr;
  if (Status st = StagingPool::Get().Acquire(std::max<size_t>(staged.bytes(), 1), &slot); !st.ok())
    return LeaveCall(comm, std::move(st));
  staged.Bind(slot->memory.data());
  // cudaMemcpy on the legacy default stream waits for earlier work on every
  // blocking stream of the device, as a synchronous call should.
  auto copy = [](void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                 const char* what) -> Status {
    if (cudaError_t err = cudaMemcpy(dst, src, bytes, kind); err != cudaSuccess)
      return CudaErrorStatus(err, std::string("cudaMemcpy(") + what + ")");
    return Status::Ok();
  };
  Status st = staged.CopyInputs(copy);
  if (!st.ok()) {
    st = LeaveCall(comm, std::move(st));
  } else {
    st = comm->Run([&staged](Schedule* s) { staged.Build(s); });
    if (st.ok()) st = staged.CopyOutputs(copy);
  }
  slot->host_done.store(true, std::memory_order_release);
  StagingPool::Get().Seal(slot, nullptr);
  return st;
}

// Device calls on a cudaStream_t: queued, stream-ordered (see the top).
Status RunOnStream(const std::shared_ptr<Communicator>& comm, cudaStream_t stream, int device,
                   std::vector<StagedPart> parts) {
  DeviceChannel* channel = nullptr;
  BATON_RETURN_IF_ERROR(ChannelRegistry::Get().GetOrCreate(comm, &channel));
  auto staged = std::make_shared<StagedParts>(std::move(parts));
  StagingSlot* slot = nullptr;
  if (Status st = StagingPool::Get().Acquire(std::max<size_t>(staged->bytes(), 1), &slot); !st.ok())
    return LeaveCall(comm, std::move(st));
  staged->Bind(slot->memory.data());
  const double timeout_s = comm->config().timeout_s;
  auto copy_async = [stream](void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                             const char* what) -> Status {
    if (cudaError_t err = cudaMemcpyAsync(dst, src, bytes, kind, stream); err != cudaSuccess)
      return CudaErrorStatus(err, std::string("cudaMemcpyAsync(") + what + ")");
    return Status::Ok();
  };

  // Until the host task is queued, a failure leaves nothing behind but the
  // slot (sealed with whatever event covers the copies already queued).
  cudaEvent_t input_ready = nullptr;
  Status st = staged->CopyInputs(copy_async);
  if (st.ok()) st = RecordEvent(stream, &input_ready, "input staged");
  if (!st.ok()) {
    slot->host_done.store(true);
    cudaEvent_t fence = nullptr;
    // Without a fence the slot stays in use: no event covers the copies queued.
    if (RecordEvent(stream, &fence, "staging fence").ok()) StagingPool::Get().Seal(slot, fence);
    return LeaveCall(comm, std::move(st));
  }

  std::lock_guard<std::mutex> order(channel->launch_mutex());
  const uint32_t seq = channel->NextSequence();
  comm->AddPending();
  channel->worker().Enqueue([comm, channel, slot, seq, device, input_ready, timeout_s, staged]() {
    Status result;
    CallSplits splits;
    if (device >= 0) cudaSetDevice(device);  // this thread's current device
    result = WaitCudaEvent(input_ready, timeout_s, "device input copy", comm->spin_policy());
    cudaEventDestroy(input_ready);
    splits.Mark("input wait");
    if (result.ok()) {
      result = comm->Run([&staged](Schedule* s) { staged->Build(s); });
      splits.Mark("host collective");
      splits.Report("staged call on a stream");
    } else {
      // This rank cannot take part: stop the communicator so the peers get
      // an error instead of waiting for it until their own timeout.
      comm->Abort(result.message());
    }
    if (!result.ok()) comm->set_last_error("device call (cudaStream_t): " + result.message());
    slot->host_done.store(true, std::memory_order_release);
    channel->Publish(seq);  // also on failure: the stream must go on
    comm->RemovePending();
    return result;
  });

  // The stream waits for the host side, then copies the results back. The
  // kernel's own timeout covers the input wait plus the collective.
  const uint64_t kernel_timeout_ns = static_cast<uint64_t>((2 * timeout_s + 30) * 1e9);
  st = StreamWaitFlag(channel->device_flag(), seq, kernel_timeout_ns, stream);
  if (st.ok()) st = staged->CopyOutputs(copy_async);
  cudaEvent_t output_done = nullptr;
  if (Status ev = RecordEvent(stream, &output_done, "output copied"); !ev.ok()) {
    if (st.ok()) st = ev;
    return st;  // no event covers the slot's last copy: it stays out of use
  }
  StagingPool::Get().Seal(slot, output_done);
  return st;
}

// The staged way, run entirely on the calling thread on the IPC context's
// non-blocking stream: the fallback of an IPC call on the device worker,
// where the user's stream is already waiting for this call's completion
// flag (so neither it nor the legacy default stream may be used).
Status RunStagedHere(const std::shared_ptr<Communicator>& comm, DeviceChannel* channel, int device,
                     const StagedPart& part, double timeout_s) {
  cudaStream_t s = nullptr;
  if (Status st = channel->ipc().WorkStream(device, &s); !st.ok()) return LeaveCall(comm, st);
  StagedParts staged({part});
  StagingSlot* slot = nullptr;
  if (Status st = StagingPool::Get().Acquire(std::max<size_t>(staged.bytes(), 1), &slot); !st.ok())
    return LeaveCall(comm, std::move(st));
  staged.Bind(slot->memory.data());
  cudaEvent_t copied = nullptr;
  // `copied` completes after the stream's last use of the slot, so the slot
  // can go back to the pool with it whatever happens below.
  // The copies are kernels, not cudaMemcpyAsync: the user's stream already
  // waits for this call's flag, and under MPS a copy queued after that wait
  // waited for it (the trainer's first staged call, docs/cuda.md), while
  // kernels on this stream ran. The pinned slot is mapped (the same address
  // on the device under unified addressing).
  auto copy_and_wait = [&](void* dst, const void* src, size_t bytes, cudaMemcpyKind,
                           const char* what) -> Status {
    BATON_RETURN_IF_ERROR(LaunchCopyKernel(dst, src, bytes, s));
    if (copied == nullptr) {
      BATON_RETURN_IF_ERROR(RecordEvent(s, &copied, what));
    } else if (cudaError_t err = cudaEventRecord(copied, s); err != cudaSuccess) {
      return CudaErrorStatus(err, what);
    }
    return WaitCudaEvent(copied, timeout_s, what, comm->spin_policy());
  };
  Status st = staged.CopyInputs(copy_and_wait);
  if (!st.ok()) {
    st = LeaveCall(comm, std::move(st));
  } else {
    st = comm->Run([&staged](Schedule* sched) { staged.Build(sched); });
    if (st.ok()) st = staged.CopyOutputs(copy_and_wait);
  }
  slot->host_done.store(true, std::memory_order_release);
  StagingPool::Get().Seal(slot, copied);
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
  BATON_RETURN_IF_ERROR(ChannelRegistry::Get().GetOrCreate(comm, &channel));
  const double timeout_s = comm->config().timeout_s;
  std::lock_guard<std::mutex> order(channel->launch_mutex());
  // Buffers IPC cannot share go through scratch, copied in stream order
  // before the wait (ipc_bounce.h), so no rank falls back for them.
  IpcBounceBack back;
  if (Status st = channel->bounce().BounceIn(stream, device, &part.buffers, &back); !st.ok())
    return LeaveCall(comm, std::move(st));
  cudaEvent_t input_ready = nullptr;
  if (Status st = RecordEvent(stream, &input_ready, "input ready"); !st.ok())
    return LeaveCall(comm, std::move(st));

  const uint32_t seq = channel->NextSequence();
  comm->AddPending();
  const CudaIpcCall ipc_call = MakeIpcCall(call, part.buffers);
  channel->worker().Enqueue([comm, channel, seq, device, input_ready, timeout_s, ipc_call,
                             part = std::move(part)]() {
    if (device >= 0) cudaSetDevice(device);
    CallSplits splits;
    Status result = WaitCudaEvent(input_ready, timeout_s, "device input", comm->spin_policy());
    cudaEventDestroy(input_ready);
    splits.Mark("input wait");
    splits.Report("CUDA IPC call on a stream");
    if (!result.ok()) {
      comm->Abort(result.message());  // see RunOnStream
    } else {
      CudaIpcOutcome outcome = CudaIpcOutcome::kDone;
      result = channel->ipc().Run(comm, ipc_call, timeout_s, &outcome);
      if (result.ok() && outcome == CudaIpcOutcome::kFallback)
        result = RunStagedHere(comm, channel, device, part, timeout_s);
    }
    if (!result.ok()) comm->set_last_error("device call (cudaStream_t): " + result.message());
    channel->Publish(seq);  // also on failure: the stream must go on
    comm->RemovePending();
    return result;
  });
  const uint64_t kernel_timeout_ns = static_cast<uint64_t>((2 * timeout_s + 30) * 1e9);
  Status st = StreamWaitFlag(channel->device_flag(), seq, kernel_timeout_ns, stream);
  if (st.ok()) st = back.Queue(stream);
  return st;
}

// The same with a NULL stream: synchronous, on the calling thread, after the
// communicator's queued device calls and after all earlier work of blocking
// streams (an event on the legacy default stream).
Status RunIpcSynchronous(const std::shared_ptr<Communicator>& comm, StagedPart part,
                         const IpcCall& call) {
  DeviceChannel* channel = nullptr;
  BATON_RETURN_IF_ERROR(ChannelRegistry::Get().GetOrCreate(comm, &channel));
  channel->Drain();
  const double timeout_s = comm->config().timeout_s;
  cudaEvent_t input_ready = nullptr;
  BATON_RETURN_IF_ERROR(RecordEvent(cudaStreamLegacy, &input_ready, "input ready"));
  Status st = WaitCudaEvent(input_ready, timeout_s, "device input", comm->spin_policy());
  cudaEventDestroy(input_ready);
  if (!st.ok()) {
    comm->Abort(st.message());
    return st;
  }
  CudaIpcOutcome outcome = CudaIpcOutcome::kDone;
  BATON_RETURN_IF_ERROR(
      channel->ipc().Run(comm, MakeIpcCall(call, part.buffers), timeout_s, &outcome));
  if (outcome == CudaIpcOutcome::kFallback) return RunSynchronous(comm, {std::move(part)});
  return Status::Ok();
}

}  // namespace

Status ReadScalarAtCall(const void* ptr, void* out, size_t bytes) {
  if (!CudaDeviceAvailable() || !Locate(ptr).device) {
    memcpy(out, ptr, bytes);
    return Status::Ok();
  }
  // The per-thread stream: a copy on the legacy default stream would wait
  // for the user's stream, which may be held by our own wait kernel.
  if (cudaError_t err = cudaMemcpyAsync(out, ptr, bytes, cudaMemcpyDefault, cudaStreamPerThread);
      err != cudaSuccess)
    return CudaErrorStatus(err, "reading a PreMulSum scalar from device memory");
  if (cudaError_t err = cudaStreamSynchronize(cudaStreamPerThread); err != cudaSuccess)
    return CudaErrorStatus(err, "reading a PreMulSum scalar from device memory");
  return Status::Ok();
}

namespace {

// Whether this thread has a CUDA context current: the rank chose its GPU
// (cudaSetDevice makes the device's primary context current from CUDA 12
// on, and any allocation or launch does), rather than merely running in a
// process that sees one. The runtime has no query that would not create
// the context it asks about, so the driver's cuCtxGetCurrent is taken from
// the libcuda the runtime loaded (RTLD_NOLOAD: never a second copy).
bool CudaContextCurrent() {
  using CtxGetCurrent = int (*)(void**);
  static const CtxGetCurrent get = [] {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    return lib != nullptr ? reinterpret_cast<CtxGetCurrent>(dlsym(lib, "cuCtxGetCurrent"))
                          : nullptr;
  }();
  void* ctx = nullptr;
  return get != nullptr && get(&ctx) == 0 && ctx != nullptr;
}

}  // namespace

std::string CudaCurrentDevicePciBusId() {
  if (!CudaDeviceAvailable() || !CudaContextCurrent()) return "";
  int device = 0;
  char bus_id[32] = {};
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), device) != cudaSuccess) {
    cudaGetLastError();
    return "";
  }
  return bus_id;
}

bool CudaDeviceAvailable() {
  static const bool available = [] {
    if (!ProcessSettings().cuda) return false;
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
  const bool use_ipc = ipc != nullptr && any_device && CudaIpcEnabled(*comm);
  BATON_TRACE(kLogColl, "device call: %s, %zu + %zu bytes, %s, %s",
              ipc != nullptr ? CollectiveName(ipc->collective) : "not a collective",
              buffers.send_bytes, buffers.recv_bytes, cuda_stream ? "on a stream" : "synchronous",
              use_ipc ? "CUDA IPC" : "staged");
  if (use_ipc) {
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
