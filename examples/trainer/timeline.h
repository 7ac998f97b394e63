// baton-train's own events on the job's timeline (--trace FILE, docs/tracing.md): steps,
// forward, backward, each bucket's launch, the wait for the allreduces and the optimizer, as
// Chrome trace events on this rank's track (pid = rank) and a thread of their own ("trainer").
// Baton records its calls on the same track when BATON_TRACE_FILE is set (main.cc sets it to
// FILE), in FILE.rankN.json; this file goes beside it as FILE.rankN.trainer.json (the naming
// docs/tracing.md gives for other writers), and batonrun merges them all into FILE. Both read
// CLOCK_REALTIME, so the events line up.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trainer {

class Timeline {
 public:
  // Off (nothing recorded, nothing written) when `base` is empty.
  Timeline(const std::string& base, int rank);
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  bool on() const { return !path_.empty(); }
  // The file rank `rank` writes for --trace `base` (main.cc checks it can before training).
  static std::string PathFor(const std::string& base, int rank);
  // The timeline's clock: CLOCK_REALTIME in nanoseconds.
  static int64_t NowNs();

  // An event from begin_ns to now; `args` is the inside of a JSON object ("" for none).
  void Span(const char* name, int64_t begin_ns, const std::string& args = "");
  // A point in time.
  void Instant(const char* name, const std::string& args = "");
  // Writes the file (once, at the end); throws TrainError when it cannot.
  void Write() const;

  // Span over a scope: Scope s(timeline, "forward").
  class Scope {
   public:
    Scope(Timeline* timeline, const char* name, std::string args = "")
        : timeline_(timeline != nullptr && timeline->on() ? timeline : nullptr),
          name_(name),
          args_(std::move(args)),
          begin_(timeline_ != nullptr ? NowNs() : 0) {}
    ~Scope() {
      if (timeline_ != nullptr) timeline_->Span(name_, begin_, args_);
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Timeline* timeline_;
    const char* name_;
    std::string args_;
    int64_t begin_;
  };

 private:
  struct Event {
    const char* name;
    int64_t begin_ns;
    int64_t end_ns;  // -1: an instant
    std::string args;
  };
  // Events kept; later ones are counted in dropped_ (a long run's file stays bounded).
  static constexpr size_t kMaxEvents = 1 << 20;
  std::string path_;
  int rank_ = 0;
  std::vector<Event> events_;
  uint64_t dropped_ = 0;
};

}  // namespace trainer
