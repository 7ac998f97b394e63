#include "exec/executor.h"

#include <algorithm>
#include <cstring>

#include "base/datatype.h"
#include "base/deadline.h"
#include "base/log.h"
#include "exec/call_check.h"
#include "kernels/cpu_reduce.h"

namespace baton {
void RunCopyOp(const Op& op) {
  if (op.scale != nullptr) [[unlikely]] {
    ScaleCopy(op.dst, op.src, op.bytes / DatatypeSize(op.datatype), op.datatype, op.scale);
  } else if (op.post_divisor > 1) {
    ReduceCopyArgs args{};
    args.srcs[0] = op.src;
    args.nsrcs = 1;
    args.dsts[0] = op.dst;
    args.ndsts = 1;
    args.count = op.bytes / DatatypeSize(op.datatype);
    args.datatype = op.datatype;
    args.op = batonSum;
    args.post_divisor = op.post_divisor;
    ReduceCopy(args);
  } else if (op.stream_dst) {
    StreamCopy(op.dst, op.src, op.bytes);
  } else if (op.src != op.dst) {
    memmove(op.dst, op.src, op.bytes);
  }
}

RecvTarget RecvTargetOf(const Op& op) {
  RecvTarget t;
  t.dst = op.dst;
  t.reduce_with = op.reduce_with;
  t.datatype = op.datatype;
  t.op = op.redop;
  t.post_divisor = op.post_divisor;
  t.incoming_first = op.incoming_first;
  t.non_temporal = op.stream_dst;
  t.copy_to = op.copy_to;
  t.scale = op.scale;
  t.elem_size = static_cast<uint32_t>(DatatypeSize(op.datatype));
  return t;
}

void RunLocalOps(const Schedule& schedule) {
  for (const Op& op : schedule.ops)
    if (op.kind == Op::Kind::kCopy) RunCopyOp(op);
}

std::string Executor::Label(int rank) const {
  if (rank >= 0 && static_cast<size_t>(rank) < config_.peer_labels.size())
    return config_.peer_labels[rank];
  return "rank " + std::to_string(rank);
}

Status Executor::DescribeStall(const Schedule& schedule, const std::vector<Queue>& queues,
                               const std::vector<CallDescriptor>& calls, int rank,
                               Clock::time_point asked_at, const std::string& behind) const {
  std::string waiting;
  for (const Queue& q : queues) {
    if (q.cursor >= q.ops.size()) continue;
    const Op& op = schedule.ops[q.ops[q.cursor]];
    if (!waiting.empty()) waiting += ", ";
    waiting += std::string(q.is_send ? "sending " : "receiving ") + std::to_string(op.bytes) +
               " bytes " + (q.is_send ? "to" : "from") + " rank " + std::to_string(q.peer) + " (" +
               std::to_string(q.done) + " done)";
  }
  char secs[32];
  snprintf(secs, sizeof(secs), "%g", timeout_s_);
  std::string message =
      std::string("no progress for ") + secs +
      (timeout_s_ == config_.timeout_s ? " s (BATON_TIMEOUT)" : " s (the call's own timeout)");
  if (!calls.empty()) message += " in " + DescribeCall(calls.front());
  message += " while " + waiting;
  // The verdict: who never came, and who does not answer at all.
  std::string silent;
  const std::vector<int> silent_peers = SilentPeers(rank, asked_at);
  for (size_t i = 0; i < silent_peers.size(); ++i)
    silent += (i > 0 ? ", " : "") + Label(silent_peers[i]);
  if (!silent_peers.empty()) {
    message += "; " + silent + (silent_peers.size() == 1 ? " does" : " do") +
               " not answer (stopped, or its process hangs)";
    // Given up on, as a failure detector would: listed as failed here and,
    // with the note that follows, on every rank.
    channels_->MarkFailed(silent_peers);
  }
  message += behind;
  if (silent_peers.empty() && behind.empty() && asked_at != Clock::time_point{}) {
    const int unconnected = UnconnectedPeers(rank);
    message += unconnected == 0
                   ? "; every rank answered and is in this call (a stalled network?)"
                   : "; every rank connected to this one answered and is in this call (" +
                         std::to_string(unconnected) + " never connected were not asked)";
  }
  return TimeoutError(message);
}

std::vector<int> Executor::SilentPeers(int rank, Clock::time_point asked_at) const {
  std::vector<int> silent;
  if (asked_at == Clock::time_point{}) return silent;
  for (int p = 0; p < static_cast<int>(config_.peer_labels.size()); ++p) {
    CallState state;
    // Peers not connected (connections made on first use) are not asked.
    if (p == rank || !channels_->connected(p) || channels_->PeerState(p, asked_at, &state))
      continue;
    silent.push_back(p);
  }
  return silent;
}

int Executor::UnconnectedPeers(int rank) const {
  int unconnected = 0;
  for (int p = 0; p < static_cast<int>(config_.peer_labels.size()); ++p)
    unconnected += p != rank && !channels_->connected(p);
  return unconnected;
}

Status Executor::ExplainFailure(Status st, const Queue& q, const Op& op, const CallDescriptor& call,
                                int rank) {
  if (st.code() == batonInvalidUsage && q.channel->mismatch().kind != CallMismatch::Kind::kNone)
    return CallMismatchError(rank, q.peer, call, q.channel->mismatch(), op.bytes);
  // A peer that failed says why before it leaves.
  FailureNote note;
  if (channels_->NoteFrom(q.peer, &note)) return note.AsStatus();
  return st;
}

Status Executor::ConnectPeers(const Schedule& schedule) {
  std::vector<int> missing;
  std::vector<uint8_t> seen(channels_->nranks(), 0);
  for (const Op& op : schedule.ops) {
    if (op.kind == Op::Kind::kCopy || op.peer < 0 || static_cast<size_t>(op.peer) >= seen.size() ||
        seen[op.peer] || channels_->channel(op.peer) != nullptr)
      continue;
    seen[op.peer] = 1;
    missing.push_back(op.peer);
  }
  return channels_->Connect(missing, DeadlineIn(timeout_s_));
}

Status Executor::PrepareQueues(const Schedule& schedule) {
  const auto& ops = schedule.ops;
  std::vector<Queue>& queues = queues_;
  std::vector<int>& send_queue_of = send_queue_of_;
  std::vector<int>& recv_queue_of = recv_queue_of_;
  std::vector<int>& copies = copies_;
  // Keep the queues' op vectors (and their capacity); reset the rest.
  size_t nqueues = 0;
  send_queue_of.assign(send_queue_of.size(), -1);
  recv_queue_of.assign(recv_queue_of.size(), -1);
  copies.clear();
  for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
    const Op& op = ops[i];
    if (op.kind == Op::Kind::kCopy) {
      copies.push_back(i);
      continue;
    }
    auto& index = op.kind == Op::Kind::kSend ? send_queue_of : recv_queue_of;
    if (index.size() <= static_cast<size_t>(op.peer)) index.resize(op.peer + 1, -1);
    if (index[op.peer] < 0) {
      Channel* ch = channels_->channel(op.peer);
      if (ch == nullptr) [[unlikely]] {
        // Connections made on first use: every peer of this schedule that
        // has none yet, under the call's deadline.
        BATON_RETURN_IF_ERROR(ConnectPeers(schedule));
        ch = channels_->channel(op.peer);
      }
      if (ch == nullptr)
        return InternalError("schedule addresses rank " + std::to_string(op.peer) +
                             " without a channel");
      index[op.peer] = static_cast<int>(nqueues);
      if (queues.size() <= nqueues) queues.emplace_back();
      Queue& q = queues[nqueues++];
      q.channel = ch;
      q.peer = op.peer;
      q.is_send = op.kind == Op::Kind::kSend;
      q.ops.clear();
      q.cursor = 0;
      q.done = 0;
      q.open_call = -1;
    }
    queues[index[op.peer]].ops.push_back(i);
  }
  // Queues past nqueues are leftovers from a bigger earlier run.
  for (size_t i = nqueues; i < queues.size(); ++i) queues[i].cursor = queues[i].ops.size();
  nqueues_ = nqueues;
  return Status::Ok();
}

Status Executor::Run(const Schedule& schedule, const std::vector<CallDescriptor>& calls, int rank,
                     double timeout_s, bool unchanged) {
  const auto& ops = schedule.ops;
  if (ops.empty()) return Status::Ok();
  timeout_s_ = config_.timeout_s;
  probe_ = config_.probe;
  if (timeout_s >= 0 && timeout_s != config_.timeout_s) [[unlikely]] {
    timeout_s_ = timeout_s;
    probe_ = std::min(probe_, std::chrono::milliseconds(static_cast<int64_t>(
                                  std::clamp(timeout_s * 1000.0 / 4, 50.0, 1000.0))));
  }
  if (calls.empty()) return InternalError("a schedule without call descriptors");
  const size_t ncalls = calls.size();
  auto call_of = [&](const Op& op) -> const CallDescriptor& {
    return calls[op.call < ncalls ? op.call : 0];
  };
  std::vector<uint8_t>& complete = complete_;
  complete.assign(ops.size(), 0);
  auto ready = [&](const Op& op) {
    return (op.deps[0] < 0 || complete[op.deps[0]]) && (op.deps[1] < 0 || complete[op.deps[1]]);
  };

  // Build the per-peer queues; copies run as soon as their deps allow.
  std::vector<Queue>& queues = queues_;
  std::vector<int>& copies = copies_;
  if (unchanged && prepared_ == &schedule) {
    for (size_t i = 0; i < nqueues_; ++i) {
      Queue& q = queues[i];
      q.cursor = 0;
      q.done = 0;
      q.open_call = -1;
    }
  } else {
    prepared_ = nullptr;
    BATON_RETURN_IF_ERROR(PrepareQueues(schedule));
    prepared_ = &schedule;
  }

  size_t remaining = ops.size();
  size_t copy_cursor = 0;  // copies run in order (they rarely depend on anything)
  WaitSet& ws = wait_set_;
  // Set when the first wait starts: a call that never waits reads no clock.
  Clock::time_point last_progress{};
  Spinner spinner(config_.spin, last_progress);
  bool spinning = false;
  uint32_t idle_polls = 0;
  Clock::time_point asked_at{};  // when the peers were last asked where they are
  uint32_t seen_answers = channels_->answers();
  std::string behind;  // peers that have not reached this call, by their answers

  // Whether the previous pass moved anything (the first pass counts as
  // one that did): a receive may poll for its piece only in a pass that
  // follows an idle one and has moved nothing so far (RecvTarget::idle).
  bool moved_before = true;
  // One pass over everything; returns whether anything moved.
  auto pass = [&](bool* moved) __attribute__((always_inline))->Status {
    *moved = false;
    while (copy_cursor < copies.size() && ready(ops[copies[copy_cursor]])) {
      RunCopyOp(ops[copies[copy_cursor]]);
      complete[copies[copy_cursor]] = 1;
      ++copy_cursor;
      --remaining;
      *moved = true;
    }
    for (Queue& q : queues) {
      while (q.cursor < q.ops.size()) {
        const int idx = q.ops[q.cursor];
        const Op& op = ops[idx];
        if (!ready(op)) break;
        const size_t before = q.done;
        // The first message of a call on this connection carries (or, in
        // the receiver, is checked against) the call's descriptor.
        const bool opens = q.done == 0 && op.call != q.open_call;
        if (q.is_send) {
          Status st =
              q.channel->ProgressSend(op.src, op.bytes, opens ? &call_of(op) : nullptr, &q.done);
          if (!st.ok()) return ExplainFailure(std::move(st), q, op, call_of(op), rank);
        } else {
          RecvTarget target = RecvTargetOf(op);
          if (opens) target.opens = &call_of(op);
          target.idle = !*moved && !moved_before;
          Status st = q.channel->ProgressRecv(target, op.bytes, &q.done);
          if (!st.ok()) return ExplainFailure(std::move(st), q, op, call_of(op), rank);
        }
        if (q.done != before) *moved = true;
        if (q.done > 0) q.open_call = op.call;
        if (q.done < op.bytes) break;
        complete[idx] = 1;
        ++q.cursor;
        q.done = 0;
        --remaining;
      }
    }
    return Status::Ok();
  };

  while (remaining > 0) {
    if (channels_->aborted()) return RemoteError("communicator aborted");
    bool moved;
    BATON_RETURN_IF_ERROR(pass(&moved));
    moved_before = moved;
    if (moved || remaining == 0) {
      spinning = false;
      idle_polls = 0;
      if (!behind.empty()) behind.clear();
      continue;
    }
    // Between clock reads, a few polls with only the pause: the clock costs
    // more than a poll, and a piece seen sooner is a shorter call. So do a
    // stall's first polls, where a small message's piece is usually on its
    // way, unless the core is crowded: there the first Pause yields it to
    // the peer we wait for.
    if ((spinning || config_.spin.yield_interval.count() > 0) && (++idle_polls & 7) != 0) {
      CpuRelax();
      continue;
    }
    auto now = Clock::now();
    if (!spinning) {
      spinning = true;
      spinner.Restart(now);
      last_progress = now;
    }
    if (spinner.Pause(now)) continue;
    // A peer gave up (and said why): fail once nothing more arrives, so a
    // call whose data came before the failure still completes.
    if (channels_->note_arrived()) return channels_->FirstNote().AsStatus();
    if (now - last_progress > std::chrono::duration<double>(timeout_s_)) {
      // With connections made on first use, the culprit may be a rank this
      // one never talked to: if every peer it asked answered and is in this
      // call, a neighbour connected to the culprit times out about now and
      // names it in its note, so wait for that a little (two probes) before
      // giving a verdict that names nobody.
      const bool names_nobody =
          behind.empty() && SilentPeers(rank, asked_at).empty() && UnconnectedPeers(rank) > 0;
      if (!names_nobody ||
          now - last_progress > std::chrono::duration<double>(timeout_s_) + 2 * probe_)
        return DescribeStall(schedule, queues, calls, rank, asked_at, behind);
    }
    // A long stall: ask the peers where they are, and weigh their answers.
    if (now - last_progress >= probe_ && now - asked_at >= probe_) {
      channels_->QueryPeers();
      asked_at = now;
    }
    if (const uint32_t answers = channels_->answers(); answers != seen_answers) {
      seen_answers = answers;
      behind.clear();
      for (int p = 0; p < static_cast<int>(config_.peer_labels.size()); ++p) {
        CallState state;
        if (p == rank || !channels_->PeerState(p, asked_at, &state)) continue;
        const bool waited_on = std::any_of(queues.begin(), queues.end(), [&](const Queue& q) {
          return q.peer == p && q.cursor < q.ops.size();
        });
        BATON_RETURN_IF_ERROR(CheckPeerState(rank, p, Label(p), calls, state, &behind, waited_on));
      }
      for (const Queue& q : queues) {
        if (q.is_send || q.cursor >= q.ops.size() || !ready(ops[q.ops[q.cursor]]) ||
            q.channel->kind() != Channel::Kind::kShm)
          continue;
        CallState state;
        if (channels_->PeerState(q.peer, asked_at, &state))
          BATON_RETURN_IF_ERROR(CheckPeerMovedOn(rank, q.peer, calls, state));
      }
    }

    // Collect what the stalled queue heads wait for.
    ws.Clear();
    for (const Queue& q : queues) {
      if (q.cursor >= q.ops.size() || !ready(ops[q.ops[q.cursor]])) continue;
      if (q.channel->kind() == Channel::Kind::kShm) {
        ws.any_shm = true;
      } else {
        q.channel->AddWaitFds(q.is_send, q.peer, &ws);
      }
    }
    const auto left = std::chrono::duration<double>(timeout_s_) - (now - last_progress);
    int timeout_ms = static_cast<int>(std::chrono::duration<double, std::milli>(left).count()) + 1;
    timeout_ms = std::min<int>(timeout_ms, std::max<int>(10, probe_.count() / 2));
    uint32_t seq = 0;
    if (ws.any_shm) {
      seq = channels_->PrepareSleep();
      // Re-check after announcing the sleep: a peer that published before
      // seeing our flag will not ring.
      BATON_RETURN_IF_ERROR(pass(&moved));
      moved_before = moved;
      if (moved) {
        channels_->CancelSleep();
        spinning = false;
        continue;
      }
    }
    channels_->Wait(ws, seq, timeout_ms);
    // After a real sleep, spin again briefly: more data tends to follow.
    spinner.Restart(Clock::now());
  }
  for (Queue& q : queues) {
    if (!q.is_send) continue;
    if (q.channel->timing_call()) q.channel->CallEnded();
    q.channel->SendsEnded();
  }
  return Status::Ok();
}

}  // namespace baton
