// TraceRecorder: BATON_TRACE_FILE's timeline of one communicator on this
// rank (docs/tracing.md). Every call the communicator runs becomes one
// event: its begin and end on CLOCK_REALTIME (comparable across the ranks
// of a host, and across hosts as far as their clocks agree), the numbered
// descriptor (collective, count, datatype, op, root, algorithm, seq), the
// bytes its schedule sends and receives, the peers it talks to and the
// thread it ran on. Events go into a buffer allocated once, at creation;
// when it is full, later calls are only counted (the file reports them as
// dropped). Write() turns the events into a Chrome trace-event JSON file
// (Perfetto, chrome://tracing) with one process track per rank.
//
// A communicator without BATON_TRACE_FILE holds no recorder, which costs
// one predictable branch per call; with one, two clock reads and a pass
// over the schedule's ops.
#pragma once

#include <baton.h>
#include <pthread.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "algorithms/schedule.h"
#include "base/call_descriptor.h"
#include "base/status.h"

namespace baton {

// Who writes the timeline, and where.
struct TraceRecorderConfig {
  std::string path;       // the rank's file (base/trace_file.h)
  std::string base;       // BATON_TRACE_FILE, absolute
  std::string list;       // BATON_TRACE_LIST: where to note `base` once written ("": nowhere)
  uint32_t capacity = 1;  // events the buffer holds (at least 1)
  int track = 0;          // the process track: the job's rank (BATON_RANK), else comm_rank
  int comm_rank = 0;
  int nranks = 1;
  uint64_t comm_id = 0;
  std::string comm_name;  // batonConfig_t.commName
  std::string host;
};

// The timeline's clock: CLOCK_REALTIME in the file, read as a cycle counter
// (base/cpu.h: the TSC on x86, a third of clock_gettime's cost, which on a
// 1 us call matters, see docs/tracing.md; CNTVCT_EL0 on aarch64) and
// converted from the first point where both were read. Elsewhere ticks are
// CLOCK_REALTIME nanoseconds.
struct TraceClock {
  static int64_t Ticks();
  static int64_t RealtimeNs();
  // Now, on both clocks.
  static TraceClock Now();
  int64_t ticks = 0;
  int64_t realtime_ns = 0;
  // The CLOCK_REALTIME nanoseconds of `ticks`, counted from `from` (identity
  // where ticks are already ns: no cycle counter, base/cpu.h).
  static int64_t ToNs(int64_t ticks, const TraceClock& from, const TraceClock& to);
  // The ticks' period: the architecture's (aarch64's CNTFRQ_EL0), else the
  // rate between `from` and `to` on both clocks (x86's TSC).
  static double NsPerTick(const TraceClock& from, const TraceClock& to);
};

// One call as the timeline holds it.
struct TraceEvent {
  static constexpr int kPeers = 8;  // peers kept per call; more only set more_peers
  int64_t begin = 0;                // in TraceClock ticks
  int64_t end = -1;                 // -1: not ended (still running when written)
  uint64_t words[3] = {};           // the numbered CallDescriptor
  uint64_t sent = 0;                // bytes its schedule sends
  uint64_t received = 0;            // and receives
  int32_t peers[kPeers] = {};
  uint8_t peer_count = 0;
  bool more_peers = false;
  bool is_send = false;  // point-to-point: a send (numbering clears it in words)
  uint16_t group = 1;    // calls run together with it (a group), itself included
  int32_t tid = 0;       // the thread that ran it
  int32_t result = batonSuccess;
};

class TraceRecorder {
 public:
  explicit TraceRecorder(TraceRecorderConfig config);
  TraceRecorder(const TraceRecorder&) = delete;
  TraceRecorder& operator=(const TraceRecorder&) = delete;

  // The calls of `schedule`, numbered as `numbered` (one per call; one
  // internal call when the schedule has none) start now.
  void Begin(const Schedule& schedule, const std::vector<CallDescriptor>& numbered);
  // The calls Begin recorded last ended now with `result`.
  void End(batonResult_t result);

  // Writes every event so far to config().path (through a temporary file,
  // so a reader never sees half of one). Calls that have not ended yet are
  // written up to now and marked unfinished. The first time, notes the base
  // path in config().list for batonrun.
  Status Write();

  const TraceRecorderConfig& config() const { return config_; }
  size_t size() const { return used_; }
  uint64_t dropped() const { return dropped_; }
  const TraceEvent& event(size_t i) const { return events_[i]; }

 private:
  TraceRecorderConfig config_;
  TraceClock created_ = TraceClock::Now();  // with Write's now, the ticks' rate
  std::unique_ptr<TraceEvent[]> events_;    // config_.capacity, allocated once
  size_t used_ = 0;
  size_t open_first_ = 0;  // the events End completes
  size_t open_count_ = 0;
  uint64_t dropped_ = 0;
  bool noted_ = false;
  pthread_t tid_thread_{};  // the thread tid_ belongs to
  int32_t tid_ = 0;
};

// The JSON text of `events` as Chrome trace events on `config.track`,
// with the metadata records naming the track and its threads, one record
// per line: the traceEvents of a rank's file, also what tests compare.
// Ticks become times by the rate between `from` and `now`; an unfinished
// event ends at `now`.
std::string TraceEventsJson(const TraceRecorderConfig& config, const TraceEvent* events,
                            size_t count, const TraceClock& from, const TraceClock& now);

}  // namespace baton
