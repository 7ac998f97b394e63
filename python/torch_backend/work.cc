#include "work.h"

#include <algorithm>

namespace baton_torch {

// What the callers, the completion thread and held Works share. Lock order:
// issue_mu before mu; the completion thread never waits for issue_mu (it
// only tries it), so a caller may wait for completions while holding it.
struct RunnerState {
  // Operations whose calls were queued under one event, completed together.
  struct Completion {
    std::vector<Operation> ops;                        // their tensors live until the calls ran
    std::vector<c10::intrusive_ptr<BatonWork>> extra;  // a coalesced group's own Work
    SharedEvent event;
    std::exception_ptr error;  // set when queueing failed
    uint64_t seq = 0;
    bool started = false;  // the completion thread took it (in order, or inline)
  };

  // Operations run on a caller's thread (work.h), completed once it has
  // released issue_mu: their futures' callbacks may call in.
  struct InlineRun {
    std::vector<Operation> ops;
    std::vector<std::exception_ptr> errors;
    void Complete() {
      for (size_t i = 0; i < ops.size(); ++i) ops[i].work->Complete(errors[i]);
    }
  };

  // Queues ops on the stream (as one group when group), records their event
  // and hands them to the completion thread. Returns the error of queueing.
  std::exception_ptr RunLocked(std::vector<Operation> ops, bool group,
                               c10::intrusive_ptr<BatonWork> extra = {});
  // Queues the deferred operations, then the held sends and recvs (one group).
  void FlushHeldLocked();
  void FlushDeferredLocked();
  // Runs the first n deferred operations on this thread, in order, into run.
  void RunDeferredInlineLocked(size_t n, InlineRun* run);
  // When the runner is idle and work is deferred or held: runs it (and the
  // deferred ones before it, or its group of sends and recvs) on this thread
  // into run, and returns true.
  bool RunInlineLocked(const BatonWork* work, InlineRun* run);
  // Held or deferred operations wait until now + d for the completion thread.
  void LingerLocked(std::chrono::steady_clock::duration d);
  // Nothing submitted before is still running or completing.
  bool IdleLocked();
  // Waits until the operations submitted so far have completed (all), or
  // until the last one that copies out has (otherwise).
  void WaitLocked(bool all);
  // The completion thread.
  void Complete();
  // Synchronizes c's event, copies out and completes its Works (running
  // their futures' callbacks).
  void Finish(Completion& c);
  // On the completion thread, inside a future's callback: finishes, in
  // order, every pending Completion not started yet (those queued by the
  // callback included). Nobody else can: this thread is busy in the callback.
  void FinishPendingInline();
  bool OnCompletionThread() const { return std::this_thread::get_id() == completer_id; }
  std::thread::id completer_id;

  batonStream_t stream = nullptr;
  batonComm_t comm = nullptr;  // the stream's calls', for their errors' failed ranks

  std::mutex issue_mu;               // orders queueing on the stream
  std::vector<Operation> held;       // sends and recvs not queued yet
  std::vector<Operation> deferred;   // async calls not queued yet (never with held)
  std::vector<Operation> coalesced;  // between StartCoalescing and EndCoalescing
  bool coalescing = false;
  bool stopped = false;

  std::mutex mu;  // the completion queue
  std::condition_variable cv;
  std::deque<Completion> pending;
  uint64_t next_seq = 0;       // of the next Completion
  uint64_t done_before = 0;    // Completions numbered below this are done
  uint64_t copies_before = 0;  // ... the last one that copies out is numbered below this
  bool linger = false;         // held or deferred operations wait until linger_until
  std::chrono::steady_clock::time_point linger_until;
  // When the completion thread's wait ends (max: none), min while it runs: a
  // new linger wakes it only when it ends sooner.
  std::chrono::steady_clock::time_point completer_wakes_at =
      std::chrono::steady_clock::time_point::min();
  // A linger began since the completion thread last woke: it then wakes
  // again after kDeferLinger instead of sleeping without a deadline, so calls
  // deferred back to back need not wake it (a new linger still does when it
  // ends before that wake).
  bool lingered = false;
  bool stop = false;
};

namespace {

std::atomic<bool> inline_blocking{true};

std::exception_ptr ShutDownError(const std::string& name) {
  return BackendError("baton " + name + ": the process group is shut down");
}

int64_t OutputBytes(const Operation& op) {
  int64_t bytes = 0;
  for (const at::Tensor& t : op.work->result()) {
    if (t.defined()) bytes += static_cast<int64_t>(t.nbytes());
  }
  return bytes;
}

}  // namespace

// ---- BatonWork ----

BatonWork::BatonWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs,
                     std::vector<c10::Device> devices)
    : c10d::Work(rank, type),
      outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::ofTensors(),
                                                       std::move(devices))) {}

bool BatonWork::wait(std::chrono::milliseconds timeout) {
  std::shared_ptr<RunnerState> state;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    state = runner_.lock();
  }
  if (state) {
    RunnerState::InlineRun run;
    {
      std::lock_guard<std::mutex> lock(state->issue_mu);
      if (timeout != kNoTimeout || !state->RunInlineLocked(this, &run)) state->FlushHeldLocked();
    }
    run.Complete();
  }
  SharedEvent event;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    event = event_;
  }
  if (event && timeout == kNoTimeout && !isCompleted()) {
    // Every Baton call has a deadline, so this wait ends.
    batonResult_t r = batonEventSynchronize(event.get());
    Complete(r == batonSuccess ? nullptr : BackendError(ErrorText(name_, r, nullptr, comm_)));
  }
  return c10d::Work::wait(timeout);
}

c10::intrusive_ptr<c10::ivalue::Future> BatonWork::getFuture() {
  std::shared_ptr<RunnerState> state;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    state = runner_.lock();
  }
  if (state) {
    // Whoever asks for the future waits on it or chains callbacks (DDP),
    // not through wait(): launch the call now rather than after the linger.
    std::lock_guard<std::mutex> lock(state->issue_mu);
    if (std::any_of(state->deferred.begin(), state->deferred.end(),
                    [this](const Operation& op) { return op.work.get() == this; })) {
      state->FlushDeferredLocked();
    }
  }
  return future_;
}

void BatonWork::Complete(std::exception_ptr error) {
  if (completing_.exchange(true)) return;  // the waiter and the completion thread may both try
  // The future first: once wait() returns, DDP reads the future's value.
  if (error) {
    future_->setError(error);
  } else {
    future_->markCompleted(c10::IValue(outputs_));
  }
  finish(error);
}

// ---- RunnerState ----

std::exception_ptr RunnerState::RunLocked(std::vector<Operation> ops, bool group,
                                          c10::intrusive_ptr<BatonWork> extra) {
  Completion c;
  if (group) batonGroupStart();
  for (const Operation& op : ops) {
    c.error = CaptureError([&] { op.queue(stream); });
    if (c.error) break;
  }
  if (group) {
    // Ends the group even after a failure: this thread must leave it.
    batonResult_t r = batonGroupEnd();
    if (r != batonSuccess && !c.error)
      c.error = BackendError(ErrorText(ops.front().name, r, nullptr, comm));
  }
  if (!c.error || group) {  // a group's calls before the failure were queued
    batonEvent_t event = nullptr;
    batonResult_t r = batonEventCreate(&event);
    if (r == batonSuccess) {
      c.event = SharedEvent(event, [](batonEvent_t e) { batonEventDestroy(e); });
      r = batonEventRecord(event, stream);
    }
    if (r != batonSuccess && !c.error)
      c.error = BackendError(ErrorText(ops.front().name, r, nullptr, comm));
  }
  if (!c.error && c.event) {
    for (const Operation& op : ops) {
      if (op.copy_out) continue;
      std::lock_guard<std::mutex> lock(op.work->mutex_);
      op.work->event_ = c.event;
      op.work->name_ = op.name;
      op.work->comm_ = comm;
    }
  }
  std::exception_ptr error = c.error;
  const bool copies =
      std::any_of(ops.begin(), ops.end(), [](const Operation& op) { return bool(op.copy_out); });
  c.ops = std::move(ops);
  if (extra) c.extra.push_back(std::move(extra));
  {
    std::lock_guard<std::mutex> lock(mu);
    c.seq = next_seq++;
    if (copies) copies_before = c.seq + 1;
    pending.push_back(std::move(c));
  }
  cv.notify_all();
  return error;
}

void RunnerState::FlushDeferredLocked() {
  if (deferred.empty()) return;
  std::vector<Operation> ops = std::move(deferred);
  deferred.clear();
  {
    std::lock_guard<std::mutex> lock(mu);
    linger = false;
  }
  for (Operation& op : ops) {
    {
      std::lock_guard<std::mutex> lock(op.work->mutex_);
      op.work->runner_.reset();
    }
    std::vector<Operation> one;
    one.push_back(std::move(op));
    RunLocked(std::move(one), /*group=*/false);  // an error completes its Work
  }
}

void RunnerState::RunDeferredInlineLocked(size_t n, InlineRun* run) {
  for (size_t i = 0; i < n; ++i) {
    Operation& op = deferred[i];
    {
      std::lock_guard<std::mutex> lock(op.work->mutex_);
      op.work->runner_.reset();
    }
    run->errors.push_back(CaptureError([&] { op.queue(nullptr); }));
    run->ops.push_back(std::move(op));
  }
  deferred.erase(deferred.begin(), deferred.begin() + static_cast<std::ptrdiff_t>(n));
  if (n > 0 && deferred.empty()) {
    // The completion thread may still wake at the old deadline, and finds nothing.
    std::lock_guard<std::mutex> lock(mu);
    linger = false;
  }
}

bool RunnerState::RunInlineLocked(const BatonWork* work, InlineRun* run) {
  if (!inline_blocking.load(std::memory_order_relaxed) || !IdleLocked()) return false;
  auto is_work = [work](const Operation& op) { return op.work.get() == work; };
  auto d = std::find_if(deferred.begin(), deferred.end(), is_work);
  if (d != deferred.end()) {
    RunDeferredInlineLocked(static_cast<size_t>(d - deferred.begin()) + 1, run);
    return true;
  }
  if (std::none_of(held.begin(), held.end(), is_work)) return false;
  // The held group as it would run on the stream, but here: the caller waits for it anyway.
  std::vector<Operation> ops = std::move(held);
  held.clear();
  {
    std::lock_guard<std::mutex> lock(mu);
    linger = false;
  }
  std::exception_ptr error;
  batonGroupStart();
  for (const Operation& op : ops) {
    {
      std::lock_guard<std::mutex> lock(op.work->mutex_);
      op.work->runner_.reset();
    }
    if (!error) error = CaptureError([&] { op.queue(nullptr); });
  }
  batonResult_t r = batonGroupEnd();  // leaves the group in any case; runs the calls
  if (r != batonSuccess && !error)
    error = BackendError(ErrorText(ops.front().name, r, nullptr, comm));
  for (Operation& op : ops) {
    run->ops.push_back(std::move(op));
    run->errors.push_back(error);
  }
  return true;
}

void RunnerState::LingerLocked(std::chrono::steady_clock::duration d) {
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu);
    linger = true;
    lingered = true;
    linger_until = std::chrono::steady_clock::now() + d;
    wake = linger_until < completer_wakes_at;
  }
  if (wake) cv.notify_all();  // unlocked: it would wake only to wait for mu
}

void RunnerState::FlushHeldLocked() {
  FlushDeferredLocked();
  if (held.empty()) return;
  std::vector<Operation> ops = std::move(held);
  held.clear();
  {
    std::lock_guard<std::mutex> lock(mu);
    linger = false;
  }
  for (Operation& op : ops) {
    std::lock_guard<std::mutex> lock(op.work->mutex_);
    op.work->runner_.reset();
  }
  RunLocked(std::move(ops), /*group=*/true);  // an error completes their Works
}

bool RunnerState::IdleLocked() {
  std::lock_guard<std::mutex> lock(mu);
  return done_before == next_seq;
}

void RunnerState::WaitLocked(bool all) {
  std::unique_lock<std::mutex> lock(mu);
  const uint64_t until = all ? next_seq : copies_before;
  cv.wait(lock, [&] { return done_before >= until; });
}

void RunnerState::Complete() {
  std::unique_lock<std::mutex> lock(mu);
  for (;;) {
    if (pending.empty()) {
      if (linger && std::chrono::steady_clock::now() >= linger_until) {
        // Launch the held sends and recvs, unless a caller is queueing (and
        // will launch them itself): this thread never waits for issue_mu.
        lock.unlock();
        std::unique_lock<std::mutex> issue(issue_mu, std::try_to_lock);
        if (issue.owns_lock()) FlushHeldLocked();
        issue = {};
        lock.lock();
        if (linger) {
          completer_wakes_at = std::chrono::steady_clock::now() + std::chrono::milliseconds(1);
          cv.wait_until(lock, completer_wakes_at);
          completer_wakes_at = std::chrono::steady_clock::time_point::min();
        }
        continue;
      }
      if (stop && !linger) return;
      // No deadline while idle: each Baton call has its own.
      if (linger) {
        completer_wakes_at = linger_until;
        cv.wait_until(lock, linger_until);
      } else if (lingered) {
        lingered = false;
        completer_wakes_at = std::chrono::steady_clock::now() + StreamRunner::kDeferLinger;
        cv.wait_until(lock, completer_wakes_at);
      } else {
        completer_wakes_at = std::chrono::steady_clock::time_point::max();
        cv.wait(lock);
      }
      completer_wakes_at = std::chrono::steady_clock::time_point::min();
      continue;
    }
    // Only this thread pops; references to a deque's elements survive pushes.
    Completion& c = pending.front();
    const bool run = !c.started;  // else finished inline by a callback
    c.started = true;
    lock.unlock();
    if (run) Finish(c);
    lock.lock();
    Completion finished = std::move(pending.front());
    pending.pop_front();
    done_before = finished.seq + 1;
    cv.notify_all();
    lock.unlock();
    finished = {};  // frees the tensors outside the lock
    lock.lock();
  }
}

void RunnerState::Finish(Completion& c) {
  std::exception_ptr error = c.error;
  if (c.event != nullptr) {
    batonResult_t r = batonEventSynchronize(c.event.get());
    if (r != batonSuccess && !error)
      error = BackendError(ErrorText(c.ops.front().name, r, nullptr, comm));
  }
  for (const Operation& op : c.ops) {
    if (!error && op.copy_out) error = CaptureError(op.copy_out);
  }
  for (const Operation& op : c.ops) op.work->Complete(error);
  for (const auto& work : c.extra) work->Complete(error);
}

void RunnerState::FinishPendingInline() {
  for (size_t i = 0;; ++i) {
    Completion* c = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (i >= pending.size()) return;
      if (!pending[i].started) {
        c = &pending[i];
        c->started = true;
      }
    }
    if (c != nullptr) Finish(*c);  // its callbacks may nest here again
  }
}

// ---- StreamRunner ----

void StreamRunner::SetInlineBlocking(bool on) {
  inline_blocking.store(on, std::memory_order_relaxed);
}

StreamRunner::StreamRunner(batonComm_t comm) : state_(std::make_shared<RunnerState>()) {
  state_->comm = comm;
  batonResult_t r = batonStreamCreate(&state_->stream);
  if (r != batonSuccess) ThrowBackendError(ErrorText("creating the host stream", r));
  std::lock_guard<std::mutex> issue(state_->issue_mu);  // completer_id is set before a Submit
  completer_ = std::thread([state = state_] { state->Complete(); });
  state_->completer_id = completer_.get_id();
}

StreamRunner::~StreamRunner() {
  Stop();
}

void StreamRunner::Submit(Operation op) {
  RunnerState& s = *state_;
  std::unique_lock<std::mutex> issue(s.issue_mu);
  if (s.stopped) {
    issue.unlock();
    op.work->Complete(ShutDownError(op.name));
    return;
  }
  if (s.coalescing) {
    s.coalesced.push_back(std::move(op));
    return;
  }
  if (op.p2p) {
    s.FlushDeferredLocked();  // they were called first
    {
      std::lock_guard<std::mutex> lock(op.work->mutex_);
      op.work->runner_ = state_;
    }
    s.held.push_back(std::move(op));
    if (s.held.size() == 1) s.LingerLocked(kP2pLinger);
    return;
  }
  const bool inline_ok = inline_blocking.load(std::memory_order_relaxed);
  if (op.blocking && inline_ok && s.held.empty() && s.IdleLocked()) {
    // The fast path (see work.h): issue_mu stays held while the calls run
    // (the deferred ones first), so nothing is queued on the stream
    // meanwhile and the calls keep their order; it is released before
    // completing, whose callbacks may call in.
    RunnerState::InlineRun run;
    s.RunDeferredInlineLocked(s.deferred.size(), &run);
    std::exception_ptr error = CaptureError([&] { op.queue(nullptr); });
    if (!error && op.copy_out) error = CaptureError(op.copy_out);
    issue.unlock();
    run.Complete();
    op.work->Complete(error);
    return;
  }
  if (!op.blocking && inline_ok && !op.copy_in && !op.copy_out && s.held.empty() &&
      !s.OnCompletionThread() && OutputBytes(op) <= kDeferMaxBytes &&
      (!s.deferred.empty() || s.IdleLocked())) {
    // Deferred (see work.h); not on the completion thread, which launches
    // deferred calls and may be waiting in a callback for this one.
    {
      std::lock_guard<std::mutex> lock(op.work->mutex_);
      op.work->runner_ = state_;
    }
    s.deferred.push_back(std::move(op));
    if (s.deferred.size() == 1) s.LingerLocked(kDeferLinger);
    return;
  }
  s.FlushHeldLocked();
  if (s.OnCompletionThread()) {
    // From a future's callback (PowerSGD's hook waits on the future of an
    // allreduce it makes there): waiting for the completion thread would wait
    // for itself, so this thread runs the operation through to completion,
    // after what was submitted before it.
    issue.unlock();
    if (op.copy_in) s.FinishPendingInline();
    issue.lock();
    std::vector<Operation> ops;
    ops.push_back(std::move(op));
    std::exception_ptr error = s.RunLocked(std::move(ops), /*group=*/false);
    issue.unlock();
    s.FinishPendingInline();
    if (error) std::rethrow_exception(error);
    return;
  }
  s.WaitLocked(/*all=*/op.copy_in);
  std::vector<Operation> ops;
  ops.push_back(std::move(op));
  if (std::exception_ptr error = s.RunLocked(std::move(ops), /*group=*/false)) {
    std::rethrow_exception(error);
  }
}

void StreamRunner::StartCoalescing() {
  std::lock_guard<std::mutex> issue(state_->issue_mu);
  TORCH_CHECK(!state_->coalescing, "baton backend: startCoalescing inside a coalescing block");
  state_->FlushHeldLocked();
  state_->coalescing = true;
}

c10::intrusive_ptr<c10d::Work> StreamRunner::EndCoalescing(int rank) {
  RunnerState& s = *state_;
  std::lock_guard<std::mutex> issue(s.issue_mu);
  TORCH_CHECK(s.coalescing, "baton backend: endCoalescing without startCoalescing");
  s.coalescing = false;
  std::vector<Operation> ops = std::move(s.coalesced);
  s.coalesced.clear();
  std::vector<at::Tensor> outputs;
  bool copy_in = false;
  for (Operation& op : ops) {
    for (const at::Tensor& t : op.work->result()) outputs.push_back(t);
    copy_in |= op.copy_in;
  }
  auto work = c10::make_intrusive<BatonWork>(rank, c10d::OpType::COALESCED, outputs);
  if (ops.empty() || s.stopped) {
    work->Complete(ops.empty() ? nullptr : ShutDownError("coalesced"));
    for (Operation& op : ops) op.work->Complete(ShutDownError(op.name));
    return work;
  }
  s.WaitLocked(copy_in);
  s.RunLocked(std::move(ops), /*group=*/true, work);  // an error completes the Works
  return work;
}

void StreamRunner::Drain() {
  RunnerState& s = *state_;
  std::lock_guard<std::mutex> issue(s.issue_mu);
  s.FlushHeldLocked();
  s.WaitLocked(/*all=*/true);
}

void StreamRunner::Stop() {
  RunnerState& s = *state_;
  {
    std::lock_guard<std::mutex> issue(s.issue_mu);
    if (s.stopped) return;
    s.FlushHeldLocked();
    for (Operation& op : s.coalesced) {
      op.work->Complete(ShutDownError(op.name + " (inside a coalescing block)"));
    }
    s.coalesced.clear();
    s.stopped = true;
  }
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.stop = true;
  }
  s.cv.notify_all();
  if (completer_.joinable()) {
    // A future's callback could drop the last reference to the backend on
    // the completion thread itself; that thread then ends on its own.
    if (completer_.get_id() == std::this_thread::get_id()) {
      completer_.detach();
    } else {
      completer_.join();
    }
  }
  batonStreamDestroy(s.stream);
  s.stream = nullptr;
}

}  // namespace baton_torch
