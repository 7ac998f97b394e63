// Launching work: now, on a host stream, or deferred to the end of a group.
#pragma once

#include <functional>
#include <memory>

#include "collectives/schedule.h"
#include "core/comm.h"
#include "core/status.h"

struct batonStream;

namespace baton {

// Builds one rank's schedule for one call. Runs when the call launches
// (at once, on the stream's thread, or at batonGroupEnd), so buffers are
// read then, as NCCL does.
using ScheduleBuilder = std::function<void(Schedule*)>;

// The user buffers a call reads (send) and writes (recv); a zero size means
// the call does not touch that buffer on this rank.
struct CudaCallBuffers {
  const void* send = nullptr;
  size_t send_bytes = 0;
  void* recv = nullptr;
  size_t recv_bytes = 0;
};

// Builds the host schedule of a call on device buffers from the pinned host
// buffers that stand in for them (nullptr where unused); see cuda_device.h.
using StagedBuilder = std::function<void(const void* send, void* recv, Schedule*)>;

// A call on device buffers, as staging sees it.
struct StagedPart {
  CudaCallBuffers buffers;
  StagedBuilder build;
};

// A call to launch: its communicator, stream and schedule. Self sends and
// receives are matched at launch time into local copies.
struct Launch {
  std::shared_ptr<Communicator> comm;
  batonStream* stream = nullptr;  // nullptr: synchronous
  ScheduleBuilder build;
  enum class Self { kNone, kSend, kRecv } self = Self::kNone;
  const void* self_src = nullptr;
  void* self_dst = nullptr;
  size_t self_bytes = 0;
  // Device buffers (CUDA builds): `stream` is then a cudaStream_t or nullptr,
  // and `device` replaces `build`. Self sends and receives keep their
  // self_* fields.
  bool on_device = false;
  StagedPart device;
};

// Launches now, or queues it when this thread is inside a group.
Status Submit(Launch launch);

bool InGroup();
void GroupStart();
// Launches everything queued since the outermost GroupStart: calls on one
// communicator merge into one schedule, so any send/recv pattern among them
// progresses together.
Status GroupEnd();

}  // namespace baton
