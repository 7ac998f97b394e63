#include "core/group.h"

#include <vector>

#include "baton_config.h"
#include "core/stream.h"
#if BATON_HAVE_CUDA
#include "core/cuda_device.h"
#endif

namespace baton {
namespace {

// Per-thread group state, as NCCL's group calls are per thread.
struct GroupState {
  int depth = 0;
  std::vector<Launch> queued;
};
thread_local GroupState tls_group;

// Runs a schedule now or on the stream; errors reach the communicator's
// last-error text either way.
Status Execute(const std::shared_ptr<Communicator>& comm, batonStream* stream,
               std::function<void(Schedule*)> build) {
  if (stream == nullptr) return comm->run(build);
  comm->addPending();
  stream->impl.enqueue([comm, build = std::move(build)]() {
    Status st = comm->run(build);
    if (!st.ok()) comm->setLastError(st.message());
    comm->removePending();
    return st;
  });
  return Status::Ok();
}

}  // namespace

bool InGroup() {
  return tls_group.depth > 0;
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
  return Execute(launch.comm, launch.stream, std::move(launch.build));
}

Status GroupEnd() {
  if (tls_group.depth == 0) return InvalidUsage("batonGroupEnd without batonGroupStart");
  if (--tls_group.depth > 0) return Status::Ok();
  std::vector<Launch> queued = std::move(tls_group.queued);
  tls_group.queued.clear();

  // Merge per communicator, in order of first appearance.
  std::vector<std::shared_ptr<Communicator>> comms;
  for (const Launch& l : queued) {
    bool seen = false;
    for (const auto& c : comms) seen |= c == l.comm;
    if (!seen) comms.push_back(l.comm);
  }
  Status result;
  for (const auto& comm : comms) {
    std::vector<ScheduleBuilder> builders;
    std::vector<StagedPart> device_parts;
    std::vector<const Launch*> self_sends, self_recvs;
    batonStream* stream = nullptr;
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
    if (on_device && (on_host || !one_stream)) {
      result = InvalidUsage(on_host ? "a group mixes calls on host and on device buffers for one "
                                      "communicator"
                                    : "device calls of one communicator in a group must all use "
                                      "the same stream");
      comm->setLastError(result.message());
      continue;
    }
    if (self_sends.size() != self_recvs.size()) {
      result =
          InvalidUsage("group has " + std::to_string(self_sends.size()) + " sends to self but " +
                       std::to_string(self_recvs.size()) + " receives from self");
      comm->setLastError(result.message());
      continue;
    }
    Status pairing;  // this communicator's only: the others still launch
    for (size_t i = 0; i < self_sends.size(); ++i) {
      if (self_sends[i]->self_bytes != self_recvs[i]->self_bytes) {
        pairing = InvalidUsage("send to self and receive from self differ in size");
        break;
      }
      const uint8_t* src = static_cast<const uint8_t*>(self_sends[i]->self_src);
      uint8_t* dst = static_cast<uint8_t*>(self_recvs[i]->self_dst);
      size_t bytes = self_sends[i]->self_bytes;
      auto copy = [bytes](const void* from, void* to, Schedule* s) {
        Op op;
        op.kind = Op::Kind::kCopy;
        op.src = static_cast<const uint8_t*>(from);
        op.dst = static_cast<uint8_t*>(to);
        op.bytes = bytes;
        s->add(op);
      };
      if (on_device) {
        // Staged like the other parts: the copy runs between their stand-ins.
        device_parts.push_back({{src, bytes, dst, bytes}, copy});
      } else {
        builders.push_back([src, dst, copy](Schedule* s) { copy(src, dst, s); });
      }
    }
    if (!pairing.ok()) {
      comm->setLastError(pairing.message());
      if (result.ok()) result = pairing;
      continue;
    }
    if (on_device) {
#if BATON_HAVE_CUDA
      Status st = CudaLaunchGroup(comm, stream, std::move(device_parts));
#else
      Status st = InternalError("device calls in a build without CUDA");
#endif
      if (!st.ok()) {
        comm->setLastError(st.message());
        if (result.ok()) result = st;
      }
      continue;
    }
    Status st = Execute(comm, stream, [builders](Schedule* merged) {
      for (const auto& b : builders) {
        Schedule part;
        b(&part);
        merged->append(std::move(part));
      }
    });
    if (!st.ok()) {
      comm->setLastError(st.message());
      if (result.ok()) result = st;
    }
  }
  return result;
}

}  // namespace baton
