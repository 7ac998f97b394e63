// Host streams: ordered, asynchronous execution of collectives.
#pragma once

#include <baton.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "base/status.h"

namespace baton {

// A worker thread that runs queued tasks in order. Like a CUDA stream, it
// lets the caller overlap communication with its own computation; errors
// are kept until the next synchronize.
class HostStream {
 public:
  using Task = std::function<Status()>;

  HostStream();
  ~HostStream();  // waits for queued work
  HostStream(const HostStream&) = delete;
  HostStream& operator=(const HostStream&) = delete;

  void Enqueue(Task task);
  // Waits until the queue is empty; returns (and clears) the first error.
  Status Synchronize();
  // batonInProgress while busy, else the first error or batonSuccess.
  batonResult_t Query();

 private:
  void WorkerLoop();

  std::mutex mu_;
  std::condition_variable work_cv_, idle_cv_;
  std::deque<Task> queue_;
  bool busy_ = false;
  bool stopping_ = false;
  Status first_error_;
  std::thread worker_;
};

}  // namespace baton

// The opaque handle given to users.
struct batonStream {
  baton::HostStream impl;
};
