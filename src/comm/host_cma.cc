// Single-copy collectives on ordinary buffers of one host: the registered
// path's executors (host_ipc.cc) with the peers' buffers reached through
// cross-memory attach (transport/cma.h) instead of mapped. See host_ipc.h
// for the call's protocol; docs/performance.md ("Single-copy collectives")
// for the measurements behind the piece sizes.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "base/cpu.h"
#include "base/datatype.h"
#include "base/partition.h"
#include "comm/host_ipc.h"
#include "kernels/cpu_reduce.h"
#include "transport/cma.h"

namespace baton {
namespace {

// Bytes a reduction reads from each peer per process_vm_readv: the peers'
// pieces and the result stay in the core's L2 while they are reduced and
// written out, and a call costs a few microseconds against the copy of
// hundreds of KiB.
constexpr size_t kReducePieceBytes = 256 << 10;
// A plain copy goes straight into the destination, in pieces that keep an
// abort within reach.
constexpr size_t kCopyPieceBytes = 4 << 20;

// The piece per source: the reduction's working set (one piece per rank)
// stays near kReducePieceBytes * 4 at any rank count.
size_t PieceElements(int sources, size_t elem) {
  const size_t bytes =
      std::clamp<size_t>(kReducePieceBytes * 4 / std::max(sources, 1), 64 << 10, kReducePieceBytes);
  return std::max<size_t>(1, bytes / elem);
}

struct Peers {
  const std::vector<IpcRecord>& records;
  uint64_t Address(int rank, IpcBuffer buffer, uint64_t offset) const {
    const IpcRecord& r = records[rank];
    const uint64_t base = buffer == IpcBuffer::kSend ? r.send_ptr : r.recv_ptr;
    return base == 0 ? 0 : base + offset;
  }
  int pid(int rank) const { return records[rank].pid; }
};

Status Aborted() {
  return RemoteError("communicator was aborted");
}

// Allreduce that writes everywhere, as on registered buffers: rank r reads
// piece after piece of part r of every peer's input into its cache, reduces
// them with its own into its output, and writes the result into every
// peer's output. Each input byte crosses memory once, each output byte is
// written once; only the end needs a barrier (only rank r touches part r of
// any buffer, in place included).
Status RunCmaAllReduce(ChannelSet& ch, const IpcCall& c, const void* send, void* recv,
                       const Peers& peers, double timeout_s, HostIpcState* st) {
  const int n = c.nranks, me = c.rank;
  const size_t es = DatatypeSize(c.datatype);
  const uint32_t divisor = c.op == batonAvg ? static_cast<uint32_t>(n) : 0;
  const size_t piece = PieceElements(n, es);
  // As on registered buffers: outputs are streamed only when the call's
  // buffers overflow the last-level cache.
  const bool streaming = StreamsOutputs(n, c.count * es);
  st->scratch.resize(piece * es * n);
  uint8_t* result_scratch = st->scratch.data() + (n - 1) * piece * es;
  size_t pb, pe;
  Partition(c.count, n, me, &pb, &pe);
  std::vector<const uint8_t*> inputs(n);
  const auto* own_send = static_cast<const uint8_t*>(send);
  auto* own_recv = static_cast<uint8_t*>(recv);
  for (size_t b = pb; b < pe; b += piece) {
    if (ch.aborted()) return Aborted();
    const size_t off = b * es, count = std::min(piece, pe - b), bytes = count * es;
    inputs[0] = own_send + off;
    // The peers staggered, so the ranks do not all read one peer at once.
    for (int k = 1; k < n; ++k) {
      const int q = (me + k) % n;
      uint8_t* land = st->scratch.data() + (k - 1) * piece * es;
      BATON_RETURN_IF_ERROR(
          CmaRead(peers.pid(q), land, peers.Address(q, IpcBuffer::kSend, off), bytes));
      inputs[k] = land;
    }
    // Large calls: the result goes to scratch, from where it is streamed
    // into this rank's output (no read for ownership) and written to the
    // peers'; small ones reduce straight into the output, which stays cached.
    uint8_t* result = streaming ? result_scratch : own_recv + off;
    ReduceInputs(inputs, result, count, c.datatype, c.op, divisor);
    if (streaming) {
      ReduceCopyArgs args;
      args.nsrcs = 1;
      args.srcs[0] = result;
      args.ndsts = 1;
      args.dsts[0] = own_recv + off;
      args.count = count;
      args.datatype = c.datatype;
      args.op = c.op;
      args.non_temporal = true;
      ReduceCopy(args);
    }
    for (int k = 1; k < n; ++k) {
      const int q = (me + k) % n;
      BATON_RETURN_IF_ERROR(
          CmaWrite(peers.pid(q), peers.Address(q, IpcBuffer::kRecv, off), result, bytes));
    }
  }
  ch.PublishProgress(++st->progress);
  return WaitAllProgress(ch, me, n, st->progress, timeout_s, "the end of an allreduce");
}

// One step of an IPC plan: its destination is this rank's, its sources
// this rank's or a peer's (read into scratch piece by piece, or, for a
// plain copy, straight into the destination).
Status RunCmaStep(ChannelSet& ch, const IpcCall& c, const IpcStep& step, const Peers& peers,
                  const uint8_t* own_send, uint8_t* own_recv, HostIpcState* st) {
  const size_t es = DatatypeSize(c.datatype);
  auto local = [&](const IpcRef& ref) -> uint8_t* {
    uint8_t* base = ref.buffer == IpcBuffer::kSend ? const_cast<uint8_t*>(own_send) : own_recv;
    return base == nullptr ? nullptr : base + ref.offset;
  };
  uint8_t* dst = local(step.dst);
  if (dst == nullptr || step.dst.rank != c.rank)
    return InternalError("single-copy plan writes a buffer this rank did not pass");
  for (int k = 0; k < step.nsrcs; ++k) {
    const IpcRef& ref = step.srcs[k];
    if (ref.rank == c.rank ? local(ref) == nullptr
                           : peers.Address(ref.rank, ref.buffer, ref.offset) == 0)
      return InternalError("single-copy plan reads a buffer a rank did not pass");
  }
  if (step.nsrcs == 1 && step.post_divisor <= 1 && step.srcs[0].rank != c.rank) {
    const IpcRef& ref = step.srcs[0];
    const size_t bytes = step.count * es;
    for (size_t done = 0; done < bytes; done += kCopyPieceBytes) {
      if (ch.aborted()) return Aborted();
      const size_t len = std::min(kCopyPieceBytes, bytes - done);
      BATON_RETURN_IF_ERROR(CmaRead(peers.pid(ref.rank), dst + done,
                                    peers.Address(ref.rank, ref.buffer, ref.offset + done), len));
    }
    return Status::Ok();
  }
  const size_t piece = PieceElements(step.nsrcs, es);
  st->scratch.resize(piece * es * step.nsrcs);
  for (size_t b = 0; b < step.count; b += piece) {
    if (ch.aborted()) return Aborted();
    const size_t count = std::min(piece, step.count - b), off = b * es;
    ReduceCopyArgs args;
    args.nsrcs = step.nsrcs;
    for (int k = 0; k < step.nsrcs; ++k) {
      const IpcRef& ref = step.srcs[k];
      if (ref.rank == c.rank) {
        args.srcs[k] = local(ref) + off;
        continue;
      }
      uint8_t* land = st->scratch.data() + k * piece * es;
      BATON_RETURN_IF_ERROR(CmaRead(peers.pid(ref.rank), land,
                                    peers.Address(ref.rank, ref.buffer, ref.offset + off),
                                    count * es));
      args.srcs[k] = land;
    }
    if (IsNoOpStep(step, args.srcs[0], dst + off)) continue;
    args.ndsts = 1;
    args.dsts[0] = dst + off;
    args.count = count;
    args.datatype = c.datatype;
    args.op = c.op;
    args.post_divisor = step.post_divisor;
    ReduceCopy(args);
  }
  return Status::Ok();
}

// Alltoallv: where the block for this rank starts in every rank's send
// buffer, read from the peers' own send counts and displacements; a peer
// that sends another count than this rank expects is the caller's mistake.
Status AlltoAllVSources(const IpcCall& c, const Peers& peers, std::vector<uint64_t>* offsets) {
  const int n = c.nranks, me = c.rank;
  offsets->assign(n, 0);
  std::vector<size_t> their_counts(n);
  for (int q = 0; q < n; ++q) {
    uint64_t arrays[2] = {0, 0};
    const size_t* counts = c.send_counts;
    const size_t* displs = c.send_displs;
    if (q != me) {
      std::memcpy(arrays, peers.records[q].send_handle, sizeof(arrays));
      if (arrays[0] == 0) return InternalError("alltoallv record without send counts");
      BATON_RETURN_IF_ERROR(
          CmaRead(peers.pid(q), their_counts.data(), arrays[0], n * sizeof(size_t)));
      counts = their_counts.data();
      displs = nullptr;
      if (arrays[1] != 0)
        BATON_RETURN_IF_ERROR(
            CmaRead(peers.pid(q), &(*offsets)[q], arrays[1] + me * sizeof(size_t), sizeof(size_t)));
    }
    if (counts[me] != c.counts[q])
      return InvalidUsage("alltoallv: rank " + std::to_string(q) + " sends " +
                          std::to_string(counts[me]) + " elements to rank " + std::to_string(me) +
                          ", which expects " + std::to_string(c.counts[q]));
    if (q == me && displs != nullptr) (*offsets)[q] = displs[me];
    if ((q == me ? displs : reinterpret_cast<const size_t*>(arrays[1])) == nullptr)
      for (int p = 0; p < me; ++p) (*offsets)[q] += counts[p];
  }
  return Status::Ok();
}

}  // namespace

Status RunCmaCall(ChannelSet& ch, const IpcCall& c, const void* send, void* recv,
                  const std::vector<IpcRecord>& records, double timeout_s, HostIpcState* st) {
  const Peers peers{records};
  if (c.collective == Collective::kAllReduce)
    return RunCmaAllReduce(ch, c, send, recv, peers, timeout_s, st);
  std::vector<uint64_t> offsets;
  if (c.collective == Collective::kAlltoAllV) {
    BATON_RETURN_IF_ERROR(AlltoAllVSources(c, peers, &offsets));
    IpcCall v = c;
    v.source_offsets = offsets.data();
    BuildIpcPlan(v, &st->plan);
  } else {
    BuildIpcPlan(c, &st->plan);
  }
  const auto* own_send = static_cast<const uint8_t*>(send);
  auto* own_recv = static_cast<uint8_t*>(recv);
  for (const auto& phase : st->plan.phases) {
    for (const IpcStep& step : phase)
      BATON_RETURN_IF_ERROR(RunCmaStep(ch, c, step, peers, own_send, own_recv, st));
    ch.PublishProgress(++st->progress);
    BATON_RETURN_IF_ERROR(
        WaitAllProgress(ch, c.rank, c.nranks, st->progress, timeout_s, "a collective phase"));
  }
  return Status::Ok();
}

}  // namespace baton
