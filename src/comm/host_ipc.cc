// Collectives on registered host buffers; see host_ipc.h.
#include "comm/host_ipc.h"

#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "algorithms/barrier.h"
#include "base/deadline.h"
#include "base/log.h"
#include "comm/comm.h"
#include "kernels/cpu_reduce.h"

namespace baton {
namespace {

static_assert(kMaxIpcStepSources <= kMaxReduceSrcs, "an IPC plan step is one reduce-copy call");

// Peer allocations kept mapped per communicator; beyond that the least
// recently used is unmapped (a program that keeps allocating would
// otherwise pin every allocation its peers ever freed).
constexpr size_t kMaxMappings = 64;

}  // namespace

IpcRecord MakeHostIpcRecord(const RegisteredCall& rc) {
  IpcRecord r = MakeIpcRecord(rc.call, static_cast<int>(getpid()));
  if (rc.send_alloc.size != 0) {
    r.flags |= kIpcHasSend;
    std::memcpy(r.send_handle, &rc.send_alloc, sizeof(rc.send_alloc));
    r.send_offset = rc.send_alloc.offset;
  }
  if (rc.recv_alloc.size != 0) {
    r.flags |= kIpcHasRecv;
    std::memcpy(r.recv_handle, &rc.recv_alloc, sizeof(rc.recv_alloc));
    r.recv_offset = rc.recv_alloc.offset;
  }
  return r;
}

SharedAllocInfo RecordAlloc(const IpcRecord& r, bool send) {
  SharedAllocInfo info;
  std::memcpy(&info, send ? r.send_handle : r.recv_handle, sizeof(info));
  return info;
}

Status HostIpcState::Map(const SharedAllocInfo& info, const uint8_t** base) {
  const std::pair<int32_t, uint64_t> key{info.pid, info.serial};
  for (auto it = mappings.begin(); it != mappings.end(); ++it) {
    if (it->first == key) {
      mappings.splice(mappings.begin(), mappings, it);
      *base = it->second.base();
      return Status::Ok();
    }
  }
  PeerMapping m;
  BATON_RETURN_IF_ERROR(PeerMapping::Open(info, &m));
  *base = m.base();
  mappings.emplace_front(key, std::move(m));
  // Only mappings of earlier calls can go: this call's were just used,
  // and its pointers are resolved before any step runs.
  while (mappings.size() > kMaxMappings) mappings.pop_back();
  return Status::Ok();
}

Status Communicator::RunRegisteredLocked(const Schedule& schedule) {
  if (!host_ipc_) host_ipc_ = std::make_unique<HostIpcState>();
  HostIpcState& st = *host_ipc_;
  const RegisteredCall& rc = schedule.registered;
  const int n = nranks_, me = rank_;

  // 1. Publish, then number the call (NumberCalls leaves the record alone).
  const uint64_t call = collective_seq_ + 1;
  st.records.resize(n);
  st.records[me] = MakeHostIpcRecord(rc);
  channels_->PublishCall(call, &st.records[me], sizeof(IpcRecord));
  record_published_ = true;
  NumberCalls(schedule);
  record_published_ = false;

  // 2. Every peer's word on this call.
  const Deadline deadline = DeadlineIn(config_.timeout_s);
  bool everyone = true;
  for (int q = 0; q < n && everyone; ++q) {
    if (q == me) continue;
    for (int spins = 0;; ++spins) {
      const auto got = channels_->ReadPeerCall(q, call, &st.records[q], sizeof(IpcRecord));
      if (got == ChannelSet::PeerCall::kRecord) break;
      if (got == ChannelSet::PeerCall::kNoRecord) {
        everyone = false;
        break;
      }
      if (channels_->aborted() || channels_->peer_closed(q)) {
        FailureNote note;
        Status err = channels_->aborted() ? RemoteError("communicator was aborted")
                     : channels_->NoteFrom(q, &note)
                         ? note.AsStatus()
                         : RemoteError("rank " + std::to_string(q) +
                                       " left before a collective on registered buffers");
        EndCalls(err.code());
        return Fail(std::move(err));
      }
      if (Clock::now() >= deadline) {
        Status err = TimeoutError("rank " + std::to_string(q) + " did not reach collective " +
                                  std::to_string(call) + " (registered buffers) within " +
                                  std::to_string(config_.timeout_s) + " s");
        EndCalls(err.code());
        return Fail(std::move(err));
      }
      // Yield first: on a loaded host the peer may be waiting for this
      // core; after a while sleep, so a long wait does not burn it.
      if (spins < 20000)
        sched_yield();
      else
        std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  if (!everyone) return RunNumberedLocked(schedule);
  const IpcVerdict verdict = JudgeIpcRecords(st.records);
  if (verdict.kind == IpcVerdict::Kind::kError) {
    EndCalls(verdict.error.code());
    return Fail(verdict.error);
  }
  if (verdict.kind == IpcVerdict::Kind::kFallback) return RunNumberedLocked(schedule);
  if (!st.noted) {
    st.noted = true;
    BATON_INFO(kLogColl, "registered buffers: %d ranks read each other's buffers in place", n);
  }

  // 3. Resolve every address first (a mapping may fail: nothing ran yet,
  // but peers are committed, so this rank fails loudly and aborts).
  BuildIpcPlan(rc.call, &st.plan);
  std::vector<const uint8_t*> send_base(n, nullptr), recv_base(n, nullptr);
  send_base[me] = static_cast<const uint8_t*>(rc.send);
  recv_base[me] = static_cast<const uint8_t*>(rc.recv);
  for (int q = 0; q < n; ++q) {
    if (q == me) continue;
    const IpcRecord& r = st.records[q];
    for (const bool send : {true, false}) {
      if (!(r.flags & (send ? kIpcHasSend : kIpcHasRecv))) continue;
      const SharedAllocInfo info = RecordAlloc(r, send);
      const uint8_t* base = nullptr;
      if (Status s = st.Map(info, &base); !s.ok()) {
        Status err = s.WithContext("mapping the registered buffer of rank " + std::to_string(q));
        EndCalls(err.code());
        return Fail(std::move(err));
      }
      (send ? send_base : recv_base)[q] = base + info.offset;
    }
  }
  auto address = [&](const IpcRef& ref) {
    const uint8_t* b = (ref.buffer == IpcBuffer::kSend ? send_base : recv_base)[ref.rank];
    return b == nullptr ? nullptr : b + ref.offset;
  };
  st.barrier.Clear();
  BuildDisseminationBarrier(MakeArgs(), &st.barrier);
  CallDescriptor internal;
  internal.kind = kCallKindInternal;
  const std::vector<CallDescriptor> barrier_calls{internal};
  for (const auto& phase : st.plan.phases) {
    for (const IpcStep& step : phase) {
      ReduceCopyArgs args;
      args.nsrcs = step.nsrcs;
      bool missing = false;
      for (int k = 0; k < step.nsrcs; ++k) {
        args.srcs[k] = address(step.srcs[k]);
        missing |= args.srcs[k] == nullptr;
      }
      auto* dst = const_cast<uint8_t*>(address(step.dst));
      if (missing || dst == nullptr) {
        Status err = InternalError("registered-buffer plan reads a buffer a rank did not pass");
        EndCalls(err.code());
        return Fail(std::move(err));
      }
      if (IsNoOpStep(step, args.srcs[0], dst)) continue;
      args.ndsts = 1;
      args.dsts[0] = dst;
      args.count = step.count;
      args.datatype = rc.call.datatype;
      args.op = rc.call.op;
      args.post_divisor = step.post_divisor;
      ReduceCopy(args);
    }
    if (Status s = executor_->Run(st.barrier, barrier_calls, me); !s.ok()) {
      EndCalls(s.code());
      return Fail(std::move(s));
    }
  }
  EndCalls(batonSuccess);
  return Status::Ok();
}

}  // namespace baton
