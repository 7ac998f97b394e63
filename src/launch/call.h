// Launching one call: which algorithm builds its schedule, and where it runs
// (now on this thread, queued on a host stream, deferred to the end of a
// group, or on the device path for CUDA buffers and streams). The C API
// checks the arguments and hands each call here; this is the one place that
// routes calls between those ways.
#pragma once

#include <baton.h>

#include <cstddef>
#include <memory>

#include "algorithms/collective.h"
#include "base/status.h"
#include "comm/comm.h"
#include "comm/red_ops.h"

namespace baton {

// Where a call was made: its communicator and its stream (NULL, a Baton host
// stream, or in CUDA builds a cudaStream_t).
struct CallSite {
  std::shared_ptr<Communicator> comm;
  batonStream_t stream = nullptr;
  bool host_stream = false;  // `stream` is a live batonStream_t
};

// One collective as the API received it (arguments already checked).
// `count` is per rank for allgather, reduce-scatter, alltoall, gather and
// scatter; the v-collectives take per-rank counts and displacements in
// elements instead (CollArgs::counts and friends; null where the
// collective has none), which are copied, so the caller's arrays may go
// as soon as the call returns.
struct CollectiveCall {
  Collective collective = Collective::kAllReduce;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  batonDataType_t datatype = batonFloat32;
  batonRedOp_t op = batonSum;  // batonSum where the collective has no op
  int root = 0;                // 0 where the collective has no root
  const size_t* counts = nullptr;
  const size_t* displs = nullptr;
  const size_t* send_counts = nullptr;
  const size_t* send_displs = nullptr;
  // A PreMulSum op (op >= batonNumOps, found in the communicator's table):
  // each rank's input is multiplied by the scalar, then summed.
  bool premul = false;
  PreMulScalar scalar;
};

// Picks the algorithm (BATON_ALGO, then size and rank count) and launches.
Status LaunchCollective(const CallSite& site, const CollectiveCall& call);

// batonSend (is_send) or batonRecv of `count` elements with `peer`; a peer
// equal to the rank itself must be matched inside a group.
Status LaunchPointToPoint(const CallSite& site, bool is_send, const void* sendbuff, void* recvbuff,
                          size_t count, batonDataType_t datatype, int peer);

// batonRecvAny: `count` elements from whichever peer's send comes first
// (comm/any_source.cc), its rank into *source when the receive completes.
// Host buffers, the NULL stream or a host stream; not inside a group.
Status LaunchRecvAny(const CallSite& site, void* recvbuff, size_t count, batonDataType_t datatype,
                     int* source);

Status LaunchBarrier(const CallSite& site);

}  // namespace baton
