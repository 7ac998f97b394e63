// Collectives on CUDA device buffers (CUDA builds only; docs/cuda.md).
//
// The C API calls CudaTryLaunch for every call once CudaDeviceAvailable()
// says this process sees a GPU. Device buffers are staged through pinned host
// memory: the input is copied device->host on the user's cudaStream_t, a
// Baton worker thread runs the ordinary host collective on the pinned copy
// once that copy's event has completed, and a small kernel on the stream
// holds back the copy of the result host->device until the worker publishes
// that the host side is done.
#pragma once

#include <baton.h>

#include <functional>
#include <memory>

#include "collectives/ipc_plan.h"
#include "collectives/schedule.h"
#include "core/comm.h"
#include "core/group.h"
#include "core/status.h"
#include "tuning/algorithm.h"

namespace baton {

// Whether this process sees at least one CUDA device. Asked once (the first
// call pays a cudaGetDeviceCount, which fails fast without a driver); every
// later call is a load. BATON_CUDA=0 turns the device path off.
bool CudaDeviceAvailable();

// The buffers a collective uses on this rank (for Broadcast and Reduce only
// the root's send or receive buffer counts).
CudaCallBuffers CudaBuffersFor(Collective collective, const void* send, void* recv, size_t count,
                               size_t elem_size, int nranks, int rank, int root);

// How CudaTryLaunch routed a call.
enum class CudaRoute {
  kHost,   // host buffers with a NULL or Baton host stream: the caller goes on
           // as without CUDA
  kDone,   // the device path took it; *status is the outcome
  kQueue,  // a valid device call inside batonGroupStart/End: the caller
           // queues a Launch with on_device set (run by CudaLaunchGroup)
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
