#include "launch/group.h"

#include <vector>

namespace baton {
namespace {

// Per-thread group state, as NCCL's group calls are per thread.
struct GroupState {
  int depth = 0;
  std::vector<Launch> queued;
};
thread_local GroupState tls_group;

// A copy of `bytes` from `from` to `to` (a send to self met its receive).
void AddSelfCopy(const void* from, void* to, size_t bytes, Schedule* s) {
  Op op;
  op.kind = Op::Kind::kCopy;
  op.src = static_cast<const uint8_t*>(from);
  op.dst = static_cast<uint8_t*>(to);
  op.bytes = bytes;
  s->Add(op);
}

// Launches the calls of `queued` that are on `comm`, merged into one
// schedule (or one staged device launch).
Status LaunchMerged(const std::shared_ptr<Communicator>& comm, const std::vector<Launch>& queued) {
  std::vector<ScheduleBuilder> builders;
  std::vector<StagedPart> device_parts;
  std::vector<const Launch*> self_sends, self_recvs;
  batonStream_t stream = nullptr;
  bool first = true, on_host = false, on_device = false, one_stream = true;
  for (const Launch& l : queued) {
    if (l.comm != comm) continue;
    if (first) stream = l.stream, first = false;
    one_stream &= l.stream == stream;
    (l.on_device ? on_device : on_host) = true;
    if (l.self == Launch::Self::kSend)
      self_sends.push_back(&l);
    else if (l.self == Launch::Self::kRecv)
      self_recvs.push_back(&l);
    else if (l.on_device)
      device_parts.push_back(l.device);
    else
      builders.push_back(l.build);
  }
  if (on_device && on_host)
    return InvalidUsage("a group mixes calls on host and on device buffers for one communicator");
  if (on_device && !one_stream)
    return InvalidUsage("device calls of one communicator in a group must all use the same stream");
  if (self_sends.size() != self_recvs.size())
    return InvalidUsage("group has " + std::to_string(self_sends.size()) + " sends to self but " +
                        std::to_string(self_recvs.size()) + " receives from self");
  for (size_t i = 0; i < self_sends.size(); ++i) {
    if (self_sends[i]->self_bytes != self_recvs[i]->self_bytes)
      return InvalidUsage("send to self and receive from self differ in size");
    const void* src = self_sends[i]->self_src;
    void* dst = self_recvs[i]->self_dst;
    const size_t bytes = self_sends[i]->self_bytes;
    if (on_device) {
      // Staged like the other parts: the copy runs between their stand-ins.
      device_parts.push_back(
          {{src, bytes, dst, bytes},
           [bytes](const void* from, void* to, Schedule* s) { AddSelfCopy(from, to, bytes, s); }});
    } else {
      builders.push_back([src, dst, bytes](Schedule* s) { AddSelfCopy(src, dst, bytes, s); });
    }
  }
  if (on_device) return CudaLaunchGroup(comm, stream, std::move(device_parts));
  return RunOrQueue(comm, stream, [builders](Communicator& c) {
    return c.Run([&builders](Schedule* merged) {
      for (const auto& b : builders) {
        Schedule part;
        b(&part);
        merged->Append(std::move(part));
      }
    });
  });
}

}  // namespace

bool InGroup() {
  return tls_group.depth > 0;
}

bool GroupHolds(const Communicator* comm) {
  for (const Launch& l : tls_group.queued)
    if (l.comm.get() == comm) return true;
  return false;
}

void GroupStart() {
  ++tls_group.depth;
}

Status Submit(Launch launch) {
  if (InGroup()) {
    tls_group.queued.push_back(std::move(launch));
    return Status::Ok();
  }
  if (launch.self != Launch::Self::kNone)
    return InvalidUsage(
        "a send to or receive from this rank itself must be paired with its "
        "counterpart inside batonGroupStart/batonGroupEnd");
  return RunOrQueue(launch.comm, launch.stream,
                    [build = std::move(launch.build)](Communicator& c) { return c.Run(build); });
}

Status GroupEnd() {
  if (tls_group.depth == 0) return InvalidUsage("batonGroupEnd without batonGroupStart");
  if (--tls_group.depth > 0) return Status::Ok();
  std::vector<Launch> queued = std::move(tls_group.queued);
  tls_group.queued.clear();

  // Per communicator, in order of first appearance.
  std::vector<std::shared_ptr<Communicator>> comms;
  for (const Launch& l : queued) {
    bool seen = false;
    for (const auto& c : comms) seen |= c == l.comm;
    if (!seen) comms.push_back(l.comm);
  }
  Status result;
  for (const auto& comm : comms) {
    Status st = LaunchMerged(comm, queued);
    if (!st.ok()) {
      comm->set_last_error(st.message());
      if (result.ok()) result = st;
    }
  }
  return result;
}

}  // namespace baton
