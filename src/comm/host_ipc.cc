// Collectives on registered host buffers; see host_ipc.h.
#include "comm/host_ipc.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>

#include "base/datatype.h"
#include "base/deadline.h"
#include "base/log.h"
#include "base/partition.h"
#include "comm/comm.h"
#include "comm/peer_wait.h"
#include "exec/call_check.h"
#include "exec/executor.h"
#include "kernels/cpu_reduce.h"
#include "transport/cma.h"

namespace baton {
namespace {

static_assert(kMaxIpcStepSources <= kMaxReduceSrcs, "an IPC plan step is one reduce-copy call");

// Peer allocations kept mapped per communicator; beyond that the least
// recently used is unmapped (a program that keeps allocating would
// otherwise pin every allocation its peers ever freed).
constexpr size_t kMaxMappings = 64;

// The write-everywhere allreduce's scratch piece: well inside a core's L2.
constexpr size_t kScratchBytes = 64 << 10;

}  // namespace

IpcRecord MakeHostIpcRecord(const RegisteredCall& rc, bool offer_cma) {
  IpcRecord r = MakeIpcRecord(rc.call, static_cast<int>(getpid()));
  r.send_ptr = reinterpret_cast<uint64_t>(rc.send);
  r.recv_ptr = reinterpret_cast<uint64_t>(rc.recv);
  if (rc.ordinary) {
    r.flags |= kIpcOrdinary;
    // Alltoallv: where the peers find their blocks (host_cma.cc).
    const uint64_t arrays[2] = {reinterpret_cast<uint64_t>(rc.call.send_counts),
                                reinterpret_cast<uint64_t>(rc.call.send_displs)};
    std::memcpy(r.send_handle, arrays, sizeof(arrays));
  }
  if (offer_cma) r.flags |= kIpcCma;
  if (rc.copy_in) r.flags |= kIpcCopyIn;
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

// Every peer's progress word at `target` or past it: a barrier through
// shared memory, and the point after which no peer reads this rank's
// buffers for the steps counted so far.
Status WaitAllProgress(ChannelSet& ch, int me, int n, uint64_t target, double timeout_s,
                       const char* what) {
  for (int q = 0; q < n; ++q) {
    if (q == me) continue;
    BATON_RETURN_IF_ERROR(
        WaitForPeer(ch, q, timeout_s, what, [&] { return ch.PeerProgress(q) >= target; }));
  }
  return Status::Ok();
}

// dst = the inputs reduced in the order given, in passes of at most kMaxReduceSrcs
// sources, each later pass folding more into dst; only the last divides.
void ReduceInputs(const std::vector<const uint8_t*>& inputs, uint8_t* dst, size_t count,
                  batonDataType_t datatype, batonRedOp_t op, uint32_t divisor) {
  size_t next = 0;
  bool first = true;
  while (next < inputs.size()) {
    ReduceCopyArgs args;
    if (!first) args.srcs[args.nsrcs++] = dst;
    while (args.nsrcs < kMaxReduceSrcs && next < inputs.size())
      args.srcs[args.nsrcs++] = inputs[next++];
    args.ndsts = 1;
    args.dsts[0] = dst;
    args.count = count;
    args.datatype = datatype;
    args.op = op;
    args.post_divisor = next == inputs.size() ? divisor : 0;
    ReduceCopy(args);
    first = false;
  }
}

// Allreduce that writes everywhere: rank r reduces part r of every input
// and stores the result into every rank's output, so each input byte is
// read from memory once and each output byte written once; with streaming
// stores when the buffers overflow the cache, also without a read for
// ownership (docs/performance.md, "Registered buffers", has the
// measurements against the earlier scheme, which copied the other ranks'
// parts out of their outputs). Up to kMaxReduceDsts ranks one reduce-copy
// writes every output; beyond that the part is reduced piece by piece into a cache-sized
// scratch buffer and copied out from there. Only the end needs a barrier:
// only rank r reads or writes part r of any buffer, in place included, and
// a rank returns only after every peer has finished writing into its output.
Status RunWriteAllAllReduce(ChannelSet& ch, const IpcCall& c,
                            const std::vector<const uint8_t*>& send_base,
                            const std::vector<const uint8_t*>& recv_base, double timeout_s,
                            HostIpcState* st) {
  const int n = c.nranks, me = c.rank;
  const size_t es = DatatypeSize(c.datatype);
  const uint32_t divisor = c.op == batonAvg ? static_cast<uint32_t>(n) : 0;
  const bool direct = n <= kMaxReduceDsts;
  // Streaming stores only above the cache (docs/performance.md, set E).
  const bool streaming = StreamsOutputs(n, c.count * es);
  // Direct: pieces of a few MiB keep an abort within reach of a long
  // reduction. Through scratch: pieces that stay in the core's cache.
  const size_t piece = std::max<size_t>(1, (direct ? size_t{4} << 20 : kScratchBytes) / es);
  if (!direct) st->scratch.resize(piece * es);
  size_t pb, pe;
  Partition(c.count, n, me, &pb, &pe);
  std::vector<const uint8_t*> inputs(n);
  std::vector<uint8_t*> outputs(n);
  for (size_t b = pb; b < pe; b += piece) {
    if (ch.aborted()) return RemoteError("communicator was aborted");
    const size_t off = b * es, count = std::min(piece, pe - b);
    // Inputs in rank order, so that every element is reduced in the same
    // order whatever part holds it: the result does not depend on how the
    // vector is cut (a bucketed vector equals the whole one, bit for bit).
    // Outputs own first, the others staggered, so the ranks do not all
    // write one peer's buffer at once.
    for (int k = 0; k < n; ++k) {
      inputs[k] = send_base[k] + off;
      outputs[k] = const_cast<uint8_t*>(recv_base[(me + k) % n]) + off;
    }
    ReduceCopyArgs args;
    args.datatype = c.datatype;
    args.op = c.op;
    args.non_temporal = streaming;
    args.count = count;
    if (direct) {
      args.nsrcs = n;
      for (int k = 0; k < n; ++k) args.srcs[k] = inputs[k];
      args.ndsts = n;
      for (int k = 0; k < n; ++k) args.dsts[k] = outputs[k];
      args.post_divisor = divisor;
      ReduceCopy(args);
      continue;
    }
    ReduceInputs(inputs, st->scratch.data(), count, c.datatype, c.op, divisor);
    args.nsrcs = 1;
    args.srcs[0] = st->scratch.data();
    for (int k = 0; k < n; k += kMaxReduceDsts) {
      args.ndsts = std::min(kMaxReduceDsts, n - k);
      for (int d = 0; d < args.ndsts; ++d) args.dsts[d] = outputs[k + d];
      ReduceCopy(args);
    }
  }
  st->progress += 1;
  ch.PublishProgress(st->progress);
  return WaitAllProgress(ch, me, n, st->progress, timeout_s, "the end of an allreduce");
}

namespace {

// The other collectives: the IPC plan's phases, each followed by a barrier
// on the progress words.
Status RunPlan(ChannelSet& ch, const IpcCall& c, const std::vector<const uint8_t*>& send_base,
               const std::vector<const uint8_t*>& recv_base, double timeout_s, HostIpcState* st) {
  BuildIpcPlan(c, &st->plan);
  auto address = [&](const IpcRef& ref) {
    const uint8_t* b = (ref.buffer == IpcBuffer::kSend ? send_base : recv_base)[ref.rank];
    return b == nullptr ? nullptr : b + ref.offset;
  };
  for (const auto& phase : st->plan.phases) {
    for (const IpcStep& step : phase) {
      ReduceCopyArgs args;
      args.nsrcs = step.nsrcs;
      bool missing = false;
      for (int k = 0; k < step.nsrcs; ++k) {
        args.srcs[k] = address(step.srcs[k]);
        missing |= args.srcs[k] == nullptr;
      }
      auto* dst = const_cast<uint8_t*>(address(step.dst));
      if (missing || dst == nullptr)
        return InternalError("registered-buffer plan reads a buffer a rank did not pass");
      if (IsNoOpStep(step, args.srcs[0], dst)) continue;
      args.ndsts = 1;
      args.dsts[0] = dst;
      args.count = step.count;
      args.datatype = c.datatype;
      args.op = c.op;
      args.post_divisor = step.post_divisor;
      ReduceCopy(args);
    }
    ch.PublishProgress(++st->progress);
    BATON_RETURN_IF_ERROR(
        WaitAllProgress(ch, c.rank, c.nranks, st->progress, timeout_s, "a collective phase"));
  }
  return Status::Ok();
}

}  // namespace

// Round 1: each rank publishes base+2 (able) or base+1 (unable) and reads
// every peer's word once it is past base; the parity is the answer. Round
// 2: each publishes base+4 (able) or base+3 (unable), keeping its parity
// for peers still reading round 1, and waits for every peer at base+3 or
// past, after which nobody reads round 1 any more; then all stand at base+4.
Status AgreeOnProgressWords(ChannelSet& ch, int me, int n, double timeout_s, bool able,
                            uint64_t* progress, int* unable) {
  const uint64_t base = *progress;
  *unable = able ? -1 : me;
  ch.PublishProgress(base + (able ? 2 : 1));
  for (int q = 0; q < n; ++q) {
    if (q == me) continue;
    BATON_RETURN_IF_ERROR(WaitForPeer(ch, q, timeout_s, "the single-pass check",
                                      [&] { return ch.PeerProgress(q) > base; }));
    if (*unable < 0 && (ch.PeerProgress(q) - base) % 2 == 1) *unable = q;
  }
  ch.PublishProgress(base + (able ? 4 : 3));
  BATON_RETURN_IF_ERROR(WaitAllProgress(ch, me, n, base + 3, timeout_s, "the single-pass check"));
  *progress = base + 4;
  ch.PublishProgress(*progress);
  return Status::Ok();
}

namespace {

// The first call with records from every rank: each rank says whether it
// could map every peer's buffers, and all agree (AgreeOnProgressWords).
Status SettleReach(ChannelSet& ch, int me, int n, double timeout_s, const Status& mapped,
                   HostIpcState* st) {
  int unable = -1;
  BATON_RETURN_IF_ERROR(
      AgreeOnProgressWords(ch, me, n, timeout_s, mapped.ok(), &st->progress, &unable));
  if (unable < 0) {
    st->reach = HostIpcState::Reach::kYes;
    return Status::Ok();
  }
  st->reach = HostIpcState::Reach::kNo;
  if (unable == me)
    BATON_WARN(kLogColl,
               "registered buffers and copy-in stages: %s; they are not mapped (the slots carry "
               "their calls)",
               mapped.message().c_str());
  else
    BATON_INFO(kLogColl,
               "registered buffers and copy-in stages: rank %d cannot map its peers' memory; "
               "they are not mapped (the slots carry their calls)",
               unable);
  return Status::Ok();
}

// The first single-copy call: each rank probes every peer's memory with
// process_vm_readv and, when `min_speed` (percent) is not 0, checks that the
// kernel's copy runs at that fraction of memcpy's rate here; all agree, and
// a refusal or a slow copy anywhere sends every later call on ordinary
// buffers through the slots, on every rank.
Status SettleCmaReach(ChannelSet& ch, int me, int n, double timeout_s, int min_speed,
                      HostIpcState* st) {
  int refused_by = -1, err = 0;
  for (int q = 0; q < n && err == 0; ++q) {
    if (q == me) continue;
    err = ch.ProbePeerMemory(q);
    if (err != 0) refused_by = q;
  }
  const bool check_speed = err == 0 && min_speed > 0;
  const double speed = check_speed ? CmaCopySpeed() : 1.0;
  const bool slow = check_speed && speed * 100 < min_speed;
  int unable = -1;
  BATON_RETURN_IF_ERROR(
      AgreeOnProgressWords(ch, me, n, timeout_s, err == 0 && !slow, &st->progress, &unable));
  st->cma_reach = unable < 0 ? HostIpcState::Reach::kYes : HostIpcState::Reach::kNo;
  if (unable == me && slow)
    BATON_INFO(kLogColl,
               "single-copy collectives: the kernel's copy (process_vm_readv) runs at %.0f%% of "
               "memcpy's rate here, below BATON_CMA_COLL_MIN_SPEED=%d; the shared-memory slots "
               "carry ordinary buffers (BATON_CMA_COLL=1 forces the single copy)",
               speed * 100, min_speed);
  else if (unable == me)
    BATON_INFO(kLogColl,
               "single-copy collectives: process_vm_readv of rank %d's memory fails (%s); the "
               "shared-memory slots carry ordinary buffers",
               refused_by, std::strerror(err));
  else if (unable >= 0)
    BATON_INFO(kLogColl,
               "single-copy collectives: rank %d cannot read its peers' memory, or reads it "
               "slower than memcpy allows; the shared-memory slots carry ordinary buffers",
               unable);
  return Status::Ok();
}

}  // namespace

Status Communicator::RunRegisteredLocked(const Schedule& schedule) {
  if (!host_ipc_) host_ipc_ = std::make_unique<HostIpcState>();
  HostIpcState& st = *host_ipc_;
  const RegisteredCall& given = schedule.registered;
  const int n = nranks_, me = rank_;
  ChannelSet& ch = *channels_;
  const double timeout_s = schedule.timeout_s >= 0 ? schedule.timeout_s : config_.timeout_s;
  using Reach = HostIpcState::Reach;
  // Every failure from here on ends the call and sticks (peers waiting on
  // this rank see it abort).
  auto fail = [&](Status err) {
    EndCalls(err.code());
    return Fail(std::move(err));
  };
  auto ordinary_path = [&] {
    NumberCalls(schedule);
    return RunNumberedLocked(schedule);
  };

  // Settled by an earlier call: no single-pass path can take this one.
  const bool offer_cma = !given.copy_in && single_copy_open() && st.cma_reach != Reach::kNo;
  if (!offer_cma && (given.ordinary || st.reach == Reach::kNo)) {
    BATON_TRACE(kLogColl, "single-pass call not offered by this rank: the slots carry it");
    return ordinary_path();
  }
  // The copy-in path: this rank's input goes into its stage before the
  // record says the call is ready, and the call runs on the stage.
  RegisteredCall staged;
  if (given.copy_in && !CopyIn(given, &st.stage, &staged)) {
    BATON_TRACE(kLogColl, "copy-in stage not available: the slots carry the call");
    return ordinary_path();
  }
  const RegisteredCall& rc = given.copy_in ? staged : given;

  // 1. Publish, then number the call (NumberCalls leaves the record alone).
  const uint64_t call = collective_seq_ + 1;
  st.records.resize(n);
  st.records[me] = MakeHostIpcRecord(rc, offer_cma);
  ch.PublishCall(call, &st.records[me], sizeof(IpcRecord));
  record_published_ = true;
  NumberCalls(schedule);
  record_published_ = false;

  // 2. Every peer's word on this call; a peer that never comes is named
  // with its last call, as the executor names it.
  const PeerJudge judge = [&](int peer, const CallState& state, std::string* behind) {
    return CheckPeerState(me, peer, executor_->Label(peer), numbered_, state, behind);
  };
  bool everyone = true;
  for (int q = 0; q < n && everyone; ++q) {
    if (q == me) continue;
    Status s = WaitForPeer(
        ch, q, timeout_s, "collective " + std::to_string(call),
        [&] {
          const auto got = ch.ReadPeerCall(q, call, &st.records[q], sizeof(IpcRecord));
          if (got == ChannelSet::PeerCall::kNoRecord) everyone = false;
          return got != ChannelSet::PeerCall::kNotYet;
        },
        &judge);
    if (!s.ok()) return fail(std::move(s));
  }
  if (!everyone) {
    BATON_TRACE(kLogColl, "call %llu: a peer offered no single pass: the slots carry it",
                static_cast<unsigned long long>(call));
    return RunNumberedLocked(schedule);
  }
  const IpcVerdict verdict = JudgeIpcRecords(st.records);
  if (verdict.kind == IpcVerdict::Kind::kError)  // worded as the ordinary path's mismatches
    return fail(Status(verdict.error.code(), "collective mismatch in collective #" +
                                                 std::to_string(collective_calls_) + ": " +
                                                 verdict.error.message()));
  if (verdict.kind == IpcVerdict::Kind::kFallback) {
    BATON_TRACE(kLogColl, "call %llu: %s: the slots carry it",
                static_cast<unsigned long long>(call), verdict.reason.c_str());
    return RunNumberedLocked(schedule);
  }
  // What every rank reads alike from the records: mapped when all buffers
  // are registered, else cross-memory attach when every rank offers it.
  bool all_registered = true, all_cma = true, any_copy_in = false, all_copy_in = true;
  for (const IpcRecord& r : st.records) {
    all_registered &= !(r.flags & kIpcOrdinary);
    all_cma &= (r.flags & kIpcCma) != 0;
    any_copy_in |= (r.flags & kIpcCopyIn) != 0;
    all_copy_in &= (r.flags & kIpcCopyIn) != 0;
  }
  // A copy-in stage holds one segment: a call larger than that runs segment
  // by segment, which a registered rank (one pass over the whole call) does
  // not, so such a mix takes the slots on every rank.
  if (any_copy_in && !all_copy_in && !FitsOneCopyInSegment(rc.call)) {
    BATON_TRACE(kLogColl,
                "call %llu: copy-in and registered ranks, larger than a segment: the "
                "slots carry it",
                static_cast<unsigned long long>(call));
    return RunNumberedLocked(schedule);
  }

  // 3. Map the peers' buffers.
  std::vector<const uint8_t*> send_base(n, nullptr), recv_base(n, nullptr);
  send_base[me] = static_cast<const uint8_t*>(rc.send);
  recv_base[me] = static_cast<const uint8_t*>(rc.recv);
  bool mapped_path = all_registered && st.reach != Reach::kNo;
  if (mapped_path) {
    Status mapped = Status::Ok();
    for (int q = 0; q < n && mapped.ok(); ++q) {
      if (q == me) continue;
      const IpcRecord& r = st.records[q];
      for (const bool send : {true, false}) {
        if (!(r.flags & (send ? kIpcHasSend : kIpcHasRecv))) continue;
        const SharedAllocInfo info = RecordAlloc(r, send);
        const uint8_t* base = nullptr;
        if (Status s = st.Map(info, &base); !s.ok()) {
          mapped = s.WithContext("mapping the registered buffer of rank " + std::to_string(q));
          break;
        }
        (send ? send_base : recv_base)[q] = base + info.offset;
      }
    }
    if (st.reach == Reach::kUnknown) {
      Status settled = SettleReach(ch, me, n, timeout_s, mapped, &st);
      if (!settled.ok()) return fail(std::move(settled));
      mapped_path = st.reach == Reach::kYes;
    } else if (!mapped.ok()) {
      // Every rank mapped its peers' memory before, so this is not a matter
      // of permissions; the peers are committed, so this rank fails and aborts.
      return fail(std::move(mapped));
    }
  }

  if (!mapped_path) {
    // 3'. Or reach them through cross-memory attach.
    if (!all_cma) return RunNumberedLocked(schedule);
    if (st.cma_reach == Reach::kUnknown) {
      // Forced on (BATON_CMA_COLL=1): no speed check.
      const int min_speed = config_.cma_coll == -1 ? config_.cma_coll_min_speed : 0;
      Status settled = SettleCmaReach(ch, me, n, timeout_s, min_speed, &st);
      if (!settled.ok()) return fail(std::move(settled));
      if (st.cma_reach == Reach::kNo) single_copy_refused_.store(true, std::memory_order_relaxed);
    }
    if (st.cma_reach == Reach::kNo) return RunNumberedLocked(schedule);
    if (const uint32_t bit = 1u << static_cast<int>(rc.call.collective); !(st.cma_noted & bit)) {
      st.cma_noted |= bit;
      BATON_INFO(kLogColl,
                 "single-copy collectives: %s of %d ranks reaches the peers' buffers through "
                 "process_vm_readv/writev",
                 CollectiveName(rc.call.collective), n);
    }
    BATON_TRACE(kLogColl, "call %llu: a single pass through process_vm_readv/writev",
                static_cast<unsigned long long>(call));
    Status s = RunCmaCall(ch, rc.call, rc.send, rc.recv, st.records, timeout_s, &st);
    if (!s.ok()) return fail(std::move(s));
    EndCalls(batonSuccess);
    return Status::Ok();
  }

  if (rc.copy_in && !st.copy_in_noted) {
    st.copy_in_noted = true;
    BATON_INFO(kLogColl,
               "copy-in allreduce: %d ranks copy ordinary buffers into shared stages and "
               "read each other's there",
               n);
  } else if (!rc.copy_in && !st.noted) {
    st.noted = true;
    BATON_INFO(kLogColl, "registered buffers: %d ranks read each other's buffers in place", n);
  }

  // 4. Run.
  Status s = rc.copy_in ? RunCopyInAllReduce(ch, given, send_base, recv_base, timeout_s, &st)
             : rc.call.collective == Collective::kAllReduce
                 ? RunWriteAllAllReduce(ch, rc.call, send_base, recv_base, timeout_s, &st)
                 : RunPlan(ch, rc.call, send_base, recv_base, timeout_s, &st);
  if (!s.ok()) return fail(std::move(s));
  EndCalls(batonSuccess);
  return Status::Ok();
}

}  // namespace baton
