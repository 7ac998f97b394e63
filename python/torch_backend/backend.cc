#include "backend.h"

#include "shared_allocator.h"
#include "tensors.h"

#include <torch/csrc/distributed/c10d/Types.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace baton_torch {
namespace {

constexpr char kUniqueIdKey[] = "baton_unique_id";

// Every live backend, for ShutdownAll.
std::mutex live_mutex;
std::vector<BatonBackend*>& LiveBackends() {
  static auto* live = new std::vector<BatonBackend*>();  // never destroyed: used at exit
  return *live;
}

}  // namespace

thread_local bool BlockingCall::blocking_ = false;
thread_local std::chrono::milliseconds BlockingCall::timeout_ = c10d::kUnsetTimeout;

// ---- BatonBackend ----

BatonBackend::BatonBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                           std::chrono::milliseconds timeout)
    : c10d::Backend(rank, size), timeout_(timeout) {
  batonUniqueId id{};
  if (rank == 0) {
    Check(batonGetUniqueId(&id), "getting a unique id");
    store->set(kUniqueIdKey, std::vector<uint8_t>(id.internal, id.internal + sizeof id.internal));
  } else {
    std::vector<uint8_t> bytes = store->get(kUniqueIdKey);
    TORCH_CHECK(bytes.size() == sizeof id.internal, "baton backend: the store holds a ",
                bytes.size(), "-byte unique id, expected ", sizeof id.internal);
    std::memcpy(id.internal, bytes.data(), sizeof id.internal);
  }
  batonConfig_t config = BATON_CONFIG_INITIALIZER;
  config.commName = "torch";
  // Baton's timeout is whole seconds without progress; round up.
  config.timeout = static_cast<int>(std::max<int64_t>(1, (timeout.count() + 999) / 1000));
  batonComm_t comm = nullptr;
  Check(batonCommInitRankConfig(&comm, size, id, rank, &config), "creating the communicator");
  comm_ = comm;
  try {
    runner_ = std::make_unique<StreamRunner>(comm);
  } catch (...) {
    batonCommDestroy(comm_.exchange(nullptr));
    throw;
  }
  // Tensors in registered memory (baton.torch.use_registered_memory) are
  // registered on every group's communicator, this one's from now on.
  SharedCpuAllocator::Pool().Attach(comm);
  std::lock_guard<std::mutex> lock(live_mutex);
  LiveBackends().push_back(this);
}

BatonBackend::~BatonBackend() {
  {
    std::lock_guard<std::mutex> lock(live_mutex);
    auto& live = LiveBackends();
    live.erase(std::remove(live.begin(), live.end(), this), live.end());
  }
  shutdown();
}

void BatonBackend::ShutdownAll() {
  std::lock_guard<std::mutex> lock(live_mutex);
  for (BatonBackend* backend : LiveBackends()) backend->runner_->Stop();
}

void BatonBackend::shutdown() {
  runner_->Stop();
  if (batonComm_t comm = comm_.exchange(nullptr)) {
    SharedCpuAllocator::Pool().Detach(comm);
    batonCommDestroy(comm);
  }
}

void BatonBackend::abort() {
  // The calls in flight fail at once; those queued later find no communicator.
  if (batonComm_t comm = comm_.exchange(nullptr)) {
    SharedCpuAllocator::Pool().Detach(comm);
    batonCommAbort(comm);
  }
  runner_->Stop();
}

c10::intrusive_ptr<c10d::Backend> BatonBackend::split(const c10::intrusive_ptr<c10d::Store>& store,
                                                      const std::vector<int>& ranks,
                                                      const c10::intrusive_ptr<Options>& opts) {
  auto me = std::find(ranks.begin(), ranks.end(), getRank());
  if (me == ranks.end()) return nullptr;
  for (int r : ranks) {
    TORCH_CHECK(r >= 0 && r < getSize(), "baton backend: split: rank ", r,
                " is not a rank of this group of ", getSize());
  }
  std::chrono::milliseconds timeout = opts ? opts->timeout : timeout_;
  return c10::make_intrusive<BatonBackend>(store, static_cast<int>(me - ranks.begin()),
                                           static_cast<int>(ranks.size()), timeout);
}

void BatonBackend::startCoalescing() {
  runner_->StartCoalescing();
}

c10::intrusive_ptr<c10d::Work> BatonBackend::endCoalescing() {
  return runner_->EndCoalescing(getRank());
}

uintptr_t BatonBackend::RegisterBuffer(void* ptr, size_t bytes) {
  batonComm_t comm = comm_;
  if (comm == nullptr) ThrowBackendError("registering a buffer: the process group was shut down");
  void* handle = nullptr;
  Check(batonCommRegister(comm, ptr, bytes, &handle), "registering a buffer");
  return reinterpret_cast<uintptr_t>(handle);
}

void BatonBackend::DeregisterBuffer(uintptr_t handle) {
  if (batonComm_t comm = comm_)
    Check(batonCommDeregister(comm, reinterpret_cast<void*>(handle)), "deregistering a buffer");
}

void BatonBackend::Check(batonResult_t result, const char* what) const {
  if (result != batonSuccess) ThrowBackendError(ErrorText(what, result, comm_));
}

std::function<void(batonStream_t)> BatonBackend::WithCallTimeout(
    std::function<void(batonStream_t)> queue) {
  const std::chrono::milliseconds timeout = BlockingCall::Timeout();
  if (timeout.count() < 0 || timeout == timeout_) return queue;
  // Baton's timeouts are whole seconds without progress, as the group's; round up.
  const int seconds = static_cast<int>(std::max<int64_t>(1, (timeout.count() + 999) / 1000));
  return [this, seconds, queue = std::move(queue)](batonStream_t stream) {
    batonComm_t comm = comm_;
    Check(batonCommSetCallTimeout(comm, seconds), "setting the call's timeout");
    // The calls have taken it once made: back to the group's for the next ones.
    struct Reset {
      batonComm_t comm;
      ~Reset() { batonCommSetCallTimeout(comm, BATON_CONFIG_UNDEF_INT); }
    } reset{comm};
    queue(stream);
  };
}

c10::intrusive_ptr<c10d::Work> BatonBackend::Submit(c10d::OpType type, const char* name,
                                                    std::vector<at::Tensor> outputs,
                                                    std::function<void(batonStream_t)> queue,
                                                    HostWork host) {
  if (!host.p2p && !host.any_source) collectives_.fetch_add(1, std::memory_order_relaxed);
  Operation op;
  op.work = c10::make_intrusive<BatonWork>(getRank(), type, std::move(outputs));
  op.name = name;
  op.queue = WithCallTimeout(std::move(queue));
  op.copy_out = std::move(host.copy_out);
  op.copy_in = host.copy_in;
  op.p2p = host.p2p;
  op.blocking = BlockingCall::Now();
  c10::intrusive_ptr<c10d::Work> work = op.work;
  runner_->Submit(std::move(op));
  return work;
}

c10::intrusive_ptr<c10d::Work> BatonBackend::Dispatch(c10d::OpType type, const char* name,
                                                      std::vector<at::Tensor> outputs,
                                                      const at::Tensor& like,
                                                      std::function<void(batonStream_t)> queue) {
  if (like.is_cuda())
    return LaunchOnStream(type, std::move(outputs), like, WithCallTimeout(std::move(queue)));
  return Submit(type, name, std::move(outputs), std::move(queue));
}

BatonBackend::Reduction BatonBackend::MakeReduction(const c10d::ReduceOp& op,
                                                    const at::Tensor& like) const {
  Reduction r;
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      r.op = batonSum;
      break;
    case c10d::ReduceOp::PRODUCT:
      r.op = batonProd;
      break;
    case c10d::ReduceOp::MIN:
      r.op = batonMin;
      break;
    case c10d::ReduceOp::MAX:
      r.op = batonMax;
      break;
    case c10d::ReduceOp::AVG:
      r.op = batonAvg;
      break;
    case c10d::ReduceOp::PREMUL_SUM: {
      // Baton reads the factor from host memory when the call is made.
      TORCH_CHECK(!like.is_cuda(), "baton backend: premul_sum on CUDA tensors is not supported");
      // NCCLPreMulSumSupplement: the name torch 2.11 and older have; newer ones keep it as an
      // alias of PreMulSumSupplement.
      const auto* factor = dynamic_cast<const c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
      TORCH_CHECK(factor != nullptr, "baton backend: PREMUL_SUM without its factor");
      double value = factor->tensor_factor.defined() ? factor->tensor_factor.item<double>()
                                                     : factor->double_factor;
      r.premul_factor = at::full({1}, value, like.options());
      break;
    }
    default:
      TORCH_CHECK(false, "baton backend: reduce op ", static_cast<int>(op.op_),
                  " (bitwise ops) is not supported; Baton has sum, product, min, max, avg and "
                  "premul_sum");
  }
  if (like.scalar_type() == at::kBool) {
    // Bools travel as bytes: a byte sum would count (and wrap at 256 ranks),
    // so sum is "any" and product "all", as ProcessGroupNCCL has them.
    TORCH_CHECK(op.op_ != c10d::ReduceOp::AVG && op.op_ != c10d::ReduceOp::PREMUL_SUM,
                "baton backend: ReduceOp.", op.op_ == c10d::ReduceOp::AVG ? "AVG" : "PREMUL_SUM",
                " of boolean tensors is not defined");
    if (r.op == batonSum) r.op = batonMax;
    if (r.op == batonProd) r.op = batonMin;
  }
  return r;
}

void BatonBackend::WithOp(const Reduction& reduction, batonDataType_t datatype,
                          const std::function<batonResult_t(batonRedOp_t)>& call,
                          const char* what) {
  if (!reduction.premul_factor.defined()) {
    Check(call(reduction.op), what);
    return;
  }
  batonRedOp_t op;
  Check(batonRedOpCreatePreMulSum(&op, reduction.premul_factor.data_ptr(), datatype,
                                  batonScalarHostImmediate, comm_),
        "creating the premul_sum op");
  batonResult_t result = call(op);
  batonRedOpDestroy(op, comm_);
  Check(result, what);
}

c10::intrusive_ptr<c10d::Work> BatonBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                       const c10d::BroadcastOptions& opts) {
  BlockingCall blocking(opts);
  at::Tensor t = Single(tensors, "broadcast", /*cuda_ok=*/true);
  int root = static_cast<int>(opts.rootRank);
  return Dispatch(
      c10d::OpType::BROADCAST, "broadcast", tensors, t, [this, t, root](batonStream_t stream) {
        Check(
            batonBroadcast(t.data_ptr(), t.data_ptr(), t.numel(), DataType(t), root, comm_, stream),
            "broadcast");
      });
}

void BatonBackend::InOneGroup(size_t n, const std::function<void(size_t)>& call, const char* what) {
  batonGroupStart();
  std::exception_ptr error;
  for (size_t i = 0; i < n && !error; ++i) error = CaptureError([&] { call(i); });
  batonResult_t end = batonGroupEnd();  // leaves the group in any case
  if (error) std::rethrow_exception(error);
  Check(end, what);
}

void BatonBackend::AllReduceInPlace(const at::Tensor& t, const Reduction& reduction,
                                    batonStream_t stream) {
  batonDataType_t dt = DataType(t);
  WithOp(
      reduction, dt,
      [&](batonRedOp_t op) {
        return batonAllReduce(t.data_ptr(), t.data_ptr(), t.numel(), dt, op, comm_, stream);
      },
      "allreduce");
}

c10::intrusive_ptr<c10d::Work> BatonBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                       const c10d::AllreduceOptions& opts) {
  BlockingCall blocking(opts);
  at::Tensor t = Single(tensors, "allreduce", /*cuda_ok=*/true);
  Reduction reduction = MakeReduction(opts.reduceOp, t);
  return Dispatch(c10d::OpType::ALLREDUCE, "allreduce", tensors, t,
                  [this, t, reduction](batonStream_t s) { AllReduceInPlace(t, reduction, s); });
}

c10::intrusive_ptr<c10d::Work> BatonBackend::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  BlockingCall blocking(opts);
  TORCH_CHECK(!tensors.empty(), "baton backend: allreduce_coalesced of no tensors");
  bool one_dtype = true;
  std::vector<Reduction> reductions;
  for (const auto& t : tensors) {
    CheckTensor(t, "allreduce_coalesced");
    TORCH_CHECK(t.device() == tensors[0].device(),
                "baton backend: allreduce_coalesced: tensors on ", tensors[0].device(), " and ",
                t.device());
    one_dtype &= t.scalar_type() == tensors[0].scalar_type();
    reductions.push_back(MakeReduction(opts.reduceOp, t));
  }
  std::vector<at::Tensor> list = tensors;
  if (!one_dtype) {
    // One allreduce per tensor in place, in one Baton group (one schedule), as NCCL's backend.
    return Submit(c10d::OpType::ALLREDUCE_COALESCED, "allreduce_coalesced", tensors,
                  [this, list, reductions](batonStream_t s) {
                    InOneGroup(
                        list.size(), [&](size_t i) { AllReduceInPlace(list[i], reductions[i], s); },
                        "allreduce_coalesced");
                  });
  }
  // One dtype: one call over the tensors side by side, as gloo does.
  at::Tensor flat = EmptyFlat(list);
  HostWork host;
  host.copy_in = true;
  host.copy_out = [flat, list]() mutable { Unflatten(flat, list); };
  return Submit(
      c10d::OpType::ALLREDUCE_COALESCED, "allreduce_coalesced", tensors,
      [this, list, flat, reduction = reductions[0]](batonStream_t s) mutable {
        FlattenInto(list, flat);
        AllReduceInPlace(flat, reduction, s);
      },
      std::move(host));
}

c10::intrusive_ptr<c10d::Work> BatonBackend::reduce(std::vector<at::Tensor>& tensors,
                                                    const c10d::ReduceOptions& opts) {
  BlockingCall blocking(opts);
  at::Tensor t = Single(tensors, "reduce", /*cuda_ok=*/true);
  Reduction reduction = MakeReduction(opts.reduceOp, t);
  int root = static_cast<int>(opts.rootRank);
  return Dispatch(
      c10d::OpType::REDUCE, "reduce", tensors, t, [this, t, reduction, root](batonStream_t s) {
        batonDataType_t dt = DataType(t);
        WithOp(
            reduction, dt,
            [&](batonRedOp_t op) {
              return batonReduce(t.data_ptr(), t.data_ptr(), t.numel(), dt, op, root, comm_, s);
            },
            "reduce");
      });
}

c10::intrusive_ptr<c10d::Work> BatonBackend::PointToPoint(c10d::OpType type,
                                                          std::vector<at::Tensor>& tensors,
                                                          int peer) {
  const bool sending = type == c10d::OpType::SEND;
  const char* name = sending ? "send" : "recv";
  at::Tensor t = Single(tensors, name);
  HostWork host;
  host.p2p = true;
  return Submit(
      type, name, tensors,
      [this, t, peer, sending, name](batonStream_t s) {
        Check(sending ? batonSend(t.data_ptr(), t.numel(), DataType(t), peer, comm_, s)
                      : batonRecv(t.data_ptr(), t.numel(), DataType(t), peer, comm_, s),
              name);
      },
      std::move(host));
}

c10::intrusive_ptr<c10d::Work> BatonBackend::send(std::vector<at::Tensor>& tensors, int dst_rank,
                                                  int /*tag*/) {
  return PointToPoint(c10d::OpType::SEND, tensors, dst_rank);
}

c10::intrusive_ptr<c10d::Work> BatonBackend::recv(std::vector<at::Tensor>& tensors, int src_rank,
                                                  int /*tag*/) {
  return PointToPoint(c10d::OpType::RECV, tensors, src_rank);
}

c10::intrusive_ptr<c10d::Work> BatonBackend::recvAnysource(std::vector<at::Tensor>& tensors,
                                                           int /*tag*/) {
  // batonRecvAny learns the peer as the recv runs, so it cannot join the
  // group the held sends and recvs launch in: it is submitted as a call of
  // its own, after them, like a collective (not counted as one).
  at::Tensor t = Single(tensors, "recv");
  auto source = std::make_shared<int>(-1);
  HostWork host;
  host.any_source = true;
  auto work = Submit(
      c10d::OpType::RECVANYSOURCE, "recv", tensors,
      [this, t, source](batonStream_t s) {
        Check(batonRecvAny(t.data_ptr(), t.numel(), DataType(t), source.get(), comm_, s),
              "recv from any source");
      },
      std::move(host));
  if (auto* w = dynamic_cast<BatonWork*>(work.get())) w->SetSourceSlot(source);
  return work;
}

c10::intrusive_ptr<c10d::Work> BatonBackend::barrier(const c10d::BarrierOptions& opts) {
  BlockingCall blocking(opts);
  return Submit(c10d::OpType::BARRIER, "barrier", {},
                [this](batonStream_t s) { Check(batonBarrier(comm_, s), "barrier"); });
}

void BatonBackend::monitoredBarrier(const c10d::BarrierOptions& opts, bool /*wait_all_ranks*/) {
  // Baton's barrier reports the ranks that did not arrive when it times out
  // (after opts' timeout: monitored_barrier's own).
  barrier(opts)->wait();
}

}  // namespace baton_torch
