#include "work.h"

#include <baton.h>

namespace baton_torch {

struct WorkQueue {
  struct Item {
    c10::intrusive_ptr<BatonWork> work;
    std::function<void()> job;
    bool p2p = false;
    uint64_t seq = 0;
    std::chrono::steady_clock::time_point queued;
  };

  // Lets every point-to-point item queued so far run.
  void Flush() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      flush_before = next_seq;
    }
    cv.notify_all();
  }

  std::mutex mutex;
  std::condition_variable cv;
  std::deque<Item> items;
  bool stop = false;
  uint64_t next_seq = 0;
  uint64_t flush_before = 0;  // point-to-point items numbered below this may run
  uint64_t done_before = 0;   // items numbered below this have run
};

std::exception_ptr BackendError(const std::string& message) {
  return std::make_exception_ptr(
      c10::DistBackendError(c10::SourceLocation{__func__, __FILE__, __LINE__}, message));
}

namespace {

std::exception_ptr Capture(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return BackendError(e.what());
  } catch (...) {
    return BackendError("baton backend: unknown error");
  }
  return nullptr;
}

}  // namespace

// ---- BatonWork ----

BatonWork::BatonWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs,
                     std::vector<c10::Device> devices)
    : c10d::Work(rank, type),
      outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(
          c10::ListType::create(c10::TensorType::get()), std::move(devices))) {}

bool BatonWork::wait(std::chrono::milliseconds timeout) {
  if (auto queue = queue_.lock()) queue->Flush();
  return c10d::Work::wait(timeout);
}

void BatonWork::Complete(std::exception_ptr error) {
  // The future first: once wait() returns, DDP reads the future's value.
  if (error) {
    future_->setError(error);
  } else {
    future_->markCompleted(c10::IValue(outputs_));
  }
  finish(error);
}

// ---- Worker ----

Worker::Worker(std::function<void()> end_group)
    : queue_(std::make_shared<WorkQueue>()),
      end_group_(std::move(end_group)),
      thread_([this] { Run(); }) {}

Worker::~Worker() {
  Stop();
}

void Worker::Stop() {
  {
    std::lock_guard<std::mutex> lock(queue_->mutex);
    if (queue_->stop && !thread_.joinable()) return;
    queue_->stop = true;
  }
  queue_->cv.notify_all();
  // Jobs hold no reference to their backend, so this never runs on the worker itself.
  if (thread_.joinable()) thread_.join();
}

void Worker::Drain() {
  queue_->Flush();
  std::unique_lock<std::mutex> lock(queue_->mutex);
  const uint64_t until = queue_->next_seq;
  queue_->cv.wait(lock, [&] { return queue_->stop || queue_->done_before >= until; });
}

void Worker::Enqueue(c10::intrusive_ptr<BatonWork> work, std::function<void()> job, bool p2p) {
  if (p2p) work->queue_ = queue_;
  {
    std::lock_guard<std::mutex> lock(queue_->mutex);
    if (!queue_->stop) {
      queue_->items.push_back({std::move(work), std::move(job), p2p, queue_->next_seq++,
                               std::chrono::steady_clock::now()});
      queue_->cv.notify_all();
      return;
    }
  }
  work->Complete(BackendError("baton backend: the process group is shut down"));
}

void Worker::Run() {
  WorkQueue& q = *queue_;
  std::unique_lock<std::mutex> lock(q.mutex);
  for (;;) {
    // No deadline: an idle backend waits for work; each Baton call has its own.
    q.cv.wait(lock, [&q] { return q.stop || !q.items.empty(); });
    if (q.items.empty()) return;
    size_t n = 1;
    if (q.items.front().p2p) {
      while (n < q.items.size() && q.items[n].p2p) ++n;
      auto linger_end = q.items.front().queued + kP2pLinger;
      bool ready = q.stop || n < q.items.size() || q.flush_before > q.items.front().seq ||
                   std::chrono::steady_clock::now() >= linger_end;
      if (!ready) {
        q.cv.wait_until(lock, linger_end);
        continue;
      }
    }
    std::vector<WorkQueue::Item> batch(std::make_move_iterator(q.items.begin()),
                                       std::make_move_iterator(q.items.begin() + n));
    q.items.erase(q.items.begin(), q.items.begin() + n);
    lock.unlock();

    std::vector<std::exception_ptr> errors(batch.size());
    const bool group = batch.front().p2p;
    if (group) batonGroupStart();
    for (size_t i = 0; i < batch.size(); ++i) errors[i] = Capture(batch[i].job);
    if (group) {
      std::exception_ptr error = Capture(end_group_);
      for (auto& e : errors) {
        if (!e) e = error;
      }
    }
    for (size_t i = 0; i < batch.size(); ++i) batch[i].work->Complete(errors[i]);
    const uint64_t done = batch.back().seq + 1;
    batch.clear();  // frees the tensors before the lock is taken again
    lock.lock();
    q.done_before = done;
    q.cv.notify_all();  // Drain
  }
}

}  // namespace baton_torch
