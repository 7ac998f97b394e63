#include "exec/executor.h"

#include <sched.h>

#include <cstring>

#include "base/datatype.h"
#include "base/deadline.h"
#include "base/log.h"
#include "kernels/cpu_reduce.h"

namespace baton {
void RunCopyOp(const Op& op) {
  if (op.post_divisor > 1) {
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
  t.elem_size = static_cast<uint32_t>(DatatypeSize(op.datatype));
  return t;
}

void RunLocalOps(const Schedule& schedule) {
  for (const Op& op : schedule.ops)
    if (op.kind == Op::Kind::kCopy) RunCopyOp(op);
}

Status Executor::DescribeStall(const Schedule& schedule, const std::vector<Queue>& queues) const {
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
  snprintf(secs, sizeof(secs), "%g", config_.timeout_s);
  return TimeoutError(std::string("no progress for ") + secs + " s (BATON_TIMEOUT) while " +
                      waiting);
}

Status Executor::Run(const Schedule& schedule) {
  const auto& ops = schedule.ops;
  if (ops.empty()) return Status::Ok();
  std::vector<uint8_t>& complete = complete_;
  complete.assign(ops.size(), 0);
  auto ready = [&](const Op& op) {
    return (op.deps[0] < 0 || complete[op.deps[0]]) && (op.deps[1] < 0 || complete[op.deps[1]]);
  };

  // Build the per-peer queues; copies run as soon as their deps allow.
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
    }
    queues[index[op.peer]].ops.push_back(i);
  }
  // Queues past nqueues are leftovers from a bigger earlier run.
  for (size_t i = nqueues; i < queues.size(); ++i) queues[i].cursor = queues[i].ops.size();

  size_t remaining = ops.size();
  size_t copy_cursor = 0;  // copies run in order (they rarely depend on anything)
  WaitSet& ws = wait_set_;
  auto last_progress = Clock::now();
  auto spin_start = last_progress;
  auto last_yield = last_progress;
  bool spinning = false;

  // One pass over everything; returns whether anything moved.
  auto pass = [&](bool* moved) -> Status {
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
        if (q.is_send) {
          BATON_RETURN_IF_ERROR(q.channel->ProgressSend(op.src, op.bytes, &q.done));
        } else {
          BATON_RETURN_IF_ERROR(q.channel->ProgressRecv(RecvTargetOf(op), op.bytes, &q.done));
        }
        if (q.done != before) *moved = true;
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
    if (moved || remaining == 0) {
      spinning = false;
      continue;
    }
    auto now = Clock::now();
    if (!spinning) {
      spinning = true;
      spin_start = now;
      last_progress = now;
    }
    if (now - spin_start < config_.spin) {
      // Poll with pause, but hand the core over every yield_interval: a
      // descheduled peer (or anything else waiting for this core) runs then
      // instead of at the next tick, while on an idle core sched_yield
      // returns at once and costs one syscall per interval.
      if (config_.yield && now - last_yield >= config_.yield_interval) {
        sched_yield();
        last_yield = now;
      } else {
        CpuRelax();
      }
      continue;
    }
    if (now - last_progress > std::chrono::duration<double>(config_.timeout_s))
      return DescribeStall(schedule, queues);

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
    const auto left = std::chrono::duration<double>(config_.timeout_s) - (now - last_progress);
    int timeout_ms = static_cast<int>(std::chrono::duration<double, std::milli>(left).count()) + 1;
    timeout_ms = std::min(timeout_ms, 1000);
    uint32_t seq = 0;
    if (ws.any_shm) {
      seq = channels_->PrepareSleep();
      // Re-check after announcing the sleep: a peer that published before
      // seeing our flag will not ring.
      BATON_RETURN_IF_ERROR(pass(&moved));
      if (moved) {
        channels_->CancelSleep();
        spinning = false;
        continue;
      }
    }
    channels_->Wait(ws, seq, timeout_ms);
    // After a real sleep, spin again briefly: more data tends to follow.
    spin_start = Clock::now();
  }
  return Status::Ok();
}

}  // namespace baton
