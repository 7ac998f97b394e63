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
