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
#include "core/status.h"
#include "tuning/algorithm.h"

namespace baton {

// Whether this process sees at least one CUDA device. Asked once (the first
// call pays a cudaGetDeviceCount, which fails fast without a driver); every
// later call is a load. BATON_CUDA=0 turns the device path off.
bool CudaDeviceAvailable();

// The user buffers a call reads (send) and writes (recv); a zero size means
// the call does not touch that buffer on this rank.
struct CudaCallBuffers {
  const void* send = nullptr;
  size_t send_bytes = 0;
  void* recv = nullptr;
  size_t recv_bytes = 0;
};

// The buffers a collective uses on this rank (for Broadcast and Reduce only
// the root's send or receive buffer counts).
CudaCallBuffers CudaBuffersFor(Collective collective, const void* send, void* recv, size_t count,
                               size_t elem_size, int nranks, int rank, int root);

// Builds the host schedule of a staged call from the pinned host buffers that
// stand in for the user's send and receive buffers (nullptr where unused).
using StagedBuilder = std::function<void(const void* send, void* recv, Schedule*)>;

// Routes one call. Returns false when it is a plain host call (host buffers,
// and a NULL or Baton host stream): the caller goes on as without CUDA.
// Returns true when the device path took it; *status is then the outcome:
//  - device buffers with a cudaStream_t: queued, stream-ordered;
//  - device buffers with a NULL stream: done synchronously;
//  - a cudaStream_t with no buffers (barrier, count 0): queued, stream-ordered;
//  - host and device buffers mixed, device buffers with a host stream, host
//    buffers with a stream that is no host stream, or a device call inside
//    batonGroupStart/End: batonInvalidArgument / batonInvalidUsage;
//  - a CUDA failure: batonUnhandledCudaError with CUDA's message.
// `host_stream` says whether `stream` is a live Baton host stream. `ipc`
// describes a collective (nullptr for send/recv and barrier): with device
// buffers on a communicator whose ranks share one host, the call then goes
// through CUDA IPC (cuda_ipc.h) instead of staging, unless BATON_CUDA_IPC=0.
bool CudaTryLaunch(const std::shared_ptr<Communicator>& comm, batonStream_t stream,
                   bool host_stream, bool in_group, const CudaCallBuffers& buffers,
                   const StagedBuilder& build, const IpcCall* ipc, Status* status);

}  // namespace baton
