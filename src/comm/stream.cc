#include "comm/stream.h"

namespace baton {

HostStream::HostStream() : worker_([this] { WorkerLoop(); }) {}

HostStream::~HostStream() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    idle_cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
    stopping_ = true;
  }
  work_cv_.notify_all();
  worker_.join();
}

void HostStream::Enqueue(Task task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(task));
  }
  work_cv_.notify_one();
}

Status HostStream::Synchronize() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
  Status st = std::move(first_error_);
  first_error_ = Status::Ok();
  return st;
}

batonResult_t HostStream::Query() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!queue_.empty() || busy_) return batonInProgress;
  return first_error_.code();
}

void HostStream::WorkerLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping
    Task task = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    Status st = task();
    lock.lock();
    busy_ = false;
    if (!st.ok() && first_error_.ok()) first_error_ = std::move(st);
    if (queue_.empty()) idle_cv_.notify_all();
  }
}

}  // namespace baton
