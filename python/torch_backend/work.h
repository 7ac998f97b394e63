// BatonWork and StreamRunner: how the torch backend runs its operations on a
// Baton host stream (docs/python.md).
//
// The calling thread queues an operation's Baton calls on the backend's host
// stream and records an event after them; a completion thread waits for the
// events in order and completes each operation's Work and its future. The
// future must be completed by a thread other than its waiter: DDP waits on
// the future, not on the Work. Three kinds of operations are not queued at
// once:
//  - sends and recvs wait in the runner until one of their Works is waited
//    on, another operation is submitted, or kP2pLinger has passed; then all
//    of them run in one Baton group, so isend/irecv issued in the same order
//    on every rank progress together instead of a send waiting for a recv
//    queued behind it;
//  - between StartCoalescing and EndCoalescing every operation waits, and
//    they run as one Baton group with one Work;
//  - an operation that copies tensors on the host (a list of inputs
//    flattened before its calls, results copied out into a list after them)
//    first waits for everything submitted before it, and the next operation
//    waits for its copies out: tensors are read and written in the order the
//    calls were made, as they would be on a stream.
// A blocking call (Operation::blocking) when the runner is idle skips the
// stream altogether: its Baton calls run synchronously on the caller's
// thread, which is what the caller would wait for anyway, and its Work and
// future are completed before Submit returns, without waking any thread.
// An async call of at most kDeferMaxBytes without host copies, on an idle
// runner, is deferred instead of queued: it waits, as sends and recvs do,
// until its Work (or a later deferred one's) is waited on, another kind of
// operation is submitted, or kDeferLinger has passed. Waited on while the
// stream is still idle, the deferred calls up to the waited one run on the
// waiter's thread (the NULL stream) and complete there: no thread hand-off,
// as for a blocking call. Otherwise they go to the stream in order, so an
// async call never blocks its caller and progresses by itself soon after
// it is made. Held sends and recvs waited on an idle runner run inline too.
#pragma once

#include <baton.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/Work.hpp>

namespace baton_torch {

struct RunnerState;

// A host-stream event, destroyed with its last owner.
using SharedEvent = std::shared_ptr<batonEvent>;

// An operation's Work: its future completes with the output tensors (what
// DDP's communication hooks read) or with Baton's error.
class BatonWork : public c10d::Work {
 public:
  // devices: the CUDA device of a call on CUDA tensors, whose future then
  // completes in stream order (events on the current stream).
  BatonWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs,
            std::vector<c10::Device> devices = {});

  std::vector<at::Tensor> result() override { return outputs_; }
  // A deferred operation (see the top) is launched on the stream first.
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  void synchronize() override {}
  // For a deferred operation, or a held send or recv: without a timeout on
  // an idle runner runs it on this thread (see the top); else launches it on
  // the stream. Without a timeout, and for an operation without host
  // copies, waits for its event itself and completes the Work (one thread
  // hand-off fewer than waiting for the completion thread, which then finds
  // it done).
  bool wait(std::chrono::milliseconds timeout) override;

  // Completes the future, then the Work (nullptr: success); once: a second
  // call does nothing.
  void Complete(std::exception_ptr error);

  // A recv from any source (recvAnysource): where batonRecvAny writes the
  // rank it received from once the recv has run.
  void SetSourceSlot(std::shared_ptr<const int> slot) { source_slot_ = std::move(slot); }
  int sourceRank() const override {
    TORCH_CHECK(source_slot_ != nullptr,
                "baton backend: sourceRank is only known for a recv from any source");
    TORCH_CHECK(*source_slot_ >= 0,
                "baton backend: sourceRank of a recv from any source that has not completed "
                "(wait() first) or that failed");
    return *source_slot_;
  }

 private:
  friend class StreamRunner;
  friend struct RunnerState;
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::atomic<bool> completing_{false};
  std::mutex mutex_;                        // guards the three below
  std::weak_ptr<RunnerState> runner_;       // set while deferred or held; may outlive it
  SharedEvent event_;                       // set once queued, for an operation without host copies
  std::string name_;                        // the operation's, for errors
  batonComm_t comm_ = nullptr;              // its communicator, for the errors' failed ranks
  std::shared_ptr<const int> source_slot_;  // set for a recv from any source
};

// A c10::DistBackendError with message: what Baton's errors become.
[[noreturn]] void ThrowBackendError(const std::string& message);
std::exception_ptr BackendError(const std::string& message);
// "baton <what>: <Baton's error string>: <the last error's message>", the
// message from comm's last error (nullptr: this thread's); for a remote
// error or a timeout then " [failed ranks: 1, 3]" when failed_of (or comm)
// lists any (batonCommGetFailedRanks).
std::string ErrorText(const std::string& what, batonResult_t result, batonComm_t comm = nullptr,
                      batonComm_t failed_of = nullptr);
// Runs fn; what it throws, as a DistBackendError (nullptr when nothing).
std::exception_ptr CaptureError(const std::function<void()>& fn);

// One torch operation: its Work and how to run it.
struct Operation {
  c10::intrusive_ptr<BatonWork> work;
  // "allreduce": an error completes the Work as "baton allreduce: <Baton's error>".
  std::string name;
  // Makes the operation's Baton calls on `stream` (inside a group for sends,
  // recvs and coalesced operations); throws Baton's error. Holds every tensor
  // the calls use, so they live until the calls ran.
  std::function<void(batonStream_t stream)> queue;
  // Host copies once the calls ran (results into a list of outputs), or empty.
  std::function<void()> copy_out;
  // queue reads tensors on the host (flattens a list of inputs).
  bool copy_in = false;
  bool p2p = false;
  // The caller waits on the Work at once (torch's async_op=False): with
  // nothing queued, held or coalescing, the calls run on the caller's thread
  // (the NULL stream) and the Work is complete when Submit returns.
  bool blocking = false;
};

// Runs Operations on one host stream of one communicator (see the top).
class StreamRunner {
 public:
  // How long held sends and recvs wait for more of their kind when nobody
  // waits on them (a caller that polls is_completed() or the future).
  static constexpr std::chrono::milliseconds kP2pLinger{20};
  // How long a deferred async call waits for its wait() before the
  // completion thread launches it on the stream; and the largest one
  // deferred (the outputs' bytes): above, the hand-off is a small part of
  // the call, which starts at once.
  static constexpr std::chrono::microseconds kDeferLinger{200};
  static constexpr int64_t kDeferMaxBytes = 256 << 10;

  // Whether operations on an idle runner run on the caller's thread
  // (blocking ones, and deferred async ones and held sends and recvs when
  // waited on; the default); off, they all take the stream. Process-wide,
  // for benchmarks and tests of the stream path.
  static void SetInlineBlocking(bool on);

  // Creates the host stream and the completion thread; comm: the
  // communicator of the calls it runs (their errors name its failed ranks).
  explicit StreamRunner(batonComm_t comm = nullptr);
  ~StreamRunner();
  StreamRunner(const StreamRunner&) = delete;
  StreamRunner& operator=(const StreamRunner&) = delete;

  // Queues op (or holds it, see the top). Baton's errors in queueing an
  // operation that runs at once are thrown (DistBackendError); those of held
  // ones complete their Works.
  void Submit(Operation op);
  // Operations submitted until EndCoalescing run as one group.
  void StartCoalescing();
  // Runs them; the returned Work completes when they all have.
  c10::intrusive_ptr<c10d::Work> EndCoalescing(int rank);
  // Returns once everything submitted so far has run and completed (held
  // sends and recvs included): before a call that runs outside the stream.
  // Each Baton call has its deadline, so this wait ends too.
  void Drain();
  // Runs what is held and queued, completes it, stops the completion thread
  // and frees the stream; later Submits fail their Works. Idempotent.
  void Stop();

 private:
  std::shared_ptr<RunnerState> state_;
  std::thread completer_;
};

}  // namespace baton_torch
