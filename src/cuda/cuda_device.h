// The device path: collectives on CUDA device buffers, and calls ordered on
// a cudaStream_t (docs/cuda.md). This header is free of CUDA: in a build
// without CUDA the same functions exist (no_cuda.cc) and report that no
// device is there, so the layers above never test BATON_HAVE_CUDA.
//
// Device buffers of ranks on one host are read through CUDA IPC
// (cuda_ipc.h); otherwise they are staged through pinned host memory: the
// input is copied device->host on the user's stream, a worker thread runs
// the ordinary host collective on the pinned copy once that copy is done,
// and a small kernel on the stream holds back the copy of the result
// host->device until the worker says the host side is done.
#pragma once

#include <baton.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "algorithms/collective.h"
#include "algorithms/ipc_plan.h"
#include "algorithms/schedule.h"
#include "base/status.h"
#include "comm/comm.h"

namespace baton {

// The user buffers a call reads (send) and writes (recv); a zero size means
// the call does not touch that buffer on this rank.
struct CudaCallBuffers {
  const void* send = nullptr;
  size_t send_bytes = 0;
  void* recv = nullptr;
  size_t recv_bytes = 0;
  // The call writes only parts of recv (v-collectives whose blocks leave
  // gaps): staging copies recv in too, so the gaps come back unchanged.
  bool preserve_recv = false;
};

// Builds the host schedule of a call from the buffers that stand for the
// user's (pinned staging copies, or the user's own for host buffers).
using StagedBuilder = std::function<void(const void* send, void* recv, Schedule*)>;

// A call on device buffers, as staging sees it.
struct StagedPart {
  CudaCallBuffers buffers;
  StagedBuilder build;
};

// Whether this process sees at least one CUDA device. Asked once (the first
// call pays a cudaGetDeviceCount, which fails fast without a driver); every
// later call is a load. BATON_CUDA=0 turns the device path off.
// Copies `bytes` from `ptr` into out when a call runs: from device memory
// (PreMulSum scalars of batonScalarDevice) through a copy on the calling
// thread's own stream, which waits for no other stream; a plain copy for
// host memory and in builds without CUDA.
Status ReadScalarAtCall(const void* ptr, void* out, size_t bytes);

bool CudaDeviceAvailable();

// The PCI bus id of this thread's current CUDA device ("0000:3B:00.0"), the
// GPU a communicator created now serves (as in NCCL); "" without a device,
// when the thread has no CUDA context current (a rank that never chose a
// GPU, whose host buffers then keep the NUMA node's NIC) or when CUDA
// cannot say.
std::string CudaCurrentDevicePciBusId();

// The buffers a collective uses on this rank (for the rooted collectives
// only the root's send or receive buffer counts). The v-collectives'
// extents depend on their counts (launch/call.cc computes them).
inline CudaCallBuffers CudaBuffersFor(Collective collective, const void* send, void* recv,
                                      size_t count, size_t elem_size, int nranks, int rank,
                                      int root) {
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
    case Collective::kGather:
      return {send, one, recv, rank == root ? all : 0};
    case Collective::kScatter:
      return {send, rank == root ? all : 0, recv, one};
    case Collective::kAllGatherV:
    case Collective::kReduceScatterV:
    case Collective::kAlltoAllV:
      break;
  }
  return {};
}

// How CudaTryLaunch routed a call.
enum class CudaRoute {
  kHost,   // host buffers with a NULL or Baton host stream: the caller goes on
           // as without CUDA
  kDone,   // the device path took it; *status is the outcome
  kQueue,  // a valid device call inside batonGroupStart/End: the caller
           // queues it for CudaLaunchGroup
};

// Routes one call; *status is set for kDone:
//  - device buffers with a cudaStream_t: queued, stream-ordered;
//  - device buffers with a NULL stream: done synchronously;
//  - a cudaStream_t with no buffers (barrier, count 0): queued, stream-ordered;
//  - host and device buffers mixed, device buffers with a host stream, or
//    host buffers with a stream that is no host stream: batonInvalidArgument;
//  - a CUDA failure: batonUnhandledCudaError with CUDA's message.
// `host_stream` says whether `stream` is a live Baton host stream. `ipc`
// describes a collective (nullptr for send/recv and barrier): with device
// buffers on a communicator whose ranks share one host, the call then goes
// through CUDA IPC (cuda_ipc.h) instead of staging, unless BATON_CUDA_IPC=0.
CudaRoute CudaTryLaunch(const std::shared_ptr<Communicator>& comm, batonStream_t stream,
                        bool host_stream, bool in_group, const CudaCallBuffers& buffers,
                        const StagedBuilder& build, const IpcCall* ipc, Status* status);

// Runs the device calls a group queued for `comm` (all on one GPU and on
// `stream`, a cudaStream_t or nullptr): staged together, their host
// schedules merged into one as for host calls in a group, so send/recv
// patterns among them progress together.
Status CudaLaunchGroup(const std::shared_ptr<Communicator>& comm, batonStream_t stream,
                       std::vector<StagedPart> parts);

}  // namespace baton
