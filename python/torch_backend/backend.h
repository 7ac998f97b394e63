// BatonBackend: a torch.distributed (c10d) backend over Baton's public C API
// for CPU tensors (and CUDA ones in a few calls, cuda_ops.cc). Every
// operation is checked when it is called (a bad argument throws at once),
// then queued on the backend's worker thread (work.h), which runs the Baton
// calls in order and completes the operation's Work and its future
// (docs/python.md).
#pragma once

#include <baton.h>

#include <functional>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "work.h"

namespace baton_torch {

class BatonBackend : public c10d::Backend {
 public:
  // Collective over the group: rank 0 makes a unique id and puts it in
  // store, the others read it; every rank then joins the communicator. Its
  // waits last at most `timeout` without progress.
  BatonBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
               std::chrono::milliseconds timeout);
  ~BatonBackend() override;

  const std::string getBackendName() const override { return "baton"; }

  // Runs the queued work, then stops every live backend's worker thread.
  // Called at Python's exit (baton/torch.py), while the worker may still take
  // the GIL to free a tensor: during the interpreter's finalization a thread
  // that asks for the GIL is ended through a forced unwind, which aborts when
  // it crosses a destructor.
  static void ShutdownAll();

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  // The tensors of every rank side by side in one allgather (the same sizes on every rank).
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& output_lists, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_split_sizes,
                                               std::vector<int64_t>& input_split_sizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst_rank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src_rank,
                                      int tag) override;
  // Baton's receive names its peer: refused with a message.
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  // A barrier that returns when every rank joined; a rank that does not makes
  // Baton's timeout error (naming it) after the group's timeout.
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override;

 private:
  // Queues job; the returned Work completes with `outputs` once it ran.
  // p2p: a send or recv (work.h: run in a group with the ones queued beside it).
  c10::intrusive_ptr<c10d::Work> Launch(c10d::OpType type, std::vector<at::Tensor> outputs,
                                        std::function<void()> job, bool p2p = false);
  // A call that also takes CUDA tensors: job(nullptr) on the worker for CPU
  // tensors, job(the current CUDA stream) through LaunchOnStream for CUDA ones.
  c10::intrusive_ptr<c10d::Work> Dispatch(c10d::OpType type, std::vector<at::Tensor> outputs,
                                          const at::Tensor& like,
                                          std::function<void(batonStream_t)> job);
  // CUDA tensors (cuda_ops.cc), as NCCL's backend orders them: once the worker
  // has run what was queued before (the calls keep one order on every rank),
  // job queues the Baton calls on the caller's current stream of like's
  // device, and the Work completes at once, its future after them on that
  // stream.
  c10::intrusive_ptr<c10d::Work> LaunchOnStream(c10d::OpType type, std::vector<at::Tensor> outputs,
                                                const at::Tensor& like,
                                                const std::function<void(batonStream_t)>& job);
  // Throws the Baton error of a failed call, with its message.
  void Check(batonResult_t result, const char* what) const;
  // A torch ReduceOp as Baton's: a built-in op, or PREMUL_SUM's factor as a
  // one-element tensor of the data's dtype (the op is made when the call runs).
  struct Reduction {
    batonRedOp_t op = batonSum;
    at::Tensor premul_factor;  // defined for PREMUL_SUM
  };
  Reduction MakeReduction(const c10d::ReduceOp& op, const at::Tensor& like) const;
  // Runs call(op) with the reduction's Baton op (creating and destroying a PreMulSum op).
  void WithOp(const Reduction& reduction, batonDataType_t datatype,
              const std::function<batonResult_t(batonRedOp_t)>& call, const char* what);

  batonComm_t comm_ = nullptr;
  // Stopped in the destructor before comm_ is destroyed.
  Worker worker_{[this] { Check(batonGroupEnd(), "send/recv"); }};
};

}  // namespace baton_torch
