// Small allreduces on the lines (ShmLines in transport/shm.h): where every
// rank shares memory with every other, each rank copies its input into its
// own segment's buffer for the call, beside the call's number, and reduces
// everyone's inputs straight from the peers' buffers. One meeting per call
// and one line crossing per peer for an input of up to 32 bytes, without
// the executor's queues: recursive doubling over the slots meets log2(n)
// times, and where ranks outnumber cores each meeting can cost a context
// switch (docs/performance.md, "Small allreduces on the lines").
//
// The reduction follows recursive doubling's order (algorithms/rhd.h): the
// pairs folded first, then a balanced tree over the ranks in order, lower
// operand first, one rounding per step. So every rank gets the same bits,
// and the same bits as the slots give.
#include <bit>
#include <cstddef>
#include <cstring>
#include <functional>
#include <string>

#include "algorithms/ipc_record.h"
#include "base/cpu.h"
#include "base/datatype.h"
#include "base/log.h"
#include "comm/comm.h"
#include "comm/peer_wait.h"
#include "exec/call_check.h"
#include "exec/executor.h"
#include "kernels/cpu_reduce.h"
#include "transport/shm.h"
#include "tuning/select.h"

namespace baton {
namespace {

static_assert(kShmLineBytes >= kLinesCapacityBytes, "the lines hold what LinesMaxBytes allows");

// Polls of a peer's line with only the pause, before the wait proper.
constexpr int kFastPolls = 64;

// c.recv = the inputs (one per rank, in rank order, at least two) reduced
// as recursive doubling reduces them; `scratch` holds the partial results.
void ReduceAsDoubling(const std::vector<const uint8_t*>& inputs, const LinesCall& c, size_t bytes,
                      std::vector<uint8_t>* scratch, std::vector<const uint8_t*>* values) {
  const int n = static_cast<int>(inputs.size());
  const int p2 = static_cast<int>(std::bit_floor(static_cast<unsigned>(n))), folded = n - p2;
  const uint32_t divisor = c.op == batonAvg ? static_cast<uint32_t>(n) : 0;
  auto* out = static_cast<uint8_t*>(c.recv);
  if (scratch->size() < static_cast<size_t>(p2) * bytes) scratch->resize(p2 * bytes);
  values->resize(p2);
  // The participants of the power-of-two steps: rank 2i + 1 holding the
  // pair (2i, 2i + 1) for i < folded, then the ranks from 2 folded on.
  for (int i = 0; i < folded; ++i) {
    uint8_t* dst = scratch->data() + i * bytes;
    ReduceInto(dst, inputs[2 * i], inputs[2 * i + 1], c.count, c.datatype, c.op);
    (*values)[i] = dst;
  }
  for (int j = 2 * folded; j < n; ++j) (*values)[j - folded] = inputs[j];
  for (int stride = 1; stride < p2; stride *= 2) {
    const bool last = 2 * stride == p2;
    for (int i = 0; i < p2; i += 2 * stride) {
      uint8_t* dst = last ? out : scratch->data() + i * bytes;
      ReduceInto(dst, (*values)[i], (*values)[i + stride], c.count, c.datatype, c.op,
                 last ? divisor : 0);
      (*values)[i] = dst;
    }
  }
}

}  // namespace

Status Communicator::OtherPathError(const ChannelSet& ch, int q, size_t bytes) const {
  const CallDescriptor& mine = numbered_[0];
  const std::string us = "rank " + std::to_string(rank_), them = "rank " + std::to_string(q);
  const std::string head = "collective mismatch between " + them + " and " + us + ": ";
  CallMismatch found;
  found.kind = CallMismatch::Kind::kOtherCall;
  if (ch.ReadPeerDescriptor(q, collective_seq_, &found.theirs)) {
    if (found.theirs == mine)  // the same call, on the slots there
      return InvalidUsage(head + "both called " + DescribeCall(mine) + " but " + us +
                          " ran it on the lines and " + them +
                          " did not (BATON_LINES_MAX_BYTES and the tuning settings must be the "
                          "same on every rank)");
    return CallMismatchError(rank_, q, mine, found, bytes);
  }
  IpcRecord record;
  if (ch.ReadPeerCall(q, collective_seq_, &record, sizeof(record)) == ChannelSet::PeerCall::kRecord)
    return InvalidUsage(head + them + " called " + DescribeIpcRecord(record) + ", " + us + " " +
                        DescribeCall(mine));
  return InvalidUsage(head + us + " called " + DescribeCall(mine) + " and " + them +
                      " a call of another size or kind (the ranks called different collectives "
                      "or counts)");
}

Status Communicator::RunLinesLocked(const Schedule& schedule) {
  ChannelSet& ch = *channels_;
  const double timeout_s = schedule.timeout_s >= 0 ? schedule.timeout_s : config_.timeout_s;
  if (!lines_connected_) [[unlikely]] {
    // Every rank reads every peer's segment (mapped as a pair connects).
    if (Status st = ch.ConnectAll(DeadlineIn(timeout_s)); !st.ok()) return Fail(std::move(st));
    lines_connected_ = true;
    BATON_INFO(kLogColl,
               "lines allreduce: %d ranks read each other's inputs of up to %llu bytes from their "
               "segments",
               nranks_, static_cast<unsigned long long>(lines_max_bytes_));
  }
  const LinesCall& c = schedule.lines;
  const size_t bytes = c.count * DatatypeSize(c.datatype);
  const uint64_t call = ++lines_calls_;
  ch.set_lines_unfinished(call);

  // 1. The input and the numbered call into this rank's buffer, published
  // before the mailbox says this rank is in the collective: a peer that
  // sees it there without a line for it knows it took another path.
  record_published_ = true;  // the mailbox after the line
  NumberCalls(schedule);
  record_published_ = false;
  ShmLineBuffer* mine = &ch.OwnLines()->buffer[call & 1];
  std::memcpy(mine->data, c.send, bytes);
  mine->descriptor = numbered_[0];
  ch.PublishLine(mine, call);
  ch.PublishCall(collective_seq_, numbered_[0]);
  auto fail = [&](Status st) {
    EndCalls(st.code());
    return Fail(std::move(st));
  };
  if (config_.check) [[unlikely]] {
    if (Status st = CheckAgreementLocked(schedule.timeout_s); !st.ok()) return fail(std::move(st));
  }

  // 2. Every peer's line for this call, in rank order.
  lines_inputs_.resize(nranks_);
  for (int q = 0; q < nranks_; ++q) {
    if (q == rank_) {
      lines_inputs_[q] = static_cast<const uint8_t*>(c.send);
      continue;
    }
    const ShmLines* lines = ch.PeerLines(q);
    const ShmLineBuffer* line = &lines->buffer[call & 1];
    auto published = [&] { return line->call.load(std::memory_order_acquire) == call; };
    // The peer gave up its communicator before it finished this call.
    auto gave_up = [&] {
      const uint64_t at = lines->gave_up.load(std::memory_order_acquire);
      return at != 0 && at <= call;
    };
    // A small call's line is usually on its way: poll it alone first (no
    // clock, no other line), unless the core is crowded, where the wait
    // below gives the core to the peer at once.
    if (!published() && ch.spin_policy().yield_interval.count() > 0)
      for (int i = 0; i < kFastPolls && !published(); ++i) CpuRelax();
    if (!published()) {
      bool elsewhere = false;
      uint32_t polls = 0;
      // (Words made only for an error: a crowded core waits here on most calls.)
      const std::function<std::string()> stall = [&] {
        return DescribeCall(numbered_[0]) + " while waiting for rank " + std::to_string(q) +
               "'s input on its lines";
      };
      const PeerJudge judge = [&](int peer, const CallState& state, std::string* behind) {
        return CheckPeerState(rank_, peer, executor_->Label(peer), numbered_, state, behind);
      };
      Status st = WaitForPeer(
          ch, q, timeout_s, "collective " + std::to_string(collective_calls_),
          [&] {
            if (published() || gave_up()) return true;
            // In this collective or past it, and no line for it: the peer
            // ran it on the slots, so it called something else. Looked at
            // now and then only: reading the peer's mailbox line makes its
            // next store there fetch the line back.
            if ((++polls & 255) != 0) return false;
            elsewhere = ch.PeerReached(q, collective_seq_) && !published() && !gave_up();
            return elsewhere;
          },
          &judge, timeout_s != config_.timeout_s, &stall);
      if (!st.ok()) return fail(std::move(st));
      if (elsewhere) return fail(OtherPathError(ch, q, bytes));
    }
    if (gave_up()) [[unlikely]] {  // before it finished this call: it fails there
      FailureNote note;
      ch.SweepControl();
      if (ch.NoteFrom(q, &note)) return fail(note.AsStatus());
      return fail(RemoteError("rank " + std::to_string(q) + " gave up the communicator during " +
                              DescribeCall(numbered_[0])));
    }
    if (line->descriptor != numbered_[0]) [[unlikely]] {
      CallMismatch found;
      found.kind = CallMismatch::Kind::kOtherCall;
      found.theirs = line->descriptor;
      return fail(CallMismatchError(rank_, q, numbered_[0], found, bytes));
    }
    lines_inputs_[q] = line->data;
  }

  // 3. Reduce. Nobody overwrites these inputs before this rank publishes its
  // next call's (ShmLines).
  ReduceAsDoubling(lines_inputs_, c, bytes, &lines_scratch_, &lines_values_);
  // The peers read this rank's other buffer a call ago and are done with it
  // (they published this call's lines since): take its lines back now, so
  // that the next call's stores, and the fence after them, wait for no
  // other core (as the slots do at a run's end, ShmChannel::SendsEnded).
  const auto* next = reinterpret_cast<const uint8_t*>(&ch.OwnLines()->buffer[(call + 1) & 1]);
  constexpr size_t kLine = 64;  // the shortest line of the CPUs Baton runs on
  for (size_t at = 0; at < offsetof(ShmLineBuffer, data) + bytes; at += kLine)
    PrefetchForWrite(next + at);
  ch.set_lines_unfinished(call + 1);
  EndCalls(batonSuccess);
  return Status::Ok();
}

}  // namespace baton
