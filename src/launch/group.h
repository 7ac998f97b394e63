// Groups: calls between batonGroupStart and batonGroupEnd are queued per
// thread and launched together at the outermost end, where the calls on one
// communicator merge into one schedule, so any send/recv pattern among them
// progresses together (as NCCL's groups do).
#pragma once

#include <baton.h>

#include <functional>
#include <memory>
#include <utility>

#include "algorithms/schedule.h"
#include "base/log.h"
#include "base/status.h"
#include "comm/comm.h"
#include "comm/stream.h"
#include "cuda/cuda_device.h"

namespace baton {

// Builds one rank's schedule for one call. Runs when the call launches
// (at once, on the stream's thread, or at batonGroupEnd), so buffers are
// read then, as NCCL does.
using ScheduleBuilder = std::function<void(Schedule*)>;

// A call to launch: its communicator, stream and schedule. Self sends and
// receives are matched at batonGroupEnd into local copies.
struct Launch {
  std::shared_ptr<Communicator> comm;
  batonStream_t stream = nullptr;  // nullptr: synchronous
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

// Runs `run` (Status(Communicator&)) on the communicator now (stream
// null), or queues it on the host stream, where the closure stays in the
// stream's slot; errors reach the communicator's last-error text either way.
template <typename RunFn>
Status RunOrQueue(const std::shared_ptr<Communicator>& comm, batonStream_t stream, RunFn run) {
  if (stream == nullptr) return run(*comm);
  comm->AddPending();
  stream->impl.Enqueue([comm, run = std::move(run)]() {
    SetLogRank(comm->rank());  // a stream may serve several communicators
    Status st = run(*comm);
    if (!st.ok()) comm->set_last_error(st.message());
    comm->RemovePending();
    return st;
  });
  return Status::Ok();
}

// Launches now (on the calling thread, or queued on the host stream), or
// queues it when this thread is inside a group.
Status Submit(Launch launch);

bool InGroup();
// Whether this thread's open group holds a call on `comm` (it would run on
// a destroyed communicator at batonGroupEnd).
bool GroupHolds(const Communicator* comm);
void GroupStart();
// Launches everything queued since the outermost GroupStart. A failure on
// one communicator becomes that communicator's last error and does not stop
// the others; the first one is returned.
Status GroupEnd();

}  // namespace baton
