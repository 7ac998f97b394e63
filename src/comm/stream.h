// Host streams: ordered, asynchronous execution of collectives.
#pragma once

#include <baton.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "base/status.h"

namespace baton {

// One point captured in a host stream (batonEventRecord): done once the
// stream's worker passes it, with the first error among the tasks queued
// between the stream's previous mark and this one.
class StreamMark {
 public:
  // A mark that is already done (an event never recorded, or one recorded
  // on the NULL stream, whose calls ran before they returned).
  static std::shared_ptr<StreamMark> Done();

  // batonInProgress while pending, else the captured work's result.
  batonResult_t Query();
  Status Wait();
  void Complete(Status status);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<bool> done_{false};  // atomic: Wait polls it before it sleeps
  Status status_;
};

// A worker thread that runs queued tasks in order. Like a CUDA stream, it
// lets the caller overlap communication with its own computation; errors
// are kept until the next synchronize. Like CUDA's launch queue, it holds a
// bounded number of tasks: a caller that runs ahead by kMaxQueued waits
// until the worker is down to kResumeQueued, so a loop queueing thousands of
// calls reuses the same memory instead of growing the heap through fresh
// (page-faulting) pages on every burst.
class HostStream {
 public:
  using Task = std::function<Status()>;
  static constexpr size_t kMaxQueued = 1024;
  static constexpr size_t kResumeQueued = 512;

  HostStream();
  ~HostStream();  // waits for queued work
  HostStream(const HostStream&) = delete;
  HostStream& operator=(const HostStream&) = delete;

  void Enqueue(Task task);
  // Queues a mark after the tasks queued so far and returns it.
  std::shared_ptr<StreamMark> Mark();
  // Waits until the queue is empty; returns (and clears) the first error.
  Status Synchronize();
  // batonInProgress while busy, else the first error or batonSuccess.
  batonResult_t Query();

 private:
  struct Item {
    Task task;                         // or, when null,
    std::shared_ptr<StreamMark> mark;  // a mark to complete
  };
  void WorkerLoop();
  // Under mu_: waits while the queue is full (not on the worker itself,
  // whose own tasks may queue more).
  void WaitForRoom(std::unique_lock<std::mutex>& lock);

  std::mutex mu_;
  std::condition_variable work_cv_, idle_cv_, room_cv_;
  std::deque<Item> queue_;
  // Items queued and not finished (queue_ and the running one; 0: idle),
  // atomic for the polls before Synchronize and the idle worker sleep: a
  // short call handed over and back through two sleeps took 9-10 us, most
  // of it wake-ups. Changed under mu_.
  std::atomic<uint64_t> pending_{0};
  int waiting_for_room_ = 0;
  std::atomic<bool> stopping_{false};  // atomic: the idle worker's polls read it unlocked
  Status first_error_;                 // until Synchronize
  Status mark_error_;                  // since the last mark passed
  std::thread worker_;
};

}  // namespace baton

// The opaque handle given to users.
struct batonStream {
  baton::HostStream impl;
};
