// The plan of a collective among ranks that can read each other's buffers
// directly (CUDA IPC between the GPUs of one host; docs/cuda.md).
//
// Where the transports move bytes between ranks, here every rank pulls what
// it needs straight out of its peers' user buffers with reduce-copy kernels:
// no staging, no wire protocol, one read of every input byte per reader. A
// plan is a few phases of such steps; between phases, and after the last,
// all ranks pass a barrier, so a phase may read what the peers wrote in the
// phase before, and no rank returns while a peer may still read its buffers.
//
// Plans are pure data over (rank, buffer, offset) references, so tests run
// them for any number of ranks in one process on host memory with the CPU
// kernels, and the CUDA executor (cuda/cuda_ipc.cc) runs the very same plan
// with the CUDA kernels on mapped peer memory.
#pragma once

#include <baton.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "algorithms/collective.h"

namespace baton {

// Which of a rank's two user buffers a reference points into.
enum class IpcBuffer : uint8_t { kSend, kRecv };

// Bytes at `offset` in `rank`'s send or receive buffer.
struct IpcRef {
  int32_t rank = 0;
  IpcBuffer buffer = IpcBuffer::kSend;
  uint64_t offset = 0;  // bytes
};

// Most sources of one step: what one reduce-copy kernel call takes (the
// executors check it against kernels/cpu_reduce.h's kMaxReduceSrcs).
inline constexpr int kMaxIpcStepSources = 8;

// One reduce-copy step: dst = srcs[0] op srcs[1] op ..., `count` elements,
// divided by post_divisor when > 1 (avg). One source is a copy. dst is
// always in the planning rank's own buffers: ranks only ever read from peers,
// so a rank's buffers change only through its own kernels.
struct IpcStep {
  IpcRef srcs[kMaxIpcStepSources];
  int nsrcs = 0;
  IpcRef dst;
  uint64_t count = 0;  // elements
  uint32_t post_divisor = 0;
};

// The steps of one rank, by phase. Steps of one phase run in order (a later
// pass may read an earlier one's output); a barrier over all ranks follows
// every phase.
struct IpcPlan {
  std::vector<std::vector<IpcStep>> phases;
  size_t StepCount() const;
};

// One call as the plan sees it; counts as in the public API (per rank for
// allgather, reduce-scatter and alltoall).
struct IpcCall {
  Collective collective = Collective::kAllReduce;
  uint64_t count = 0;
  batonDataType_t datatype = batonFloat32;
  batonRedOp_t op = batonSum;
  int root = 0;
  int rank = 0;
  int nranks = 1;
  // The v-collectives (the single-copy path on host buffers, comm/host_cma.cc;
  // CUDA IPC leaves them null and gets no plan): this rank's receive counts
  // and displacements in elements, as CollArgs holds them (displs null:
  // packed), and for alltoallv where the block for this rank starts in each
  // peer's send buffer (elements), which only the peers know.
  const size_t* counts = nullptr;
  const size_t* displs = nullptr;
  const uint64_t* source_offsets = nullptr;
  // Alltoallv: this rank's send counts and displacements (displs null:
  // packed), which its peers read to find their blocks.
  const size_t* send_counts = nullptr;
  const size_t* send_displs = nullptr;
};

// Whether a step whose first source and destination resolve to `src` and
// `dst` does nothing: a plain copy onto itself (the own block of an in-place
// allgather or broadcast). Executors skip it: peers may be reading those
// bytes, and rewriting them, even with the same values, would race.
inline bool IsNoOpStep(const IpcStep& step, const void* src, const void* dst) {
  return step.nsrcs == 1 && step.post_divisor <= 1 && src == dst;
}

// Fills `plan` for call.rank. The collectives of the uniform kind that
// predate gather and scatter are supported (the others leave it empty; the
// device path stages them):
//  - allreduce: rank r reduces part r of all inputs into its output
//    (phase 1), then copies the other parts from their owners' outputs
//    (phase 2), like a reduce-scatter + allgather done by loads;
//  - reduce-scatter: rank r reduces block r of all inputs (one phase);
//  - allgather, broadcast, alltoall: copies from the owners (one phase);
//  - reduce: the root reduces all inputs (one phase);
//  - allgatherv, reducescatterv, alltoallv (with counts; alltoallv also with
//    source_offsets): as their uniform kin, per-rank blocks.
// Reductions over more than kMaxIpcStepSources inputs take several passes, each
// folding up to kMaxIpcStepSources - 1 more inputs into the destination; avg
// divides only in the last pass. The own input comes first, so an in-place
// destination is read before it is overwritten, and the other ranks follow
// in rank order: a plan's result does not depend on who computes it beyond
// that first operand.
// Alltoall must not be in place (the caller checks: a peer may still read
// the block this rank overwrites).
void BuildIpcPlan(const IpcCall& call, IpcPlan* plan);

}  // namespace baton
