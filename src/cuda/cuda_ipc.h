// Collectives between the GPUs of one host through CUDA IPC (CUDA builds
// only; docs/cuda.md, "CUDA IPC").
//
// When every rank of a communicator is on one host, device buffers need not
// travel through pinned host memory and the shared-memory transport: each
// rank maps its peers' buffers (cudaIpcGetMemHandle / cudaIpcOpenMemHandle,
// or the plain pointer for a rank in the same process) and runs the
// collective's IpcPlan with the CUDA reduce-copy kernels, reading peer memory
// over NVLink or PCIe peer-to-peer. The host only coordinates: one exchange
// of a small record per call (handles, and the call itself, so ranks that
// disagree on the call get an error instead of garbage) and one barrier per
// phase of the plan, over the communicator's ordinary transport.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "algorithms/ipc_plan.h"
#include "base/status.h"
#include "comm/comm.h"

namespace baton {

// Whether calls on `comm` try CUDA IPC: at least two ranks, all on one host
// (same host hash), and BATON_CUDA_IPC not 0. Depends only on the
// communicator and the environment, so every rank answers alike (given the
// same BATON_CUDA_IPC).
bool CudaIpcEnabled(const Communicator& comm);

// Whether CUDA IPC can hand peers the allocation `ptr` lies in
// (cudaIpcGetMemHandle of its base succeeds; not for memory from
// cudaMallocAsync's pools or VMM allocations without an IPC handle type).
bool CudaIpcShareable(const void* ptr);

// One call on device buffers, as the IPC path sees it.
struct CudaIpcCall {
  IpcCall call;
  const void* send = nullptr;  // nullptr where this rank does not read it
  size_t send_bytes = 0;
  void* recv = nullptr;  // nullptr where this rank does not write it
  size_t recv_bytes = 0;
};

// What a call on the IPC path came to.
enum class CudaIpcOutcome {
  kDone,      // the collective ran through peer memory
  kFallback,  // every rank agreed IPC cannot serve this call; nothing was
              // touched and all ranks must run it the staged way instead
};

// Per communicator: its peers' mapped buffers, the stream its kernels run
// on, and what the ranks agreed about peer access. Used by one thread at a
// time (the communicator's device worker, or a synchronous caller after the
// worker drained); a mutex enforces it.
class CudaIpcContext {
 public:
  CudaIpcContext() = default;
  ~CudaIpcContext();
  CudaIpcContext(const CudaIpcContext&) = delete;
  CudaIpcContext& operator=(const CudaIpcContext&) = delete;

  // Runs one call on the current device (the buffers' device). The inputs
  // must be ready (the caller waited for them). On failure the
  // communicator is aborted, so peers waiting in an exchange or barrier fail
  // at once instead of at their timeout.
  Status Run(const std::shared_ptr<Communicator>& comm, const CudaIpcCall& call, double timeout_s,
             CudaIpcOutcome* outcome);

  // The non-blocking stream this context runs its work on for `device`
  // (also the staged fallback's copies: never the legacy default stream,
  // which would wait for the user's stream that waits for us).
  Status WorkStream(int device, cudaStream_t* out);

 private:
  // A peer allocation mapped into this process, by (peer rank, handle).
  using MappingKey = std::pair<int, std::array<char, sizeof(cudaIpcMemHandle_t)>>;
  Status MapPeer(int peer, const cudaIpcMemHandle_t& handle, uint8_t** base);
  Status StreamLocked(int device, cudaStream_t* out);  // mu_ held
  Status Agree(const std::shared_ptr<Communicator>& comm, const std::string& key, bool mine,
               bool* all);
  // Logs `line` at INFO unless it is what was logged last (once per change,
  // not once per call).
  void Note(const std::string& line);

  std::mutex mu_;
  // Opened mappings, most recently used first; at most BATON_CUDA_IPC_CACHE
  // (default 64), the least recently used closed beyond that.
  std::list<std::pair<MappingKey, uint8_t*>> mappings_;
  std::map<int, cudaStream_t> streams_;  // by device
  std::map<std::string, bool> agreed_;   // peer access of a set of (pid, GPU)s
  std::vector<uint8_t> records_;         // the exchange's receive buffer
  IpcPlan plan_;
  std::string last_note_;
};

}  // namespace baton
