#include "backend.h"

#include "tensors.h"

#include <torch/csrc/distributed/c10d/Types.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

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

// ---- BatonBackend ----

BatonBackend::BatonBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                           std::chrono::milliseconds timeout)
    : c10d::Backend(rank, size) {
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
  Check(batonCommInitRankConfig(&comm_, size, id, rank, &config), "creating the communicator");
  std::lock_guard<std::mutex> lock(live_mutex);
  LiveBackends().push_back(this);
}

BatonBackend::~BatonBackend() {
  {
    std::lock_guard<std::mutex> lock(live_mutex);
    auto& live = LiveBackends();
    live.erase(std::remove(live.begin(), live.end(), this), live.end());
  }
  worker_.Stop();
  if (comm_ != nullptr) batonCommDestroy(comm_);
}

void BatonBackend::ShutdownAll() {
  std::lock_guard<std::mutex> lock(live_mutex);
  for (BatonBackend* backend : LiveBackends()) backend->worker_.Stop();
}

void BatonBackend::Check(batonResult_t result, const char* what) const {
  if (result == batonSuccess) return;
  const char* message = batonGetLastError(comm_);
  TORCH_CHECK(false, "baton ", what, ": ", batonGetErrorString(result),
              (message != nullptr && *message != '\0') ? std::string(": ") + message : "");
}

c10::intrusive_ptr<c10d::Work> BatonBackend::Dispatch(c10d::OpType type,
                                                      std::vector<at::Tensor> outputs,
                                                      const at::Tensor& like,
                                                      std::function<void(batonStream_t)> job) {
  if (like.is_cuda()) return LaunchOnStream(type, std::move(outputs), like, job);
  return Launch(type, std::move(outputs), [job = std::move(job)] { job(nullptr); });
}

c10::intrusive_ptr<c10d::Work> BatonBackend::Launch(c10d::OpType type,
                                                    std::vector<at::Tensor> outputs,
                                                    std::function<void()> job, bool p2p) {
  auto work = c10::make_intrusive<BatonWork>(getRank(), type, std::move(outputs));
  worker_.Enqueue(work, std::move(job), p2p);
  return work;
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
      const auto* factor = dynamic_cast<const c10d::PreMulSumSupplement*>(op.supplement_.get());
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
  at::Tensor t = Single(tensors, "broadcast", /*cuda_ok=*/true);
  int root = static_cast<int>(opts.rootRank);
  return Dispatch(c10d::OpType::BROADCAST, tensors, t, [this, t, root](batonStream_t stream) {
    Check(batonBroadcast(t.data_ptr(), t.data_ptr(), t.numel(), DataType(t), root, comm_, stream),
          "broadcast");
  });
}

c10::intrusive_ptr<c10d::Work> BatonBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                       const c10d::AllreduceOptions& opts) {
  at::Tensor t = Single(tensors, "allreduce", /*cuda_ok=*/true);
  Reduction reduction = MakeReduction(opts.reduceOp, t);
  return Dispatch(c10d::OpType::ALLREDUCE, tensors, t, [this, t, reduction](batonStream_t stream) {
    batonDataType_t dt = DataType(t);
    WithOp(
        reduction, dt,
        [&](batonRedOp_t op) {
          return batonAllReduce(t.data_ptr(), t.data_ptr(), t.numel(), dt, op, comm_, stream);
        },
        "allreduce");
  });
}

c10::intrusive_ptr<c10d::Work> BatonBackend::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  TORCH_CHECK(!tensors.empty(), "baton backend: allreduce_coalesced of no tensors");
  for (const auto& t : tensors) CheckSameKind(tensors[0], t, "allreduce_coalesced");
  Reduction reduction = MakeReduction(opts.reduceOp, tensors[0]);
  std::vector<at::Tensor> list = tensors;
  return Launch(c10d::OpType::ALLREDUCE_COALESCED, tensors, [this, list, reduction]() mutable {
    // One call over the tensors side by side, as gloo does.
    at::Tensor flat = Flatten(list);
    batonDataType_t dt = DataType(flat);
    WithOp(
        reduction, dt,
        [&](batonRedOp_t op) {
          return batonAllReduce(flat.data_ptr(), flat.data_ptr(), flat.numel(), dt, op, comm_,
                                nullptr);
        },
        "allreduce_coalesced");
    Unflatten(flat, list);
  });
}

c10::intrusive_ptr<c10d::Work> BatonBackend::reduce(std::vector<at::Tensor>& tensors,
                                                    const c10d::ReduceOptions& opts) {
  at::Tensor t = Single(tensors, "reduce", /*cuda_ok=*/true);
  Reduction reduction = MakeReduction(opts.reduceOp, t);
  int root = static_cast<int>(opts.rootRank);
  return Dispatch(c10d::OpType::REDUCE, tensors, t, [this, t, reduction, root](batonStream_t s) {
    batonDataType_t dt = DataType(t);
    WithOp(
        reduction, dt,
        [&](batonRedOp_t op) {
          return batonReduce(t.data_ptr(), t.data_ptr(), t.numel(), dt, op, root, comm_, s);
        },
        "reduce");
  });
}

c10::intrusive_ptr<c10d::Work> BatonBackend::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& /*opts*/) {
  at::Tensor in = Single(inputs, "allgather");
  TORCH_CHECK(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == getSize(),
              "baton backend: allgather needs one list of ", getSize(), " output tensors");
  for (const auto& o : outputs[0]) CheckSameKind(in, o, "allgather");
  std::vector<size_t> counts = Numels(outputs[0]);
  TORCH_CHECK(counts[getRank()] == static_cast<size_t>(in.numel()),
              "baton backend: allgather: this rank's output holds ", counts[getRank()],
              " elements, its input ", in.numel());
  std::vector<at::Tensor> outs = outputs[0];
  return Launch(c10d::OpType::ALLGATHER, outs, [this, in, outs, counts]() mutable {
    size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
    at::Tensor flat = at::empty({static_cast<int64_t>(total)}, in.options());
    batonDataType_t dt = DataType(in);
    if (AllEqual(counts)) {
      Check(batonAllGather(in.data_ptr(), flat.data_ptr(), in.numel(), dt, comm_, nullptr),
            "allgather");
    } else {  // uneven sizes: the v-collective
      std::vector<size_t> displs = Offsets(counts);
      Check(batonAllGatherV(in.data_ptr(), in.numel(), flat.data_ptr(), counts.data(),
                            displs.data(), dt, comm_, nullptr),
            "allgather (uneven)");
    }
    Unflatten(flat, outs);
  });
}

c10::intrusive_ptr<c10d::Work> BatonBackend::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& output_lists, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions&) {
  TORCH_CHECK(!inputs.empty() && output_lists.size() == inputs.size(),
              "baton backend: allgather_coalesced needs one output list per input tensor");
  std::vector<at::Tensor> outs;  // rank-major: rank r's tensors in input order
  for (int r = 0; r < getSize(); ++r) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      CheckSameKind(inputs[0], inputs[i], "allgather_coalesced");
      TORCH_CHECK(static_cast<int>(output_lists[i].size()) == getSize(),
                  "baton backend: allgather_coalesced: output list ", i, " needs ", getSize(),
                  " tensors");
      const at::Tensor& o = output_lists[i][r];
      CheckSameKind(inputs[0], o, "allgather_coalesced");
      TORCH_CHECK(o.numel() == inputs[i].numel(), "baton backend: allgather_coalesced: output ", i,
                  " of rank ", r, " holds ", o.numel(), " elements, input ", i, " ",
                  inputs[i].numel());
      outs.push_back(o);
    }
  }
  std::vector<at::Tensor> ins = inputs;
  return Launch(c10d::OpType::ALLGATHER_COALESCED, outs, [this, ins, outs]() mutable {
    at::Tensor send = Flatten(ins);
    at::Tensor flat = at::empty({send.numel() * getSize()}, send.options());
    Check(batonAllGather(send.data_ptr(), flat.data_ptr(), send.numel(), DataType(send), comm_,
                         nullptr),
          "allgather_coalesced");
    Unflatten(flat, outs);
  });
}

c10::intrusive_ptr<c10d::Work> BatonBackend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions&) {
  TORCH_CHECK(outputs.size() == inputs.size(),
              "baton backend: allgather_into_tensor_coalesced: ", outputs.size(), " outputs for ",
              inputs.size(), " inputs");
  for (size_t i = 0; i < inputs.size(); ++i) {
    CheckTensor(inputs[i], "allgather_into_tensor_coalesced");
    CheckSameKind(inputs[i], outputs[i], "allgather_into_tensor_coalesced");
    TORCH_CHECK(outputs[i].numel() == inputs[i].numel() * getSize(),
                "baton backend: allgather_into_tensor_coalesced: output ", i, " holds ",
                outputs[i].numel(), " elements, not ", getSize(), " x ", inputs[i].numel());
  }
  std::vector<at::Tensor> ins = inputs, outs = outputs;
  return Launch(c10d::OpType::ALLGATHER_INTO_TENSOR_COALESCED, outputs, [this, ins, outs] {
    for (size_t i = 0; i < ins.size(); ++i) {
      Check(batonAllGather(ins[i].data_ptr(), outs[i].data_ptr(), ins[i].numel(), DataType(ins[i]),
                           comm_, nullptr),
            "allgather_into_tensor_coalesced");
    }
  });
}

c10::intrusive_ptr<c10d::Work> BatonBackend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                             const c10d::AllgatherOptions&) {
  CheckTensor(input, "_allgather_base", /*cuda_ok=*/true);
  CheckSameKind(input, output, "_allgather_base");
  TORCH_CHECK(output.numel() == input.numel() * getSize(),
              "baton backend: _allgather_base: ", "the output holds ", output.numel(),
              " elements, not ", getSize(), " x ", input.numel());
  at::Tensor in = input, out = output;
  return Dispatch(c10d::OpType::_ALLGATHER_BASE, {output}, in, [this, in, out](batonStream_t s) {
    Check(batonAllGather(in.data_ptr(), out.data_ptr(), in.numel(), DataType(in), comm_, s),
          "_allgather_base");
  });
}

c10::intrusive_ptr<c10d::Work> BatonBackend::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                    std::vector<at::Tensor>& inputs,
                                                    const c10d::GatherOptions& opts) {
  at::Tensor in = Single(inputs, "gather");
  const int root = static_cast<int>(opts.rootRank);
  std::vector<at::Tensor> outs = RootList(outputs, in, root, getRank(), getSize(), "gather");
  return Launch(c10d::OpType::GATHER, outs, [this, in, outs, root]() mutable {
    at::Tensor flat;
    if (!outs.empty()) flat = at::empty({in.numel() * getSize()}, in.options());
    Check(batonGather(in.data_ptr(), flat.defined() ? flat.data_ptr() : nullptr, in.numel(),
                      DataType(in), root, comm_, nullptr),
          "gather");
    if (!outs.empty()) Unflatten(flat, outs);
  });
}

c10::intrusive_ptr<c10d::Work> BatonBackend::scatter(std::vector<at::Tensor>& outputs,
                                                     std::vector<std::vector<at::Tensor>>& inputs,
                                                     const c10d::ScatterOptions& opts) {
  at::Tensor out = Single(outputs, "scatter");
  const int root = static_cast<int>(opts.rootRank);
  std::vector<at::Tensor> ins = RootList(inputs, out, root, getRank(), getSize(), "scatter");
  return Launch(c10d::OpType::SCATTER, outputs, [this, out, ins, root] {
    at::Tensor flat;
    if (!ins.empty()) flat = Flatten(ins);
    Check(batonScatter(flat.defined() ? flat.data_ptr() : nullptr, out.data_ptr(), out.numel(),
                       DataType(out), root, comm_, nullptr),
          "scatter");
  });
}

c10::intrusive_ptr<c10d::Work> BatonBackend::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  at::Tensor out = Single(outputs, "reduce_scatter");
  TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize(),
              "baton backend: reduce_scatter needs one list of ", getSize(), " input tensors");
  for (const auto& i : inputs[0]) CheckSameKind(out, i, "reduce_scatter");
  std::vector<size_t> counts = Numels(inputs[0]);
  TORCH_CHECK(counts[getRank()] == static_cast<size_t>(out.numel()),
              "baton backend: reduce_scatter: the output holds ", out.numel(),
              " elements, this rank's input block ", counts[getRank()]);
  Reduction reduction = MakeReduction(opts.reduceOp, out);
  std::vector<at::Tensor> ins = inputs[0];
  return Launch(c10d::OpType::REDUCE_SCATTER, outputs, [this, out, ins, counts, reduction] {
    at::Tensor flat = Flatten(ins);
    batonDataType_t dt = DataType(out);
    WithOp(
        reduction, dt,
        [&](batonRedOp_t op) {
          return AllEqual(counts) ? batonReduceScatter(flat.data_ptr(), out.data_ptr(), out.numel(),
                                                       dt, op, comm_, nullptr)
                                  : batonReduceScatterV(flat.data_ptr(), out.data_ptr(),
                                                        counts.data(), dt, op, comm_, nullptr);
        },
        "reduce_scatter");
  });
}

c10::intrusive_ptr<c10d::Work> BatonBackend::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  CheckTensor(output, "_reduce_scatter_base", /*cuda_ok=*/true);
  CheckSameKind(output, input, "_reduce_scatter_base");
  TORCH_CHECK(input.numel() == output.numel() * getSize(),
              "baton backend: ", "_reduce_scatter_base: the input holds ", input.numel(),
              " elements, not ", getSize(), " x ", output.numel());
  Reduction reduction = MakeReduction(opts.reduceOp, output);
  at::Tensor in = input, out = output;
  return Dispatch(c10d::OpType::_REDUCE_SCATTER_BASE, {output}, out,
                  [this, in, out, reduction](batonStream_t stream) {
                    batonDataType_t dt = DataType(out);
                    WithOp(
                        reduction, dt,
                        [&](batonRedOp_t op) {
                          return batonReduceScatter(in.data_ptr(), out.data_ptr(), out.numel(), dt,
                                                    op, comm_, stream);
                        },
                        "_reduce_scatter_base");
                  });
}

c10::intrusive_ptr<c10d::Work> BatonBackend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                           std::vector<int64_t>& output_splits,
                                                           std::vector<int64_t>& input_splits,
                                                           const c10d::AllToAllOptions&) {
  CheckTensor(input, "alltoall_base");
  CheckSameKind(input, output, "alltoall_base");
  const int n = getSize();
  // Split sizes count rows (the first dimension); none given: equal blocks.
  auto counts_of = [n](const at::Tensor& t, const std::vector<int64_t>& splits, const char* what) {
    std::vector<size_t> counts(n);
    int64_t rows = t.dim() == 0 ? 1 : t.size(0);
    int64_t row_elements = rows == 0 ? 0 : t.numel() / rows;
    if (splits.empty()) {
      TORCH_CHECK(rows % n == 0, "baton backend: alltoall_base: ", what, " has ", rows,
                  " rows, which do not split into ", n, " equal blocks");
      std::fill(counts.begin(), counts.end(), static_cast<size_t>(rows / n * row_elements));
    } else {
      TORCH_CHECK(static_cast<int>(splits.size()) == n, "baton backend: alltoall_base: ", what,
                  " split sizes need ", n, " entries, got ", splits.size());
      int64_t sum = 0;
      for (int i = 0; i < n; ++i) {
        TORCH_CHECK(splits[i] >= 0, "baton backend: alltoall_base: negative split size");
        counts[i] = static_cast<size_t>(splits[i] * row_elements);
        sum += splits[i];
      }
      TORCH_CHECK(sum == rows, "baton backend: alltoall_base: ", what, " split sizes add up to ",
                  sum, ", the tensor has ", rows, " rows");
    }
    return counts;
  };
  std::vector<size_t> send_counts = counts_of(input, input_splits, "input");
  std::vector<size_t> recv_counts = counts_of(output, output_splits, "output");
  at::Tensor in = input, out = output;
  return Launch(c10d::OpType::ALLTOALL_BASE, {output}, [this, in, out, send_counts, recv_counts] {
    std::vector<size_t> sd = Offsets(send_counts), rd = Offsets(recv_counts);
    Check(batonAlltoAllV(in.data_ptr(), send_counts.data(), sd.data(), out.data_ptr(),
                         recv_counts.data(), rd.data(), DataType(in), comm_, nullptr),
          "alltoall_base");
  });
}

c10::intrusive_ptr<c10d::Work> BatonBackend::alltoall(std::vector<at::Tensor>& outputs,
                                                      std::vector<at::Tensor>& inputs,
                                                      const c10d::AllToAllOptions&) {
  TORCH_CHECK(
      static_cast<int>(inputs.size()) == getSize() && static_cast<int>(outputs.size()) == getSize(),
      "baton backend: alltoall needs ", getSize(), " input and output tensors");
  for (const auto& t : inputs) CheckSameKind(inputs[0], t, "alltoall");
  for (const auto& t : outputs) CheckSameKind(inputs[0], t, "alltoall");
  std::vector<size_t> send_counts = Numels(inputs), recv_counts = Numels(outputs);
  std::vector<at::Tensor> ins = inputs, outs = outputs;
  return Launch(
      c10d::OpType::ALLTOALL, outputs, [this, ins, outs, send_counts, recv_counts]() mutable {
        at::Tensor send = Flatten(ins);
        size_t total = std::accumulate(recv_counts.begin(), recv_counts.end(), size_t{0});
        at::Tensor recv = at::empty({static_cast<int64_t>(total)}, send.options());
        std::vector<size_t> sd = Offsets(send_counts), rd = Offsets(recv_counts);
        Check(batonAlltoAllV(send.data_ptr(), send_counts.data(), sd.data(), recv.data_ptr(),
                             recv_counts.data(), rd.data(), DataType(send), comm_, nullptr),
              "alltoall");
        Unflatten(recv, outs);
      });
}

c10::intrusive_ptr<c10d::Work> BatonBackend::send(std::vector<at::Tensor>& tensors, int dst_rank,
                                                  int /*tag*/) {
  at::Tensor t = Single(tensors, "send");
  return Launch(
      c10d::OpType::SEND, tensors,
      [this, t, dst_rank] {
        Check(batonSend(t.data_ptr(), t.numel(), DataType(t), dst_rank, comm_, nullptr), "send");
      },
      /*p2p=*/true);
}

c10::intrusive_ptr<c10d::Work> BatonBackend::recv(std::vector<at::Tensor>& tensors, int src_rank,
                                                  int /*tag*/) {
  at::Tensor t = Single(tensors, "recv");
  return Launch(
      c10d::OpType::RECV, tensors,
      [this, t, src_rank] {
        Check(batonRecv(t.data_ptr(), t.numel(), DataType(t), src_rank, comm_, nullptr), "recv");
      },
      /*p2p=*/true);
}

c10::intrusive_ptr<c10d::Work> BatonBackend::recvAnysource(std::vector<at::Tensor>&, int) {
  TORCH_CHECK(false,
              "baton backend: recv without a source (recvAnysource) is not supported: "
              "Baton's C API has no receive from any rank (batonRecv names its peer); pass src=");
}

c10::intrusive_ptr<c10d::Work> BatonBackend::barrier(const c10d::BarrierOptions&) {
  return Launch(c10d::OpType::BARRIER, {},
                [this] { Check(batonBarrier(comm_, nullptr), "barrier"); });
}

void BatonBackend::monitoredBarrier(const c10d::BarrierOptions& opts, bool /*wait_all_ranks*/) {
  // Baton's barrier reports the ranks that did not arrive when it times out;
  // the call's own timeout cannot be shorter than the communicator's.
  barrier(opts)->wait();
}

}  // namespace baton_torch
