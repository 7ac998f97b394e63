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

HostStream::HostStream() : worker_([this] { WorkerLoop(); }) {}

HostStream::~HostStream() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    idle_cv_.wait(lock, [&] { return pending_.load(std::memory_order_relaxed) == 0; });
    stopping_ = true;
  }
  work_cv_.notify_all();
  worker_.join();
}

void HostStream::WaitForRoom(std::unique_lock<std::mutex>& lock) {
  if (queue_.size() < kMaxQueued || std::this_thread::get_id() == worker_.get_id()) return;
  // No deadline of its own: the tasks ahead are calls bounded by their
  // communicators' timeouts, as Synchronize's wait.
  ++waiting_for_room_;
  room_cv_.wait(lock, [&] { return queue_.size() <= kResumeQueued; });
  --waiting_for_room_;
}

void HostStream::Enqueue(Task task) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    WaitForRoom(lock);
    queue_.push_back({std::move(task), nullptr});
    pending_.fetch_add(1, std::memory_order_relaxed);
  }
  work_cv_.notify_one();
}

std::shared_ptr<StreamMark> HostStream::Mark() {
  auto mark = std::make_shared<StreamMark>();
  {
    std::unique_lock<std::mutex> lock(mu_);
    WaitForRoom(lock);
    queue_.push_back({nullptr, mark});
    pending_.fetch_add(1, std::memory_order_relaxed);
  }
  work_cv_.notify_one();
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
    if (queue_.empty() && !stopping_) {
      // More work tends to follow soon (a loop of calls and synchronizes).
      lock.unlock();
      PollBriefly([&] { return pending_.load(std::memory_order_acquire) != 0 || stopping_; });
      lock.lock();
    }
    work_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping
    Item item = std::move(queue_.front());
    queue_.pop_front();
    if (waiting_for_room_ > 0 && queue_.size() == kResumeQueued) room_cv_.notify_all();
    Status st;
    if (item.task) {
      lock.unlock();
      st = item.task();
      item.task = nullptr;  // what it captured goes before the stream says idle
      lock.lock();
    } else {
      item.mark->Complete(std::move(mark_error_));
      mark_error_ = Status::Ok();
    }
    if (!st.ok()) {
      if (mark_error_.ok()) mark_error_ = st;
      if (first_error_.ok()) first_error_ = std::move(st);
    }
    pending_.fetch_sub(1, std::memory_order_release);
    if (queue_.empty()) idle_cv_.notify_all();
  }
}

}  // namespace baton
