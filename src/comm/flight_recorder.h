// FlightRecorder: the last calls of one communicator on this rank, each
// with its descriptor, state and times, in a file in /dev/shm (layout:
// base/flight_record.h) that batonrun reads when a job fails, times out or
// is asked (`batonrun --dump PID`, SIGUSR1), even while this rank is
// stopped or hung. It is also where the watchdog looks when a peer asks
// which call this rank is in. Writing a call costs a dozen stores into
// this process's own memory, on every call.
#pragma once

#include <baton.h>

#include <cstdint>
#include <memory>
#include <string>

#include "base/fd.h"
#include "base/flight_record.h"
#include "transport/control.h"

namespace baton {

class FlightRecorder {
 public:
  // `capacity` entries (at least 1) in a file named for this process,
  // `comm_id` and `rank` when `to_file`, else (or when /dev/shm refuses) in memory.
  // Removes the files of processes that died without removing theirs.
  static std::unique_ptr<FlightRecorder> Create(uint32_t capacity, bool to_file, int rank,
                                                int nranks, uint64_t comm_id,
                                                const std::string& host,
                                                const std::string& name = "");
  ~FlightRecorder();
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  // Records a call (its descriptor's three words) as running; returns its
  // entry, which End takes (Next steps from one entry to a later call's).
  uint32_t Begin(uint64_t w0, uint64_t w1, uint64_t w2) {
    // Entry calls_ % capacity_, kept as a cursor: a division per call is a
    // visible part of the small-call latency.
    const uint32_t entry = cursor_;
    FlightEntry& e = entries_[entry];
    const uint32_t lock = e.lock.load(std::memory_order_relaxed);
    e.lock.store(lock + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    e.words[0].store(w0, std::memory_order_relaxed);
    e.words[1].store(w1, std::memory_order_relaxed);
    e.words[2].store(w2, std::memory_order_relaxed);
    e.state.store(static_cast<uint32_t>(FlightState::kRunning), std::memory_order_relaxed);
    e.start_ns.store(CoarseNowNs(), std::memory_order_relaxed);
    e.result.store(0, std::memory_order_relaxed);
    e.lock.store(lock + 2, std::memory_order_release);
    header_->calls.store(++calls_, std::memory_order_release);
    cursor_ = Next(entry, 1);
    return entry;
  }
  // The entry `later` calls after `entry`'s.
  uint32_t Next(uint32_t entry, size_t later) const {
    const uint64_t n = uint64_t{entry} + later;
    return static_cast<uint32_t>(n < capacity_ ? n : n % capacity_);
  }
  // (No end time: a clock read per call is a few percent of the small-call
  // latency, and how long a finished call took is the profiler's job.)
  void End(uint32_t entry, batonResult_t result) {
    FlightEntry& e = entries_[entry];
    e.result.store(result, std::memory_order_relaxed);
    e.state.store(
        static_cast<uint32_t>(result == batonSuccess ? FlightState::kDone : FlightState::kFailed),
        std::memory_order_release);
  }

  // The latest call (seq 0 before the first), for the watchdog's answers.
  CallState Latest() const;
  const std::string& path() const { return path_; }

 private:
  FlightRecorder() = default;
  static int64_t CoarseNowNs();

  std::string path_;  // empty: in memory only
  Fd lock_;           // the file, open with a shared flock while this recorder lives
  void* map_ = nullptr;
  size_t bytes_ = 0;
  FlightHeader* header_ = nullptr;
  FlightEntry* entries_ = nullptr;
  uint32_t capacity_ = 1;
  uint64_t calls_ = 0;
  uint32_t cursor_ = 0;  // calls_ % capacity_
};

}  // namespace baton
