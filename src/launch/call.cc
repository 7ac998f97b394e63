#include "launch/call.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "algorithms/barrier.h"
#include "algorithms/ipc_plan.h"
#include "algorithms/point_to_point.h"
#include "base/cpu.h"
#include "base/datatype.h"
#include "base/log.h"
#include "comm/stream.h"
#include "cuda/cuda_device.h"
#include "launch/group.h"
#include "launch/premul.h"
#include "tuning/select.h"

namespace baton {
namespace {

// What builds a call's schedule from its arguments: an algorithm's builder,
// or (build == nullptr) a send to or receive from `peer`. A plain value, so
// that the synchronous path can run it without allocating.
struct Builder {
  BuildFn build = nullptr;
  int peer = -1;
  bool is_send = false;
  CallDescriptor call;  // what the call's first message on each connection carries
  // PreMulSum: the sum with this rank's input scaled (launch/premul.h).
  bool premul = false;
  Collective collective = Collective::kAllReduce;
  PreMulScalar scalar;
  // Buffers registered on this rank (batonCommRegister): the communicator
  // may run the call in place on them (comm/host_ipc.h).
  // Set only for the calls that take it: held by pointer so that making an
  // ordinary call does not clear the record's 184 bytes (the latency path).
  std::shared_ptr<const RegisteredCall> registered;
  // A small allreduce that the lines may carry (comm/lines.cc).
  bool lines = false;
  // The call's own timeout, taken when it is made (batonCommSetCallTimeout;
  // < 0: the communicator's).
  double timeout_s = -1;

  void operator()(const CollArgs& a, Schedule* s) const {
    s->LimitTimeout(timeout_s);
    const size_t first = s->ops.size();
    const auto index = static_cast<uint16_t>(s->calls.size());
    if (premul) [[unlikely]] {
      BuildPreMulSum(collective, scalar, build, a, s);
    } else if (build != nullptr) {
      build(a, s);
    } else if (is_send) {
      BuildSend(a, peer, s);
    } else {
      BuildRecv(a, peer, s);
    }
    if (index > 0)  // ops start with call 0
      for (size_t i = first; i < s->ops.size(); ++i) s->ops[i].call = index;
    s->calls.emplace_back();
    CopyCallDescriptor(&s->calls.back(), call);
    if (lines && index == 0)
      s->lines = {.valid = true,
                  .send = a.send,
                  .recv = a.recv,
                  .count = a.count,
                  .datatype = a.datatype,
                  .op = a.op};
    if (registered && index == 0) [[unlikely]] {
      s->registered = *registered;
      // Ordinary buffers are read where the schedule's arguments point,
      // which is the staging copy when device buffers are staged.
      if (registered->ordinary || registered->copy_in) {
        s->registered.send = a.send;
        s->registered.recv = a.recv;
        const Collective coll = registered->call.collective;
        if ((coll == Collective::kAlltoAll || coll == Collective::kAlltoAllV) && a.send == a.recv)
          s->registered.valid = false;  // a peer may still read the block this rank overwrites
      }
    }
  }
};

// One call, ready to route.
struct Call {
  CollArgs args;
  Builder builder;
  CudaCallBuffers buffers;                  // what the call touches on this rank (device path)
  const IpcCall* ipc = nullptr;             // collectives: the call as CUDA IPC sees it
  Launch::Self self = Launch::Self::kNone;  // a send to or receive from this rank
  // The v-collectives' counts and displacements, which args point into:
  // kept with the builder for as long as a queued call needs them.
  std::shared_ptr<const std::vector<size_t>> vcounts;
};

// A call queued on a host stream is its task's closure, with its
// communicator: it must fit the stream's slot to cost no allocation.
static_assert(sizeof(Call) + sizeof(std::shared_ptr<Communicator>) <= HostStream::kTaskBytes);

// Whether the call may reuse the schedule of the previous one with the
// same key: not where the schedule depends on more than the key holds, a
// PreMulSum scalar, a registration, or a v-collective's counts (copied per
// call, so equal pointers may hold other counts), nor on staged buffers.
bool Repeatable(const Call& call) {
  const Builder& b = call.builder;
  const CudaCallBuffers& buf = call.buffers;
  return !b.premul && b.registered == nullptr && call.args.counts == nullptr &&
         call.args.send_counts == nullptr && buf.send == call.args.send &&
         buf.recv == call.args.recv;
}

Communicator::RepeatKey RepeatKeyOf(const Call& call) {
  const Builder& b = call.builder;
  const CudaCallBuffers& buf = call.buffers;
  const auto s = reinterpret_cast<uintptr_t>(buf.send), r = reinterpret_cast<uintptr_t>(buf.recv);
  Communicator::RepeatKey key{.args = call.args,
                              .recv_from_send = s != 0 && r != 0 ? static_cast<intptr_t>(r - s) : 0,
                              .has_send = s != 0,
                              .has_recv = r != 0,
                              .send_bytes = buf.send_bytes,
                              .recv_bytes = buf.recv_bytes,
                              .build = b.build,
                              .peer = b.peer,
                              .is_send = b.is_send,
                              .call = b.call,
                              .timeout_s = b.timeout_s};
  key.args.send = nullptr;
  key.args.recv = nullptr;
  return key;
}

// The one routing decision: the device path takes device buffers and CUDA
// streams; on the host a call runs here and now (no stream, no group), is
// queued on its host stream, or waits for batonGroupEnd.
Status Route(const CallSite& site, const Call& call) {
  const bool self = call.self != Launch::Self::kNone;
  bool on_device = false;
  StagedPart device;
  if (CudaDeviceAvailable()) {
    StagedBuilder staged = [args = call.args, builder = call.builder, keep = call.vcounts](
                               const void* send, void* recv, Schedule* s) {
      CollArgs staged_args = args;
      staged_args.send = send;
      staged_args.recv = recv;
      builder(staged_args, s);
    };
    Status st;
    switch (CudaTryLaunch(site.comm, site.stream, site.host_stream, InGroup() || self, call.buffers,
                          staged, call.ipc, &st)) {
      case CudaRoute::kDone:
        return st;
      case CudaRoute::kQueue:
        on_device = true;
        device = {call.buffers, std::move(staged)};
        break;
      case CudaRoute::kHost:
        break;
    }
  }
  const bool repeatable = !self && !on_device && !InGroup() && Repeatable(call);
  if (!self && !on_device && site.stream == nullptr && !InGroup()) {
    // Synchronous: build (if at all) and run right here. Capturing by
    // reference keeps the builder within std::function's inline storage,
    // so the latency path allocates nothing.
    auto build = [&call](Schedule* s) { call.builder(call.args, s); };
    if (repeatable)
      return site.comm->RunRepeatable(RepeatKeyOf(call), call.buffers.send, call.buffers.recv,
                                      build);
    return site.comm->Run(build);
  }
  if (repeatable) {
    // On a host stream: the worker reuses the schedule as a synchronous
    // caller does. The call is the task's closure, kept in the stream's
    // slot, so a queued call allocates nothing either.
    Call queued = call;
    queued.ipc = nullptr;  // the caller's; routing is done
    return RunOrQueue(site.comm, site.stream, [call = std::move(queued)](Communicator& c) {
      return c.RunRepeatable(RepeatKeyOf(call), call.buffers.send, call.buffers.recv,
                             [&call](Schedule* s) { call.builder(call.args, s); });
    });
  }
  Launch l;
  l.comm = site.comm;
  l.stream = site.stream;
  l.on_device = on_device;
  l.device = std::move(device);
  if (self) {
    l.self = call.self;
    l.self_src = call.args.send;
    l.self_dst = call.args.recv;
    l.self_bytes = call.args.count * DatatypeSize(call.args.datatype);
  } else if (!on_device) {
    l.build = [args = call.args, builder = call.builder, keep = call.vcounts](Schedule* s) {
      builder(args, s);
    };
  }
  return Submit(std::move(l));
}

// Marks a collective whose buffers this rank registered in shareable
// memory; the communicator then agrees with its peers whether all are
// (comm/host_ipc.h). Alltoall is left out: its IPC plan must not run in
// place. Calls smaller than BATON_REGISTERED_MIN_BYTES take the ordinary
// path: the registered path synchronizes the ranks three times per call
// (the records, the chunks, the end), about 1 us on 2 ranks against 0.25 us
// for a small ordinary allreduce; it wins from 16-32 KiB there, from 64 KiB
// where ranks outnumber cores (tuning/select.h, RegisteredMinBytes).
// A call's size is the same on every rank, so all decide alike.
void MarkRegistered(const Communicator& comm, const CollectiveCall& c, const IpcCall& ipc,
                    size_t bytes, Call* call) {
  if (bytes < comm.registered_min_bytes() || bytes == 0 || c.collective == Collective::kAlltoAll)
    return;
  RegisteredCall rc;
  rc.call = ipc;
  rc.send = c.send;
  rc.recv = c.recv;
  const CudaCallBuffers& b = call->buffers;
  if (b.send_bytes != 0 &&
      !comm.registrations().FindShareable(c.send, b.send_bytes, &rc.send_alloc))
    return;
  if (b.recv_bytes != 0 &&
      !comm.registrations().FindShareable(c.recv, b.recv_bytes, &rc.recv_alloc))
    return;
  rc.valid = true;
  call->builder.registered = std::make_shared<const RegisteredCall>(rc);
}

// Marks a collective on ordinary buffers for the single-copy path
// (comm/host_cma.cc) when the communicator offers it (every rank on one
// host, BATON_CMA_COLL, not refused by the kernel) and the call is at least
// BATON_CMA_COLL_MIN_BYTES, below which the slot rings are faster
// (docs/performance.md, "Single-copy collectives"). The size is the same on
// every rank; where a rank decides otherwise anyway, the call's mailbox
// exchange sends every rank the ordinary way.
void MarkSingleCopy(const Communicator& comm, const IpcCall& ipc, size_t bytes, Call* call) {
  if (bytes < comm.config().cma_coll_min_bytes || bytes == 0 || !comm.single_copy_open()) return;
  RegisteredCall rc;
  rc.call = ipc;
  rc.ordinary = true;
  rc.valid = true;
  call->builder.registered = std::make_shared<const RegisteredCall>(rc);
}

// Marks an allreduce on ordinary buffers for the copy-in path
// (comm/copy_in.cc) when the communicator offers it and the call's size is
// in Communicator::copy_in_min_bytes..BATON_COPY_IN_MAX_BYTES (0: no limit; the same on every
// rank; where a rank decides otherwise anyway, the call's mailbox exchange
// sends every rank the ordinary way). The other collectives stay on the
// slots: copied in, they measured no faster (docs/performance.md).
void MarkCopyIn(const Communicator& comm, const IpcCall& ipc, size_t bytes, Call* call) {
  const CommConfig& config = comm.config();
  if (ipc.collective != Collective::kAllReduce || bytes < comm.copy_in_min_bytes() ||
      (config.copy_in_max_bytes != 0 && bytes > config.copy_in_max_bytes) || bytes == 0 ||
      !comm.copy_in_open())
    return;
  RegisteredCall rc;
  rc.call = ipc;
  rc.copy_in = true;
  rc.valid = true;
  call->builder.registered = std::make_shared<const RegisteredCall>(rc);
}

}  // namespace

namespace {

// A v-collective's arrays copied into one block (the caller's may be gone
// when a queued call runs), args pointed at them; *total: the elements of
// the receive side's blocks, *buffers: the extents the call touches.
void SetVariableCounts(const CollectiveCall& c, int nranks, int rank, size_t elem, Call* call,
                       size_t* total) {
  const auto n = static_cast<size_t>(nranks);
  auto block = std::make_shared<std::vector<size_t>>(4 * n, 0);
  auto take = [&](const size_t* from, size_t slot) -> const size_t* {
    if (from == nullptr) return nullptr;
    std::copy(from, from + n, block->begin() + slot * n);
    return block->data() + slot * n;
  };
  CollArgs& a = call->args;
  a.counts = take(c.counts, 0);
  a.displs = take(c.displs, 1);
  a.send_counts = take(c.send_counts, 2);
  a.send_displs = take(c.send_displs, 3);
  call->vcounts = std::move(block);
  // The farthest end of the blocks of `counts` at `displs` (packed: null).
  auto extent = [&](const size_t* counts, const size_t* displs) {
    size_t end = 0, packed = 0;
    for (size_t r = 0; r < n; ++r) {
      if (counts[r] > 0) end = std::max(end, (displs ? displs[r] : packed) + counts[r]);
      packed += counts[r];
    }
    return end * elem;
  };
  *total = 0;
  for (size_t r = 0; r < n; ++r) *total += a.counts[r];
  CudaCallBuffers& b = call->buffers;
  b.send = c.send;
  b.recv = c.recv;
  switch (c.collective) {
    case Collective::kAllGatherV:
      b.send_bytes = a.counts[rank] * elem;
      b.recv_bytes = extent(a.counts, a.displs);
      break;
    case Collective::kReduceScatterV:
      b.send_bytes = *total * elem;
      b.recv_bytes = a.counts[rank] * elem;
      break;
    default:  // alltoallv
      b.send_bytes = extent(a.send_counts, a.send_displs);
      b.recv_bytes = extent(a.counts, a.displs);
      break;
  }
  // Blocks with gaps between them: the gaps must come back as they were.
  b.preserve_recv = c.collective != Collective::kReduceScatterV && b.recv_bytes != *total * elem;
}

}  // namespace

Status LaunchCollective(const CallSite& site, const CollectiveCall& c) {
  const Communicator& comm = *site.comm;
  const size_t elem = DatatypeSize(c.datatype);
  // A PreMulSum call is a sum of scaled inputs; its descriptor names the op
  // kind (any rank's handle value may differ), so a rank calling with sum
  // while another uses PreMulSum is a mismatch. (The arguments are made in
  // place: assigning them after the rest is cleared stalls the stores.)
  Call call{.args = comm.MakeArgs(c.send, c.recv, c.count, c.datatype, c.premul ? batonSum : c.op,
                                  c.root),
            .builder = {},
            .buffers = {},
            .ipc = nullptr,
            .self = Launch::Self::kNone,
            .vcounts = nullptr};
  size_t count = c.count;  // what the descriptor says
  uint32_t counts_hash = 0;
  size_t bytes;
  if (HasVariableCounts(c.collective)) {
    size_t total = 0;
    SetVariableCounts(c, comm.nranks(), comm.rank(), elem, &call, &total);
    bytes = total * elem;
    // Every rank passes the same counts to allgatherv and reducescatterv;
    // an alltoallv's differ per rank, so only the sizes of the messages can
    // tell a mismatch there.
    if (c.collective == Collective::kAlltoAllV) {
      count = 0;
    } else {
      count = total;
      counts_hash = HashCounts(c.counts, comm.nranks());
    }
  } else {
    bytes = c.count * elem * (CountIsPerRank(c.collective) ? comm.nranks() : 1);
    call.buffers = CudaBuffersFor(c.collective, c.send, c.recv, c.count, elem, comm.nranks(),
                                  comm.rank(), c.root);
  }
  const Choice& choice = comm.selection().Lookup(c.collective, c.datatype, bytes);
  if (choice.build == nullptr) return comm.selection().NothingAllowed(c.collective);
  BATON_TRACE(kLogColl, "%s: %zu bytes with %s (chunk %u, inter-host %s)",
              CollectiveName(c.collective), bytes, AlgorithmName(choice.algorithm),
              choice.chunk_bytes, AlgorithmName(choice.inter));
  call.builder.build = choice.build;
  call.builder.timeout_s = comm.call_timeout();
  call.builder.premul = c.premul;
  call.builder.collective = c.collective;
  call.builder.scalar = c.scalar;
  const uint8_t op_code = c.premul ? kCallOpPreMulSum : static_cast<uint8_t>(c.op);
  MakeCallDescriptor(&call.builder.call,
                     static_cast<uint8_t>(kCallKindCollectiveBase + static_cast<int>(c.collective)),
                     count, static_cast<uint8_t>(c.datatype), op_code, c.root,
                     static_cast<uint8_t>(choice.algorithm), false, counts_hash);
  ApplyChoice(choice, &call.args);
  const CommTopology& topo = comm.topology();
  call.args.stream_outputs =
      StreamsOutputs(topo.host_ranks()[topo.host_of(comm.rank())].size(), bytes);
  call.args.sends_buffered_bytes = comm.sends_buffered_bytes();
  // CUDA IPC plans exist for the collectives of the uniform kind that
  // predate gather and scatter; the others stage device buffers.
  const IpcCall ipc{c.collective, c.count, c.datatype, c.op, c.root, comm.rank(), comm.nranks()};
  // CUDA IPC reduces in device kernels straight from the peers' inputs,
  // where no scaled copy exists: PreMulSum takes the staged path.
  call.ipc = static_cast<int>(c.collective) <= static_cast<int>(Collective::kAlltoAll) && !c.premul
                 ? &ipc
                 : nullptr;
  // The single-pass paths replace the table's algorithm; where BATON_ALGO
  // chooses this collective's, the call runs as asked (as for copy-in,
  // CopyInChosen), as NCCL_ALGO holds for registered buffers too.
  const bool algorithm_open = !comm.config().algorithms.Restricts(c.collective);
  // The lines first (comm/lines.cc): small allreduces between ranks that all
  // share memory, whatever buffers each rank passes, so every rank decides
  // alike (the size is the same everywhere; registration may not be).
  // PreMulSum's scaled inputs (no IpcCall) stay on the slots.
  call.builder.lines = call.ipc != nullptr && c.collective == Collective::kAllReduce &&
                       algorithm_open && bytes != 0 && bytes <= comm.lines_max_bytes();
  if (call.builder.lines) return Route(site, call);
  if (call.ipc != nullptr && algorithm_open && !comm.registrations().empty()) [[unlikely]]
    MarkRegistered(comm, c, ipc, bytes, &call);
  if (call.ipc != nullptr && !call.builder.registered) {
    if (algorithm_open) MarkSingleCopy(comm, ipc, bytes, &call);
    if (!call.builder.registered) MarkCopyIn(comm, ipc, bytes, &call);
  } else if (HasVariableCounts(c.collective) && algorithm_open) {
    // The v-collectives' plans take the counts; the records carry the
    // counts' hash where a rooted call has its root, so ranks that pass
    // different counts fail as on the ordinary path instead of reading
    // blocks that are not there.
    IpcCall v = ipc;
    v.count = count;
    v.root = static_cast<int>(counts_hash);
    v.counts = call.args.counts;
    v.displs = call.args.displs;
    v.send_counts = call.args.send_counts;
    v.send_displs = call.args.send_displs;
    MarkSingleCopy(comm, v, bytes, &call);
  }
  return Route(site, call);
}

Status LaunchPointToPoint(const CallSite& site, bool is_send, const void* sendbuff, void* recvbuff,
                          size_t count, batonDataType_t datatype, int peer) {
  const Communicator& comm = *site.comm;
  Call call;
  call.args = comm.MakeArgs(sendbuff, recvbuff, count, datatype);
  call.builder.peer = peer;
  call.builder.is_send = is_send;
  call.builder.timeout_s = comm.call_timeout();
  MakeCallDescriptor(&call.builder.call, kCallKindPointToPoint, count,
                     static_cast<uint8_t>(datatype), 0, peer, 0, is_send);
  const size_t bytes = count * DatatypeSize(datatype);
  if (is_send) {
    call.buffers.send = sendbuff;
    call.buffers.send_bytes = bytes;
  } else {
    call.buffers.recv = recvbuff;
    call.buffers.recv_bytes = bytes;
  }
  if (peer == comm.rank()) call.self = is_send ? Launch::Self::kSend : Launch::Self::kRecv;
  return Route(site, call);
}

Status LaunchRecvAny(const CallSite& site, void* recvbuff, size_t count, batonDataType_t datatype,
                     int* source) {
  // A group launches its calls together, all peers known: a receive whose
  // peer is learnt only while it runs cannot join that schedule.
  if (InGroup())
    return InvalidUsage(
        "batonRecvAny cannot be called inside batonGroupStart/batonGroupEnd (its peer is known "
        "only once a send arrives); call it outside the group, or batonRecv with the peer");
  if (site.stream != nullptr && !site.host_stream)
    return InvalidUsage("batonRecvAny takes host buffers on the NULL stream or a host stream");
  Builder builder;
  MakeCallDescriptor(&builder.call, kCallKindPointToPoint, count, static_cast<uint8_t>(datatype), 0,
                     0, 0, false);
  const CollArgs args = site.comm->MakeArgs(nullptr, recvbuff, count, datatype);
  auto build = [args, builder](int peer, Schedule* s) {
    Builder b = builder;
    b.peer = peer;
    b.call.root = peer;  // the peer, until the communicator numbers the call
    b(args, s);
  };
  if (site.stream == nullptr) return site.comm->RunAnySource(count, datatype, build, source);
  std::shared_ptr<Communicator> comm = site.comm;
  comm->AddPending();
  site.stream->impl.Enqueue([comm, count, datatype, build, source]() {
    SetLogRank(comm->rank());
    Status st = comm->RunAnySource(count, datatype, build, source);
    if (!st.ok()) comm->set_last_error(st.message());
    comm->RemovePending();
    return st;
  });
  return Status::Ok();
}

Status LaunchBarrier(const CallSite& site) {
  Call call;
  call.args = site.comm->MakeArgs();
  call.builder.build = BuildDisseminationBarrier;
  call.builder.timeout_s = site.comm->call_timeout();
  MakeCallDescriptor(&call.builder.call, kCallKindBarrier, 0, batonUint8, 0, 0, 0, false);
  return Route(site, call);
}

}  // namespace baton
