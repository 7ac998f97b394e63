// Collectives through CUDA IPC between the GPUs of one host; see cuda_ipc.h.
//
// One call, on every rank (the inputs are ready when it starts):
//   1. describe the call and this rank's buffers in an IpcRecord (IPC
//      handles of the allocations and offsets into them, the raw pointers
//      for ranks of the same process, the GPU's PCI bus id);
//   2. allgather the records over the host transport;
//   3. check that all ranks make the same call (else batonInvalidUsage on
//      every rank) and that IPC can serve it everywhere (handles obtained,
//      no in-place alltoall, every peer's GPU reachable from every rank: the
//      last is agreed once per set of GPUs in an extra one-byte exchange),
//      else every rank falls back to staging;
//   4. map the peers' buffers (cached) and run the plan's phases with the
//      CUDA reduce-copy kernels on a stream of our own, each phase waited
//      for on the host and followed by a barrier.
// The last barrier is what lets the caller publish completion: after it, no
// peer reads this rank's buffers any more.
#include "cuda/cuda_ipc.h"

#include <cuda.h>  // CUdeviceptr and CUresult for cuMemGetAddressRange (no libcuda link)
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "algorithms/ipc_record.h"
#include "base/log.h"
#include "base/settings.h"
#include "cuda/cuda_util.h"
#include "kernels/cuda/cuda_kernels.h"

namespace baton {
namespace {

static_assert(sizeof(cudaIpcMemHandle_t) == sizeof(IpcRecord::send_handle),
              "IpcRecord holds a cudaIpcMemHandle_t");
static_assert(kMaxIpcStepSources <= kMaxReduceSrcs, "an IPC plan step is one reduce-copy kernel");

// cuMemGetAddressRange (the start of the allocation a pointer lies in,
// which is what an IPC handle maps) and cuPointerGetAttribute, from the
// driver (DriverFunction); null where it lacks them.
using GetAddressRangeFn = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);
using PointerAttributeFn = CUresult (*)(void*, CUpointer_attribute, CUdeviceptr);

GetAddressRangeFn AddressRangeFn() {
  static const auto fn =
      reinterpret_cast<GetAddressRangeFn>(DriverFunction("cuMemGetAddressRange"));
  return fn;
}

PointerAttributeFn PointerAttribute() {
  static const auto fn =
      reinterpret_cast<PointerAttributeFn>(DriverFunction("cuPointerGetAttribute"));
  return fn;
}

// What the driver says of the allocation holding `ptr`: 1 when legacy CUDA
// IPC can share it, 0 when not (a stream-ordered pool, VMM memory without an
// IPC handle type), -1 when it cannot be asked.
int LegacyIpcCapable(const void* ptr) {
  PointerAttributeFn attribute = PointerAttribute();
  int capable = 0;
  if (attribute == nullptr || attribute(&capable, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
                                        reinterpret_cast<CUdeviceptr>(ptr)) != CUDA_SUCCESS)
    return -1;
  return capable != 0 ? 1 : 0;
}

// The handle of the allocation holding `ptr` and ptr's offset in it.
Status HandleOf(const void* ptr, char (&handle_bytes)[64], uint64_t* offset) {
  // Asked first: cudaIpcGetMemHandle has been seen to refuse memory from
  // cudaMallocAsync's pools under MPS only, and what it would hand out
  // elsewhere for such memory is not something peers may map.
  if (LegacyIpcCapable(ptr) == 0)
    return InvalidArgument(
        "the buffer's memory cannot be shared through CUDA IPC (a stream-ordered pool, or "
        "VMM memory without an IPC handle type)");
  GetAddressRangeFn range = AddressRangeFn();
  if (range == nullptr) return InternalError("cuMemGetAddressRange is not available");
  CUdeviceptr base = 0;
  size_t size = 0;
  if (CUresult r = range(&base, &size, reinterpret_cast<CUdeviceptr>(ptr)); r != CUDA_SUCCESS)
    return InternalError("cuMemGetAddressRange failed (CUresult " + std::to_string(r) + ")");
  cudaIpcMemHandle_t handle;
  if (cudaError_t err = cudaIpcGetMemHandle(&handle, reinterpret_cast<void*>(base));
      err != cudaSuccess) {
    cudaGetLastError();
    return CudaErrorStatus(err, "cudaIpcGetMemHandle");
  }
  std::memcpy(handle_bytes, &handle, sizeof(handle));
  *offset = reinterpret_cast<uintptr_t>(ptr) - static_cast<uintptr_t>(base);
  return Status::Ok();
}

size_t CacheCapacity() {
  return static_cast<size_t>(std::max<int64_t>(1, ProcessSettings().cuda_ipc_cache));
}

}  // namespace

bool CudaIpcShareable(const void* ptr) {
  // One driver query on the caller's thread; the handle itself is made by
  // the worker (HandleOf), here only where the driver cannot be asked.
  if (const int capable = LegacyIpcCapable(ptr); capable >= 0) return capable == 1;
  char handle[64];
  uint64_t offset = 0;
  return HandleOf(ptr, handle, &offset).ok();
}

bool CudaIpcEnabled(const Communicator& comm) {
  if (comm.nranks() < 2 || !ProcessSettings().cuda_ipc) return false;
  for (int r = 1; r < comm.nranks(); ++r)
    if (comm.peer(r).host_hash != comm.peer(0).host_hash) return false;
  return true;
}

CudaIpcContext::~CudaIpcContext() {
  // Errors here (the runtime unloading at process exit) are moot.
  for (auto& [key, base] : mappings_) cudaIpcCloseMemHandle(base);
  for (auto& [device, s] : streams_) cudaStreamDestroy(s);
}

Status CudaIpcContext::StreamLocked(int device, cudaStream_t* out) {
  auto it = streams_.find(device);
  if (it == streams_.end()) {
    cudaStream_t s = nullptr;
    // Non-blocking: it must never wait for the legacy default stream, or for
    // the user's stream that is itself waiting for this call to finish.
    if (cudaError_t err = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking); err != cudaSuccess)
      return CudaErrorStatus(err, "cudaStreamCreateWithFlags(IPC stream)");
    it = streams_.emplace(device, s).first;
  }
  *out = it->second;
  return Status::Ok();
}

Status CudaIpcContext::WorkStream(int device, cudaStream_t* out) {
  std::lock_guard<std::mutex> lock(mu_);
  return StreamLocked(device, out);
}

void CudaIpcContext::Note(const std::string& line) {
  if (line == last_note_) return;
  last_note_ = line;
  BATON_INFO(kLogColl, "%s", line.c_str());
}

Status CudaIpcContext::MapPeer(int peer, const cudaIpcMemHandle_t& handle, uint8_t** base) {
  MappingKey key{peer, {}};
  std::memcpy(key.second.data(), &handle, sizeof(handle));
  for (auto it = mappings_.begin(); it != mappings_.end(); ++it) {
    if (it->first == key) {
      mappings_.splice(mappings_.begin(), mappings_, it);  // most recently used
      *base = it->second;
      return Status::Ok();
    }
  }
  void* p = nullptr;
  if (cudaError_t err = cudaIpcOpenMemHandle(&p, handle, cudaIpcMemLazyEnablePeerAccess);
      err != cudaSuccess) {
    cudaGetLastError();
    return CudaErrorStatus(err,
                           "cudaIpcOpenMemHandle(buffer of rank " + std::to_string(peer) + ")");
  }
  mappings_.emplace_front(key, static_cast<uint8_t*>(p));
  // A peer that frees a buffer and allocates another gets a new handle, so
  // old mappings are never wrong, only unused: close the least recent.
  while (mappings_.size() > CacheCapacity()) {
    cudaIpcCloseMemHandle(mappings_.back().second);
    mappings_.pop_back();
  }
  *base = static_cast<uint8_t*>(p);
  return Status::Ok();
}

Status CudaIpcContext::Agree(const std::shared_ptr<Communicator>& comm, const std::string& key,
                             bool mine, bool* all) {
  auto it = agreed_.find(key);
  BATON_TRACE(kLogColl, "CUDA IPC reach: %s", it != agreed_.end() ? "known" : "exchanging votes");
  if (it != agreed_.end()) {
    *all = it->second;
    return Status::Ok();
  }
  const int n = comm->nranks();
  std::vector<uint8_t> votes(n);
  const uint8_t vote = mine ? 1 : 0;
  BATON_RETURN_IF_ERROR(comm->AllGatherBytes(&vote, 1, votes.data()));
  *all = std::all_of(votes.begin(), votes.end(), [](uint8_t v) { return v == 1; });
  agreed_[key] = *all;
  return Status::Ok();
}

Status CudaIpcContext::Run(const std::shared_ptr<Communicator>& comm, const CudaIpcCall& c,
                           double timeout_s, CudaIpcOutcome* outcome) {
  std::lock_guard<std::mutex> lock(mu_);
  *outcome = CudaIpcOutcome::kDone;
  CallSplits splits;
  const int n = comm->nranks(), me = comm->rank();
  int device = -1;
  if (cudaError_t err = cudaGetDevice(&device); err != cudaSuccess)
    return CudaErrorStatus(err, "cudaGetDevice");

  // 1. This rank's record.
  IpcRecord mine = MakeIpcRecord(c.call, static_cast<int>(getpid()));
  if (cudaError_t err = cudaDeviceGetPCIBusId(mine.bus_id, sizeof(mine.bus_id), device);
      err != cudaSuccess) {
    cudaGetLastError();
    SetIpcNotReady(&mine, std::string("cudaDeviceGetPCIBusId: ") + cudaGetErrorString(err));
  }
  auto describe_buffer = [&](const void* ptr, size_t bytes, uint32_t has, char(&handle)[64],
                             uint64_t* offset, uint64_t* raw) {
    if (ptr == nullptr || bytes == 0) return;
    mine.flags |= has;
    *raw = reinterpret_cast<uintptr_t>(ptr);
    if (!(mine.flags & kIpcReady)) return;
    // Fails e.g. for memory from cudaMallocAsync pools or VMM without IPC.
    if (Status st = HandleOf(ptr, handle, offset); !st.ok()) SetIpcNotReady(&mine, st.message());
  };
  describe_buffer(c.send, c.send_bytes, kIpcHasSend, mine.send_handle, &mine.send_offset,
                  &mine.send_ptr);
  describe_buffer(c.recv, c.recv_bytes, kIpcHasRecv, mine.recv_handle, &mine.recv_offset,
                  &mine.recv_ptr);
  if (c.call.collective == Collective::kAlltoAll && c.send != nullptr && c.recv != nullptr) {
    const auto s0 = reinterpret_cast<uintptr_t>(c.send), r0 = reinterpret_cast<uintptr_t>(c.recv);
    if (s0 < r0 + c.recv_bytes && r0 < s0 + c.send_bytes)
      SetIpcNotReady(&mine, "in-place alltoall");  // a peer may still read an overwritten block
  }

  // 2. Everyone's records.
  records_.resize(sizeof(IpcRecord) * n);
  BATON_RETURN_IF_ERROR(comm->AllGatherBytes(&mine, sizeof(mine), records_.data()));
  splits.Mark("handles and records");
  std::vector<IpcRecord> all(n);
  std::memcpy(all.data(), records_.data(), records_.size());

  // 3. The same verdict on every rank (they hold the same records).
  const IpcVerdict verdict = JudgeIpcRecords(all);
  BATON_TRACE(kLogColl, "CUDA IPC %s: records exchanged, %s", CollectiveName(c.call.collective),
              verdict.kind == IpcVerdict::Kind::kFallback ? "fallback"
              : verdict.kind == IpcVerdict::Kind::kError  ? "error"
                                                          : "usable");
  if (verdict.kind == IpcVerdict::Kind::kError) return verdict.error;
  if (verdict.kind == IpcVerdict::Kind::kFallback) {
    Note("CUDA IPC not used: " + verdict.reason + "; staging through host memory");
    *outcome = CudaIpcOutcome::kFallback;
    return Status::Ok();
  }
  //    Can this rank reach every peer's GPU? Agreed once per set of GPUs.
  bool reachable = true;
  std::string unreachable;
  for (int q = 0; q < n; ++q) {
    if (q == me) continue;
    int peer_device = -1;
    if (cudaDeviceGetByPCIBusId(&peer_device, all[q].bus_id) != cudaSuccess) {
      cudaGetLastError();
      reachable = false;
      unreachable = std::string("GPU ") + all[q].bus_id + " of rank " + std::to_string(q) +
                    " is not visible here";
      continue;
    }
    if (peer_device == device) continue;
    int can = 0;
    if (cudaDeviceCanAccessPeer(&can, device, peer_device) != cudaSuccess || !can) {
      cudaGetLastError();
      reachable = false;
      unreachable = "no peer access from GPU " + std::string(mine.bus_id) + " to GPU " +
                    all[q].bus_id + " (rank " + std::to_string(q) + ")";
      continue;
    }
    if (all[q].pid == mine.pid) {
      // A rank of this process: its pointers are used directly, which needs
      // peer access enabled on this device once.
      const cudaError_t err = cudaDeviceEnablePeerAccess(peer_device, 0);
      if (err != cudaSuccess && err != cudaErrorPeerAccessAlreadyEnabled) {
        reachable = false;
        unreachable = std::string("cudaDeviceEnablePeerAccess: ") + cudaGetErrorString(err);
      }
      cudaGetLastError();
    }
  }
  bool everyone = false;
  BATON_RETURN_IF_ERROR(Agree(comm, IpcPeerSetKey(all), reachable, &everyone));
  splits.Mark("reach");
  if (!everyone) {
    Note(std::string("CUDA IPC not used on these GPUs: ") +
         (reachable ? "another rank cannot reach a peer's GPU" : unreachable) +
         "; staging through host memory");
    *outcome = CudaIpcOutcome::kFallback;
    return Status::Ok();
  }
  Note("CUDA IPC: " + std::to_string(n) + " ranks on one host read each other's device buffers");

  // 4. Map, then run the plan phase by phase. From here on a failure leaves
  // peers in a barrier: abort so they fail now.
  auto fail = [&](Status st) {
    comm->Abort(st.message());
    return st;
  };
  std::vector<uint8_t*> send_base(n, nullptr), recv_base(n, nullptr);
  auto address = [&](const IpcRef& ref, uint8_t** out) -> Status {
    const IpcRecord& r = all[ref.rank];
    const bool is_send = ref.buffer == IpcBuffer::kSend;
    if (!(r.flags & (is_send ? kIpcHasSend : kIpcHasRecv)))
      return InternalError("IPC plan reads a buffer rank " + std::to_string(ref.rank) +
                           " did not pass");
    uint8_t*& base = (is_send ? send_base : recv_base)[ref.rank];
    if (base == nullptr) {
      if (r.pid == mine.pid) {
        base = reinterpret_cast<uint8_t*>(is_send ? r.send_ptr : r.recv_ptr);
      } else {
        uint8_t* mapped = nullptr;
        cudaIpcMemHandle_t handle;
        std::memcpy(&handle, is_send ? r.send_handle : r.recv_handle, sizeof(handle));
        BATON_RETURN_IF_ERROR(MapPeer(ref.rank, handle, &mapped));
        base = mapped + (is_send ? r.send_offset : r.recv_offset);
      }
    }
    *out = base + ref.offset;
    return Status::Ok();
  };
  cudaStream_t s = nullptr;
  if (Status st = StreamLocked(device, &s); !st.ok()) return fail(st);
  BuildIpcPlan(
      IpcCall{c.call.collective, c.call.count, c.call.datatype, c.call.op, c.call.root, me, n},
      &plan_);
  cudaEvent_t done = nullptr;
  if (cudaError_t err = cudaEventCreateWithFlags(&done, cudaEventDisableTiming); err != cudaSuccess)
    return fail(CudaErrorStatus(err, "cudaEventCreate(IPC phase)"));
  struct EventGuard {
    cudaEvent_t e;
    ~EventGuard() { cudaEventDestroy(e); }
  } guard{done};
  for (const auto& phase : plan_.phases) {
    for (const IpcStep& step : phase) {
      ReduceCopyArgs args;
      args.nsrcs = step.nsrcs;
      for (int k = 0; k < step.nsrcs; ++k) {
        uint8_t* p = nullptr;
        if (Status st = address(step.srcs[k], &p); !st.ok()) return fail(st);
        args.srcs[k] = p;
      }
      uint8_t* dst = nullptr;
      if (Status st = address(step.dst, &dst); !st.ok()) return fail(st);
      if (IsNoOpStep(step, args.srcs[0], dst)) continue;
      args.ndsts = 1;
      args.dsts[0] = dst;
      args.count = step.count;
      args.datatype = c.call.datatype;
      args.op = c.call.op;
      args.post_divisor = step.post_divisor;
      if (Status st = LaunchReduceCopyKernel(args, s); !st.ok()) return fail(st);
    }
    if (cudaError_t err = cudaEventRecord(done, s); err != cudaSuccess)
      return fail(CudaErrorStatus(err, "cudaEventRecord(IPC phase)"));
    if (Status st = WaitCudaEvent(done, timeout_s, "CUDA IPC kernels", comm->spin_policy());
        !st.ok())
      return fail(st);
    splits.Mark("map and kernels");
    BATON_RETURN_IF_ERROR(comm->Barrier());
    splits.Mark("barrier");
  }
  splits.Report(CollectiveName(c.call.collective));
  return Status::Ok();
}

}  // namespace baton
