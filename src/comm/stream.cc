#include "comm/stream.h"

#include "base/settings.h"
#include "base/spin.h"

namespace baton {
namespace {

// Polls `ready` before the caller sleeps, as the process's BATON_SPIN_*
// say (base/spin.h), counted as crowded: a stream's worker often shares its
// caller's one core, so it yields on every poll unless BATON_SPIN_YIELD_NS
// says otherwise. A wake-up from a condition variable costs several
// microseconds here.
template <typename Ready>
bool PollBriefly(Ready ready) {
  static const SpinPolicy policy = [] {
    const Settings& s = ProcessSettings();
    return SpinPolicy::Of(s.spin_us, s.spin_yield, s.spin_yield_ns, /*crowded=*/true);
  }();
  if (ready()) return true;
  for (Spinner spinner(policy, Clock::now()); spinner.Pause();) {
    if (ready()) return true;
  }
  return false;
}

}  // namespace

std::shared_ptr<StreamMark> StreamMark::Done() {
  auto mark = std::make_shared<StreamMark>();
  mark->done_.store(true, std::memory_order_relaxed);
  return mark;
}

batonResult_t StreamMark::Query() {
  std::lock_guard<std::mutex> lock(mu_);
  return done_.load(std::memory_order_relaxed) ? status_.code() : batonInProgress;
}

Status StreamMark::Wait() {
  // No deadline of its own: every task before the mark is a call bounded by
  // its communicator's timeout and ended by abort, as batonStreamSynchronize.
  PollBriefly([&] { return done_.load(std::memory_order_acquire); });
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_.load(std::memory_order_relaxed); });
  return status_;
}

void StreamMark::Complete(Status status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    status_ = std::move(status);
    done_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
}

HostStream::HostStream()
    : slots_(std::make_unique_for_overwrite<Slot[]>(kMaxQueued + 1)),
      capacity_(kMaxQueued + 1),
      worker_([this] { WorkerLoop(); }) {}

HostStream::~HostStream() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    idle_cv_.wait(lock, [&] { return pending_.load(std::memory_order_relaxed) == 0; });
    stopping_ = true;
  }
  work_cv_.notify_all();
  worker_.join();
}

HostStream::Slot& HostStream::ClaimSlot(std::unique_lock<std::mutex>& lock) {
  if (count_ >= kMaxQueued && std::this_thread::get_id() != worker_.get_id()) {
    // No deadline of its own: the tasks ahead are calls bounded by their
    // communicators' timeouts, as Synchronize's wait.
    ++waiting_for_room_;
    room_cv_.wait(lock, [&] { return count_ <= kResumeQueued; });
    --waiting_for_room_;
  }
  const bool running_here = running_ != nullptr && retired_ == nullptr;
  if (count_ + (running_here ? 1 : 0) == capacity_) {
    // Only the worker's own tasks queue past the bound: move the queued
    // ones, in order, into a ring twice as large; the running task stays.
    auto grown = std::make_unique_for_overwrite<Slot[]>(2 * capacity_);
    for (size_t i = 0; i < count_; ++i) {
      Slot& from = slots_[(head_ + i) % capacity_];
      from.ops->relocate(from.bytes, grown[i].bytes);
      grown[i].ops = from.ops;
    }
    if (running_here) retired_ = std::move(slots_);
    slots_ = std::move(grown);
    capacity_ *= 2;
    head_ = 0;
  }
  return slots_[(head_ + count_) % capacity_];
}

std::shared_ptr<StreamMark> HostStream::Mark() {
  auto mark = std::make_shared<StreamMark>();
  // Completed by the worker once the task is counted done, under mu_, so
  // that a stream whose last mark is done is idle to Query at once.
  Enqueue([this, mark] {
    passed_mark_ = mark;
    return Status::Ok();
  });
  return mark;
}

Status HostStream::Synchronize() {
  PollBriefly([&] { return pending_.load(std::memory_order_acquire) == 0; });
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [&] { return pending_.load(std::memory_order_relaxed) == 0; });
  Status st = std::move(first_error_);
  first_error_ = Status::Ok();
  return st;
}

batonResult_t HostStream::Query() {
  std::lock_guard<std::mutex> lock(mu_);
  if (pending_.load(std::memory_order_relaxed) != 0) return batonInProgress;
  return first_error_.code();
}

void HostStream::WorkerLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (count_ == 0 && !stopping_) {
      // More work tends to follow soon (a loop of calls and synchronizes).
      lock.unlock();
      PollBriefly([&] { return pending_.load(std::memory_order_acquire) != 0 || stopping_; });
      lock.lock();
    }
    work_cv_.wait(lock, [&] { return stopping_ || count_ != 0; });
    if (count_ == 0) return;  // stopping
    Slot* task = &slots_[head_];
    running_ = task;
    head_ = (head_ + 1) % capacity_;
    --count_;
    if (waiting_for_room_ > 0 && count_ == kResumeQueued) room_cv_.notify_all();
    lock.unlock();
    Status st = task->ops->run(task->bytes);
    task->ops->destroy(task->bytes);  // what it captured goes before the stream says idle
    if (!st.ok() && mark_error_.ok()) mark_error_ = st;
    lock.lock();
    running_ = nullptr;
    retired_.reset();
    if (!st.ok() && first_error_.ok()) first_error_ = std::move(st);
    pending_.fetch_sub(1, std::memory_order_release);
    if (passed_mark_) {
      passed_mark_->Complete(std::move(mark_error_));
      mark_error_ = Status::Ok();
      passed_mark_.reset();
    }
    if (count_ == 0) idle_cv_.notify_all();
  }
}

}  // namespace baton
