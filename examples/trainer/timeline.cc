#include "timeline.h"

#include <time.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "util.h"

namespace trainer {
namespace {

// The trainer's thread on the track: no real thread has id 0.
constexpr int kTrainerTid = 0;

std::string Micros(int64_t ns) {
  char text[32];
  std::snprintf(text, sizeof(text), "%" PRId64 ".%03" PRId64, ns / 1000, ns % 1000);
  return text;
}

}  // namespace

Timeline::Timeline(const std::string& base, int rank) : rank_(rank) {
  if (base.empty()) return;
  path_ = PathFor(base, rank);
  events_.reserve(4096);
}

std::string Timeline::PathFor(const std::string& base, int rank) {
  const std::string ext = ".json";
  std::string stem = base;
  if (stem.size() > ext.size() && stem.compare(stem.size() - ext.size(), ext.size(), ext) == 0)
    stem.resize(stem.size() - ext.size());
  return stem + ".rank" + std::to_string(rank) + ".trainer.json";
}

int64_t Timeline::NowNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

void Timeline::Span(const char* name, int64_t begin_ns, const std::string& args) {
  if (!on()) return;
  if (events_.size() >= kMaxEvents) {
    ++dropped_;
    return;
  }
  events_.push_back({name, begin_ns, NowNs(), args});
}

void Timeline::Instant(const char* name, const std::string& args) {
  if (!on()) return;
  if (events_.size() >= kMaxEvents) {
    ++dropped_;
    return;
  }
  events_.push_back({name, NowNs(), -1, args});
}

void Timeline::Write() const {
  if (!on()) return;
  const std::string pid = std::to_string(rank_);
  const std::string tid = std::to_string(kTrainerTid);
  std::string text = "{\"traceEvents\":[\n";
  text += "{\"ph\":\"M\",\"pid\":" + pid + ",\"tid\":" + tid +
          ",\"name\":\"thread_name\",\"args\":{\"name\":\"trainer\"}},\n";
  text += "{\"ph\":\"M\",\"pid\":" + pid + ",\"tid\":" + tid +
          ",\"name\":\"thread_sort_index\",\"args\":{\"sort_index\":-1}}";
  for (const Event& e : events_) {
    text += ",\n{\"cat\":\"trainer\",\"name\":\"" + std::string(e.name) + "\",\"pid\":" + pid +
            ",\"tid\":" + tid + ",\"ts\":" + Micros(e.begin_ns);
    text += e.end_ns >= 0 ? ",\"ph\":\"X\",\"dur\":" + Micros(e.end_ns - e.begin_ns)
                          : std::string(",\"ph\":\"i\",\"s\":\"t\"");
    text += ",\"args\":{" + e.args + "}}";
  }
  text +=
      "\n],\n\"displayTimeUnit\":\"ns\",\n\"otherData\":{\"producer\":\"baton-train\","
      "\"clock\":\"CLOCK_REALTIME\",\"rank\":" +
      pid + ",\"dropped\":" + std::to_string(dropped_) + "}}\n";
  std::FILE* f = std::fopen(path_.c_str(), "w");
  if (f == nullptr) throw TrainError("--trace: cannot open " + path_ + ": " + std::strerror(errno));
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !written)
    throw TrainError("--trace: cannot write " + path_ + ": " + std::strerror(errno));
}

}  // namespace trainer
