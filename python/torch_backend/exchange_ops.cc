// The torch backend's collectives that gather, scatter or exchange blocks
// among ranks. Those on lists of tensors go through one flat tensor: the
// inputs are flattened into it when the call is queued (HostWork::copy_in)
// and the results copied out of it once the calls ran (copy_out).
#include "backend.h"
#include "tensors.h"

namespace baton_torch {
namespace {

// The OpType of the coalesced allgather_into_tensor and reduce_scatter_tensor: their own in
// newer torch, COALESCED in those without them (torch 2.11). A template, so that the name
// missing from the enum is not an error.
template <typename Op = c10d::OpType>
constexpr Op AllGatherIntoTensorCoalescedType() {
  if constexpr (requires { Op::ALLGATHER_INTO_TENSOR_COALESCED; })
    return Op::ALLGATHER_INTO_TENSOR_COALESCED;
  else
    return Op::COALESCED;
}

template <typename Op = c10d::OpType>
constexpr Op ReduceScatterTensorCoalescedType() {
  if constexpr (requires { Op::REDUCE_SCATTER_TENSOR_COALESCED; })
    return Op::REDUCE_SCATTER_TENSOR_COALESCED;
  else
    return Op::COALESCED;
}

}  // namespace

c10::intrusive_ptr<c10d::Work> BatonBackend::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  BlockingCall blocking(opts);
  at::Tensor in = Single(inputs, "allgather");
  TORCH_CHECK(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == getSize(),
              "baton backend: allgather needs one list of ", getSize(), " output tensors");
  for (const auto& o : outputs[0]) CheckSameKind(in, o, "allgather");
  std::vector<size_t> counts = Numels(outputs[0]);
  TORCH_CHECK(counts[getRank()] == static_cast<size_t>(in.numel()),
              "baton backend: allgather: this rank's output holds ", counts[getRank()],
              " elements, its input ", in.numel());
  std::vector<at::Tensor> outs = outputs[0];
  at::Tensor flat = EmptyFlat(outs);
  HostWork host;
  host.copy_out = [flat, outs]() mutable { Unflatten(flat, outs); };
  return Submit(
      c10d::OpType::ALLGATHER, "allgather", outs,
      [this, in, flat, counts](batonStream_t s) {
        batonDataType_t dt = DataType(in);
        if (AllEqual(counts)) {
          Check(batonAllGather(in.data_ptr(), flat.data_ptr(), in.numel(), dt, comm_, s),
                "allgather");
        } else {  // uneven sizes: the v-collective
          std::vector<size_t> displs = Offsets(counts);
          Check(batonAllGatherV(in.data_ptr(), in.numel(), flat.data_ptr(), counts.data(),
                                displs.data(), dt, comm_, s),
                "allgather (uneven)");
        }
      },
      std::move(host));
}

c10::intrusive_ptr<c10d::Work> BatonBackend::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& output_lists, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  BlockingCall blocking(opts);
  // torch's layout (as Gloo's): output_lists[r][i] receives rank r's inputs[i].
  TORCH_CHECK(!inputs.empty(), "baton backend: allgather_coalesced needs input tensors");
  TORCH_CHECK(static_cast<int>(output_lists.size()) == getSize(),
              "baton backend: allgather_coalesced needs one output list per rank (", getSize(),
              "), got ", output_lists.size());
  std::vector<at::Tensor> outs;  // rank-major: rank r's tensors in input order
  for (int r = 0; r < getSize(); ++r) {
    TORCH_CHECK(output_lists[r].size() == inputs.size(),
                "baton backend: allgather_coalesced: ", "output list ", r, " holds ",
                output_lists[r].size(), " tensors, not ", inputs.size(), " (one per input)");
    for (size_t i = 0; i < inputs.size(); ++i) {
      CheckSameKind(inputs[0], inputs[i], "allgather_coalesced");
      const at::Tensor& o = output_lists[r][i];
      CheckSameKind(inputs[0], o, "allgather_coalesced");
      TORCH_CHECK(o.numel() == inputs[i].numel(), "baton backend: allgather_coalesced: output ", i,
                  " of rank ", r, " holds ", o.numel(), " elements, input ", i, " ",
                  inputs[i].numel());
      outs.push_back(o);
    }
  }
  // The tensors of every rank side by side in one allgather.
  std::vector<at::Tensor> ins = inputs;
  at::Tensor send = EmptyFlat(ins);
  at::Tensor flat = EmptyFlat(outs);
  HostWork host;
  host.copy_in = true;
  host.copy_out = [flat, outs]() mutable { Unflatten(flat, outs); };
  return Submit(
      c10d::OpType::ALLGATHER_COALESCED, "allgather_coalesced", outs,
      [this, ins, send, flat](batonStream_t s) mutable {
        FlattenInto(ins, send);
        Check(batonAllGather(send.data_ptr(), flat.data_ptr(), send.numel(), DataType(send), comm_,
                             s),
              "allgather_coalesced");
      },
      std::move(host));
}

c10::intrusive_ptr<c10d::Work> BatonBackend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  BlockingCall blocking(opts);
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
  return Submit(AllGatherIntoTensorCoalescedType(), "allgather_into_tensor_coalesced", outputs,
                [this, ins, outs](batonStream_t s) {
                  InOneGroup(
                      ins.size(),
                      [&](size_t i) {
                        Check(batonAllGather(ins[i].data_ptr(), outs[i].data_ptr(), ins[i].numel(),
                                             DataType(ins[i]), comm_, s),
                              "allgather_into_tensor_coalesced");
                      },
                      "allgather_into_tensor_coalesced");
                });
}

c10::intrusive_ptr<c10d::Work> BatonBackend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                             const c10d::AllgatherOptions& opts) {
  BlockingCall blocking(opts);
  CheckTensor(input, "_allgather_base", /*cuda_ok=*/true);
  CheckSameKind(input, output, "_allgather_base");
  TORCH_CHECK(output.numel() == input.numel() * getSize(),
              "baton backend: _allgather_base: ", "the output holds ", output.numel(),
              " elements, not ", getSize(), " x ", input.numel());
  at::Tensor in = input, out = output;
  return Dispatch(
      c10d::OpType::_ALLGATHER_BASE, "_allgather_base", {output}, in,
      [this, in, out](batonStream_t s) {
        Check(batonAllGather(in.data_ptr(), out.data_ptr(), in.numel(), DataType(in), comm_, s),
              "_allgather_base");
      });
}

c10::intrusive_ptr<c10d::Work> BatonBackend::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                    std::vector<at::Tensor>& inputs,
                                                    const c10d::GatherOptions& opts) {
  BlockingCall blocking(opts);
  at::Tensor in = Single(inputs, "gather");
  const int root = static_cast<int>(opts.rootRank);
  std::vector<at::Tensor> outs = RootList(outputs, in, root, getRank(), getSize(), "gather");
  at::Tensor flat;  // at the root
  HostWork host;
  if (!outs.empty()) {
    flat = EmptyFlat(outs);
    host.copy_out = [flat, outs]() mutable { Unflatten(flat, outs); };
  }
  return Submit(
      c10d::OpType::GATHER, "gather", outs,
      [this, in, flat, root](batonStream_t s) {
        Check(batonGather(in.data_ptr(), flat.defined() ? flat.data_ptr() : nullptr, in.numel(),
                          DataType(in), root, comm_, s),
              "gather");
      },
      std::move(host));
}

c10::intrusive_ptr<c10d::Work> BatonBackend::scatter(std::vector<at::Tensor>& outputs,
                                                     std::vector<std::vector<at::Tensor>>& inputs,
                                                     const c10d::ScatterOptions& opts) {
  BlockingCall blocking(opts);
  at::Tensor out = Single(outputs, "scatter");
  const int root = static_cast<int>(opts.rootRank);
  std::vector<at::Tensor> ins = RootList(inputs, out, root, getRank(), getSize(), "scatter");
  at::Tensor flat;  // at the root
  HostWork host;
  if (!ins.empty()) {
    flat = EmptyFlat(ins);
    host.copy_in = true;
  }
  return Submit(
      c10d::OpType::SCATTER, "scatter", outputs,
      [this, out, ins, flat, root](batonStream_t s) mutable {
        if (flat.defined()) FlattenInto(ins, flat);
        Check(batonScatter(flat.defined() ? flat.data_ptr() : nullptr, out.data_ptr(), out.numel(),
                           DataType(out), root, comm_, s),
              "scatter");
      },
      std::move(host));
}

c10::intrusive_ptr<c10d::Work> BatonBackend::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  BlockingCall blocking(opts);
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
  at::Tensor flat = EmptyFlat(ins);
  HostWork host;
  host.copy_in = true;
  return Submit(
      c10d::OpType::REDUCE_SCATTER, "reduce_scatter", outputs,
      [this, out, ins, flat, counts, reduction](batonStream_t s) mutable {
        FlattenInto(ins, flat);
        batonDataType_t dt = DataType(out);
        WithOp(
            reduction, dt,
            [&](batonRedOp_t op) {
              return AllEqual(counts) ? batonReduceScatter(flat.data_ptr(), out.data_ptr(),
                                                           out.numel(), dt, op, comm_, s)
                                      : batonReduceScatterV(flat.data_ptr(), out.data_ptr(),
                                                            counts.data(), dt, op, comm_, s);
            },
            "reduce_scatter");
      },
      std::move(host));
}

c10::intrusive_ptr<c10d::Work> BatonBackend::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  BlockingCall blocking(opts);
  CheckTensor(output, "_reduce_scatter_base", /*cuda_ok=*/true);
  CheckSameKind(output, input, "_reduce_scatter_base");
  TORCH_CHECK(input.numel() == output.numel() * getSize(),
              "baton backend: ", "_reduce_scatter_base: the input holds ", input.numel(),
              " elements, not ", getSize(), " x ", output.numel());
  Reduction reduction = MakeReduction(opts.reduceOp, output);
  at::Tensor in = input, out = output;
  return Dispatch(c10d::OpType::_REDUCE_SCATTER_BASE, "_reduce_scatter_base", {output}, out,
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

c10::intrusive_ptr<c10d::Work> BatonBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  BlockingCall blocking(opts);
  TORCH_CHECK(!outputs.empty() && outputs.size() == inputs.size(),
              "baton backend: reduce_scatter_tensor_coalesced: ", outputs.size(), " outputs for ",
              inputs.size(), " inputs");
  for (size_t i = 0; i < inputs.size(); ++i) {
    CheckTensor(outputs[i], "reduce_scatter_tensor_coalesced");
    CheckSameKind(outputs[i], inputs[i], "reduce_scatter_tensor_coalesced");
    TORCH_CHECK(inputs[i].numel() == outputs[i].numel() * getSize(),
                "baton backend: reduce_scatter_tensor_coalesced: input ", i, " holds ",
                inputs[i].numel(), " elements, not ", getSize(), " x ", outputs[i].numel());
  }
  std::vector<Reduction> reductions;
  for (const at::Tensor& out : outputs) reductions.push_back(MakeReduction(opts.reduceOp, out));
  std::vector<at::Tensor> ins = inputs, outs = outputs;
  return Submit(ReduceScatterTensorCoalescedType(), "reduce_scatter_tensor_coalesced", outputs,
                [this, ins, outs, reductions](batonStream_t s) {
                  InOneGroup(
                      ins.size(),
                      [&](size_t i) {
                        batonDataType_t dt = DataType(outs[i]);
                        WithOp(
                            reductions[i], dt,
                            [&](batonRedOp_t op) {
                              return batonReduceScatter(ins[i].data_ptr(), outs[i].data_ptr(),
                                                        outs[i].numel(), dt, op, comm_, s);
                            },
                            "reduce_scatter_tensor_coalesced");
                      },
                      "reduce_scatter_tensor_coalesced");
                });
}

c10::intrusive_ptr<c10d::Work> BatonBackend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                           std::vector<int64_t>& output_splits,
                                                           std::vector<int64_t>& input_splits,
                                                           const c10d::AllToAllOptions& opts) {
  BlockingCall blocking(opts);
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
  return Submit(c10d::OpType::ALLTOALL_BASE, "alltoall_base", {output},
                [this, in, out, send_counts, recv_counts](batonStream_t s) {
                  std::vector<size_t> sd = Offsets(send_counts), rd = Offsets(recv_counts);
                  Check(batonAlltoAllV(in.data_ptr(), send_counts.data(), sd.data(), out.data_ptr(),
                                       recv_counts.data(), rd.data(), DataType(in), comm_, s),
                        "alltoall_base");
                });
}

c10::intrusive_ptr<c10d::Work> BatonBackend::alltoall(std::vector<at::Tensor>& outputs,
                                                      std::vector<at::Tensor>& inputs,
                                                      const c10d::AllToAllOptions& opts) {
  BlockingCall blocking(opts);
  TORCH_CHECK(
      static_cast<int>(inputs.size()) == getSize() && static_cast<int>(outputs.size()) == getSize(),
      "baton backend: alltoall needs ", getSize(), " input and output tensors");
  for (const auto& t : inputs) CheckSameKind(inputs[0], t, "alltoall");
  for (const auto& t : outputs) CheckSameKind(inputs[0], t, "alltoall");
  std::vector<size_t> send_counts = Numels(inputs), recv_counts = Numels(outputs);
  std::vector<at::Tensor> ins = inputs, outs = outputs;
  at::Tensor send = EmptyFlat(ins);
  at::Tensor recv = EmptyFlat(outs);
  HostWork host;
  host.copy_in = true;
  host.copy_out = [recv, outs]() mutable { Unflatten(recv, outs); };
  return Submit(
      c10d::OpType::ALLTOALL, "alltoall", outputs,
      [this, ins, send, recv, send_counts, recv_counts](batonStream_t s) mutable {
        FlattenInto(ins, send);
        std::vector<size_t> sd = Offsets(send_counts), rd = Offsets(recv_counts);
        Check(batonAlltoAllV(send.data_ptr(), send_counts.data(), sd.data(), recv.data_ptr(),
                             recv_counts.data(), rd.data(), DataType(send), comm_, s),
              "alltoall");
      },
      std::move(host));
}

}  // namespace baton_torch
