// Host streams: ordered, asynchronous execution of collectives.
#pragma once

#include <baton.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>

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

namespace stream_internal {

// How a stream runs, moves and ends a task kept in a slot's bytes.
struct TaskOps {
  Status (*run)(void* task);
  void (*relocate)(void* from, void* to);  // move-constructs at `to`, ends `from`
  void (*destroy)(void* task);
};

template <typename F>
inline constexpr TaskOps kTaskOpsOf{[](void* task) -> Status { return (*static_cast<F*>(task))(); },
                                    [](void* from, void* to) {
                                      F* f = static_cast<F*>(from);
                                      std::construct_at(static_cast<F*>(to), std::move(*f));
                                      std::destroy_at(f);
                                    },
                                    [](void* task) { std::destroy_at(static_cast<F*>(task)); }};

// A task too large for a slot, kept on the heap.
template <typename F>
struct BoxedTask {
  std::unique_ptr<F> f;
  Status operator()() { return (*f)(); }
};

}  // namespace stream_internal

// A worker thread that runs queued tasks in order. Like a CUDA stream, it
// lets the caller overlap communication with its own computation; errors
// are kept until the next synchronize. Like CUDA's launch queue, it holds a
// bounded number of tasks: a caller that runs ahead by kMaxQueued waits
// until the worker is down to kResumeQueued, so a loop queueing thousands of
// calls reuses the same memory instead of growing the heap through fresh
// (page-faulting) pages on every burst. Each task lives in a slot of a
// ring, in place: a queued call's closure (a few hundred bytes) costs no
// allocation, where std::function allocates for anything past 16 bytes and
// the thread that frees it is not the one that allocated it.
class HostStream {
 public:
  static constexpr size_t kMaxQueued = 1024;
  static constexpr size_t kResumeQueued = 512;
  // A task (its closure) of at most this many bytes stays in its slot;
  // larger ones go to the heap. A queued collective's is 328 (x86-64).
  static constexpr size_t kTaskBytes = 368;

  HostStream();
  ~HostStream();  // waits for queued work
  HostStream(const HostStream&) = delete;
  HostStream& operator=(const HostStream&) = delete;

  // Queues `task`, a callable returning Status, after the tasks queued so
  // far. Waits while kMaxQueued are queued, except on the worker itself,
  // whose own tasks may queue more (the ring then grows).
  template <typename F>
  void Enqueue(F&& task) {
    using T = std::decay_t<F>;
    if constexpr (sizeof(T) <= kTaskBytes && alignof(T) <= alignof(std::max_align_t)) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        Slot& slot = ClaimSlot(lock);
        std::construct_at(reinterpret_cast<T*>(slot.bytes), std::forward<F>(task));
        slot.ops = &stream_internal::kTaskOpsOf<T>;
        ++count_;
        pending_.fetch_add(1, std::memory_order_relaxed);
      }
      work_cv_.notify_one();
    } else {
      Enqueue(stream_internal::BoxedTask<T>{std::make_unique<T>(std::forward<F>(task))});
    }
  }
  // Queues a mark after the tasks queued so far and returns it.
  std::shared_ptr<StreamMark> Mark();
  // Waits until the queue is empty; returns (and clears) the first error.
  Status Synchronize();
  // batonInProgress while busy, else the first error or batonSuccess.
  batonResult_t Query();

 private:
  // Raw room for one task: nothing in it is read until a task is made
  // there, so the ring's pages are touched only as far as it fills.
  struct Slot {
    alignas(std::max_align_t) std::byte bytes[kTaskBytes];
    const stream_internal::TaskOps* ops;
  };

  void WorkerLoop();
  // Under mu_: the free slot after the queued ones, once there is room
  // (waiting while the queue is full, except on the worker itself: then
  // the ring grows).
  Slot& ClaimSlot(std::unique_lock<std::mutex>& lock);

  std::mutex mu_;
  std::condition_variable work_cv_, idle_cv_, room_cv_;
  // The ring: count_ queued tasks from head_, under mu_, and the running
  // task's slot before them (it runs in place: moving a queued call out
  // first cost 5% of a small one). kMaxQueued + 1 slots, so that a full
  // queue and the running task fit; only the worker's own tasks grow it,
  // and then the running slot stays where it is, in retired_, until its
  // task ends.
  std::unique_ptr<Slot[]> slots_;
  size_t capacity_ = 0, head_ = 0, count_ = 0;
  Slot* running_ = nullptr;
  std::unique_ptr<Slot[]> retired_;
  // Tasks queued and not finished (the ring's and the running one; 0:
  // idle), atomic for the polls before Synchronize and the idle worker
  // sleep: a short call handed over and back through two sleeps took 9-10
  // us, most of it wake-ups. Changed under mu_.
  std::atomic<uint64_t> pending_{0};
  int waiting_for_room_ = 0;
  std::atomic<bool> stopping_{false};  // atomic: the idle worker's polls read it unlocked
  Status first_error_;                 // until Synchronize; under mu_
  Status mark_error_;                  // since the last mark passed; the worker's
  std::shared_ptr<StreamMark> passed_mark_;  // the worker's: the mark its task just passed
  std::thread worker_;
};

}  // namespace baton

// The opaque handle given to users.
struct batonStream {
  baton::HostStream impl;
};
