// BatonBackend: a torch.distributed (c10d) backend over Baton's public C API
// for CPU tensors (and CUDA ones in a few calls, cuda_ops.cc). Every
// operation is checked when it is called (a bad argument throws at once),
// then its Baton calls are queued on the backend's host stream, and a
// completion thread completes its Work and future when they have run
// (work.h, docs/python.md).
#pragma once

#include <baton.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "work.h"

namespace baton_torch {

// How a backend operation touches tensors beyond its Baton calls (work.h).
struct HostWork {
  std::function<void()> copy_out;  // results into a list, once the calls ran
  bool copy_in = false;            // its queue function flattens inputs
  bool p2p = false;                // a send or recv
  bool any_source = false;         // a recv from any source (run alone, not counted)
};

// Marks the calling thread's next Submit as blocking (Operation::blocking)
// when torch's options say the caller waits at once (asyncOp false, what
// dist.all_reduce(t) passes), and gives it the options' own timeout
// (kUnsetTimeout: the group's); for the scope of one backend call.
class BlockingCall {
 public:
  template <typename Options>
  explicit BlockingCall(const Options& opts) {
    blocking_ = !opts.asyncOp;
    timeout_ = opts.timeout;
  }
  ~BlockingCall() {
    blocking_ = false;
    timeout_ = c10d::kUnsetTimeout;
  }
  BlockingCall(const BlockingCall&) = delete;
  BlockingCall& operator=(const BlockingCall&) = delete;
  // Whether the current call is blocking.
  static bool Now() { return blocking_; }
  // The current call's own timeout; negative (kUnsetTimeout) when it has none.
  static std::chrono::milliseconds Timeout() { return timeout_; }

 private:
  static thread_local bool blocking_;
  static thread_local std::chrono::milliseconds timeout_;
};

class BatonBackend : public c10d::Backend {
 public:
  // Collective over the group: rank 0 makes a unique id and puts it in
  // store, the others read it; every rank then joins the communicator. Its
  // waits last at most `timeout` without progress.
  BatonBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
               std::chrono::milliseconds timeout);
  ~BatonBackend() override;

  const std::string getBackendName() const override { return "baton"; }

  // Runs the queued work, then stops every live backend's completion thread.
  // Called at Python's exit (baton/torch.py), while that thread may still
  // take the GIL to free a tensor: during the interpreter's finalization a
  // thread that asks for the GIL is ended through a forced unwind, which
  // aborts when it crosses a destructor.
  static void ShutdownAll();

  // torch's coalescing manager (batch_isend_irecv among others): the
  // operations between start and end run as one Baton group.
  bool supportsCoalescing() const override { return true; }
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;
  // torch's split_group: the members (`ranks`, sorted parent ranks) make a
  // new communicator through `store`, as the constructor does; others get
  // nullptr. opts' timeout, else this group's.
  bool supportsSplitting() const override { return true; }
  // A new Options with this group's timeout (split_group copies and amends it).
  c10::intrusive_ptr<Options> getBackendOptions() override {
    return c10::make_intrusive<Options>("baton", timeout_);
  }
  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store>& store,
                                          const std::vector<int>& ranks,
                                          const c10::intrusive_ptr<Options>& opts) override;
  // The number of collectives (not sends or recvs) called so far: the same on
  // every rank of a group that calls them in one order. TORCH_DISTRIBUTED_DEBUG
  // =DETAIL's wrapper checks it.
  uint64_t getSequenceNumberForGroup() override { return collectives_; }
  // batonCommRegister / batonCommDeregister of host memory on this group's
  // communicator (baton.torch.empty). Deregistering after shutdown does
  // nothing: the communicator gave its registrations back when it was freed.
  uintptr_t RegisterBuffer(void* ptr, size_t bytes);
  void DeregisterBuffer(uintptr_t handle);
  // destroy_process_group: runs what is queued, then frees the communicator.
  void shutdown() override;
  // Stops what is in flight at once (peers see an error), then frees.
  void abort() override;

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
  // One reduce-scatter per pair, in one Baton group.
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
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
  // Baton's timeout error (naming it) after opts' timeout (monitored_barrier's
  // own), else the group's.
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override;

 private:
  // Submits an operation whose Work completes with `outputs` once the calls
  // `queue` makes on the host stream have run.
  c10::intrusive_ptr<c10d::Work> Submit(c10d::OpType type, const char* name,
                                        std::vector<at::Tensor> outputs,
                                        std::function<void(batonStream_t)> queue,
                                        HostWork host = {});
  // A send (type SEND) or recv of the one tensor, held to run in a group
  // with its neighbours (work.h).
  c10::intrusive_ptr<c10d::Work> PointToPoint(c10d::OpType type, std::vector<at::Tensor>& tensors,
                                              int peer);
  // A call that also takes CUDA tensors: Submit for CPU tensors,
  // LaunchOnStream (the current CUDA stream) for CUDA ones.
  c10::intrusive_ptr<c10d::Work> Dispatch(c10d::OpType type, const char* name,
                                          std::vector<at::Tensor> outputs, const at::Tensor& like,
                                          std::function<void(batonStream_t)> queue);
  // CUDA tensors (cuda_ops.cc), as NCCL's backend orders them: once what
  // was submitted before has run (the calls keep one order on every rank),
  // job queues the Baton calls on the caller's current stream of like's
  // device, and the Work completes at once, its future after them on that
  // stream.
  c10::intrusive_ptr<c10d::Work> LaunchOnStream(c10d::OpType type, std::vector<at::Tensor> outputs,
                                                const at::Tensor& like,
                                                const std::function<void(batonStream_t)>& job);
  // queue, made to run its Baton calls under the current call's own timeout
  // (BlockingCall::Timeout) when it has one other than the group's:
  // batonCommSetCallTimeout around them, each call taking it when made.
  std::function<void(batonStream_t)> WithCallTimeout(std::function<void(batonStream_t)> queue);
  // Throws the Baton error of a failed call (DistBackendError, with its message).
  void Check(batonResult_t result, const char* what) const;
  // A torch ReduceOp as Baton's: a built-in op, or PREMUL_SUM's factor as a
  // one-element tensor of the data's dtype (the op is made when the call is queued).
  struct Reduction {
    batonRedOp_t op = batonSum;
    at::Tensor premul_factor;  // defined for PREMUL_SUM
  };
  Reduction MakeReduction(const c10d::ReduceOp& op, const at::Tensor& like) const;
  // Runs call(op) with the reduction's Baton op (creating and destroying a
  // PreMulSum op: Baton reads the factor when the call is made).
  void WithOp(const Reduction& reduction, batonDataType_t datatype,
              const std::function<batonResult_t(batonRedOp_t)>& call, const char* what);

  // call(0) ... call(n - 1) (each makes Baton calls, throwing their errors)
  // inside one Baton group: they run as one schedule.
  void InOneGroup(size_t n, const std::function<void(size_t)>& call, const char* what);
  // batonAllReduce of t in place, on stream.
  void AllReduceInPlace(const at::Tensor& t, const Reduction& reduction, batonStream_t stream);

  // Atomic: abort() may come from another thread (torch's watchdog) while calls are queued.
  std::atomic<batonComm_t> comm_{nullptr};
  std::chrono::milliseconds timeout_;
  std::atomic<uint64_t> collectives_{0};  // getSequenceNumberForGroup
  // Made once comm_ exists; stopped before comm_ is destroyed.
  std::unique_ptr<StreamRunner> runner_;
};

}  // namespace baton_torch
