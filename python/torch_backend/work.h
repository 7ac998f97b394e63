// BatonWork and Worker: how the torch backend runs its operations. Every
// operation is queued on the backend's Worker, one thread that runs the
// Baton calls in order and completes each operation's Work and its future
// (docs/python.md says why a thread of the backend rather than a Baton host
// stream). Point-to-point operations wait in the queue until one of their
// Works is waited on, a collective follows them, or kP2pLinger has passed;
// then every send and recv queued together runs as one Baton group, so
// isend/irecv pairs that both ranks issue in the same order progress together
// instead of each rank's send waiting for a recv queued behind it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/Work.hpp>

namespace baton_torch {

struct WorkQueue;

// A queued operation: a Work whose future completes with the output tensors
// (what DDP's communication hooks read) or with Baton's error.
class BatonWork : public c10d::Work {
 public:
  // devices: the CUDA device of a call on CUDA tensors, whose future then
  // completes in stream order (events on the current stream).
  BatonWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs,
            std::vector<c10::Device> devices = {});

  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  void synchronize() override {}
  // For a send or recv: launches the point-to-point calls queued so far first.
  bool wait(std::chrono::milliseconds timeout) override;

  // Called by the worker thread once the Baton calls returned.
  void Complete(std::exception_ptr error);

 private:
  friend class Worker;
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::weak_ptr<WorkQueue> queue_;  // set for point-to-point work; the Work may outlive it
};

// A c10::DistBackendError with message, as an exception_ptr.
std::exception_ptr BackendError(const std::string& message);

// Runs queued jobs in order on one thread. A job throws on failure.
class Worker {
 public:
  // How long queued sends and recvs wait for more of their kind when nobody
  // waits on them (a caller that polls is_completed() or the future).
  static constexpr std::chrono::milliseconds kP2pLinger{20};

  // end_group: batonGroupEnd for the point-to-point calls, throwing Baton's error.
  explicit Worker(std::function<void()> end_group);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // p2p: a batonSend or batonRecv, run inside a group with its neighbours.
  void Enqueue(c10::intrusive_ptr<BatonWork> work, std::function<void()> job, bool p2p = false);
  // Returns once everything queued so far has run (sends and recvs included):
  // before a call that runs on the caller's thread. Each queued Baton call has
  // its deadline, so this wait ends too.
  void Drain();
  // Runs what is queued, then joins the thread; later Enqueue calls fail their Work.
  void Stop();

 private:
  void Run();

  std::shared_ptr<WorkQueue> queue_;
  std::function<void()> end_group_;
  std::thread thread_;
};

}  // namespace baton_torch
