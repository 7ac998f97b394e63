#include "comm/trace_recorder.h"

#include <fcntl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>

#include "algorithms/call_description.h"
#include "base/cpu.h"
#include "base/datatype.h"
#include "base/fd.h"
#include "base/files.h"

namespace baton {
namespace {

int32_t ThisThreadId() {
  thread_local const auto tid = static_cast<int32_t>(syscall(SYS_gettid));
  return tid;
}

void AddPeer(TraceEvent* e, int32_t peer) {
  for (int i = 0; i < e->peer_count; ++i)
    if (e->peers[i] == peer) return;
  if (e->peer_count < TraceEvent::kPeers) {
    e->peers[e->peer_count++] = peer;
  } else {
    e->more_peers = true;
  }
}

std::string JsonEscaped(const std::string& text) {
  std::string out;
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20) {
      char hex[8];
      snprintf(hex, sizeof(hex), "\\u%04x", c);
      out += hex;
    } else {
      out += ch;
    }
  }
  return out;
}

// Nanoseconds as the microseconds trace events count in, exactly.
std::string Micros(int64_t ns) {
  char text[32];
  snprintf(text, sizeof(text), "%" PRId64 ".%03" PRId64, ns / 1000, ns % 1000);
  return text;
}

// The name of a call's event and its arguments (without the braces).
void DescribeEvent(const TraceEvent& e, std::string* name, std::string* args) {
  CallDescriptor d;
  StoreCallWords(&d, e.words[0], e.words[1], e.words[2]);
  char text[160];
  const auto datatype = static_cast<batonDataType_t>(d.datatype);
  snprintf(text, sizeof(text), "\"seq\":%u", d.seq);
  *args = text;
  if (IsCollectiveCall(d.kind)) {
    const auto c = static_cast<Collective>(d.kind - kCallKindCollectiveBase);
    *name = CollectiveName(c);
    snprintf(text, sizeof(text),
             ",\"count\":%" PRIu64 ",\"datatype\":\"%s\",\"bytes\":%" PRIu64
             ",\"algorithm\":\"%s\"",
             d.count, DatatypeName(datatype), d.count * DatatypeSize(datatype),
             AlgorithmName(static_cast<Algorithm>(d.algorithm)));
    *args += text;
    if (Reduces(c)) {
      *args += ",\"op\":\"";
      *args += d.op == kCallOpPreMulSum ? "premulsum" : RedOpName(static_cast<batonRedOp_t>(d.op));
      *args += "\"";
    }
    if (HasRoot(c)) *args += ",\"root\":" + std::to_string(d.root);
  } else if (d.kind == kCallKindPointToPoint) {
    *name = e.is_send ? "send" : "recv";
    snprintf(text, sizeof(text), ",\"count\":%" PRIu64 ",\"datatype\":\"%s\",\"bytes\":%" PRIu64,
             d.count, DatatypeName(datatype), d.count * DatatypeSize(datatype));
    *args += text;
  } else {
    *name = d.kind == kCallKindBarrier ? "barrier" : "internal";
  }
  snprintf(text, sizeof(text), ",\"sent\":%" PRIu64 ",\"received\":%" PRIu64 ",\"peers\":[", e.sent,
           e.received);
  *args += text;
  for (int i = 0; i < e.peer_count; ++i) {
    if (i > 0) *args += ',';
    *args += std::to_string(e.peers[i]);
  }
  *args += "]";
  if (e.more_peers) *args += ",\"more_peers\":true";
  if (e.group > 1) *args += ",\"group\":" + std::to_string(e.group);
  if (e.result != batonSuccess)
    *args += std::string(",\"result\":\"") +
             batonGetErrorString(static_cast<batonResult_t>(e.result)) + "\"";
  if (e.end < 0) *args += ",\"unfinished\":true";
}

}  // namespace

int64_t TraceClock::RealtimeNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

// A register read (TSC, CNTVCT_EL0) rather than a clock_gettime per call:
// the recorder's whole cost is a few stores (docs/tracing.md).
int64_t TraceClock::Ticks() {
  return ReadCycleCounter();
}

TraceClock TraceClock::Now() {
  TraceClock now;
  now.ticks = Ticks();
  now.realtime_ns = RealtimeNs();
  return now;
}

double TraceClock::NsPerTick(const TraceClock& from, const TraceClock& to) {
  if (const uint64_t hz = CycleCounterHz(); hz != 0) return 1e9 / static_cast<double>(hz);
  // The TSC's rate is not architectural: measured against CLOCK_REALTIME
  // over the recorder's life (from its creation to the file's writing).
  const int64_t span = to.ticks - from.ticks;
  return span > 0
             ? static_cast<double>(to.realtime_ns - from.realtime_ns) / static_cast<double>(span)
             : 0.0;
}

int64_t TraceClock::ToNs(int64_t ticks, const TraceClock& from, const TraceClock& to) {
  if (!kHaveCycleCounter) return ticks;  // already CLOCK_REALTIME ns
  return from.realtime_ns +
         std::llround(static_cast<double>(ticks - from.ticks) * NsPerTick(from, to));
}

TraceRecorder::TraceRecorder(TraceRecorderConfig config) : config_(std::move(config)) {
  config_.capacity = std::max<uint32_t>(config_.capacity, 1);
  // Initialized, so every page is touched now: a page fault on a call
  // costs more than the rest of its recording (docs/tracing.md).
  events_ = std::make_unique<TraceEvent[]>(config_.capacity);
}

void TraceRecorder::Begin(const Schedule& schedule, const std::vector<CallDescriptor>& numbered) {
  const int64_t now = TraceClock::Ticks();
  const size_t n = numbered.size();
  open_count_ = 0;
  if (n > config_.capacity - used_) {
    dropped_ += n;
    return;
  }
  // The thread id by pthread_self (a register read) against the last
  // caller's: a communicator's calls mostly come from one thread, and a
  // thread_local in a shared library costs a __tls_get_addr call.
  if (const pthread_t self = pthread_self(); tid_ == 0 || !pthread_equal(self, tid_thread_)) {
    tid_thread_ = self;
    tid_ = ThisThreadId();
  }
  for (size_t i = 0; i < n; ++i) {
    TraceEvent& e = events_[used_ + i];
    e.begin = now;
    e.end = -1;
    memcpy(e.words, &numbered[i], sizeof(e.words));
    e.sent = e.received = 0;
    e.peer_count = 0;
    e.more_peers = false;
    e.is_send = i < schedule.calls.size() && schedule.calls[i].is_send != 0;
    e.group = static_cast<uint16_t>(std::min<size_t>(n, UINT16_MAX));
    e.tid = tid_;
    e.result = batonSuccess;
  }
  for (const Op& op : schedule.ops) {
    if (op.kind == Op::Kind::kCopy) continue;
    TraceEvent& e = events_[used_ + std::min<size_t>(op.call, n - 1)];
    (op.kind == Op::Kind::kSend ? e.sent : e.received) += op.bytes;
    AddPeer(&e, op.peer);
  }
  open_first_ = used_;
  open_count_ = n;
  used_ += n;
}

void TraceRecorder::End(batonResult_t result) {
  if (open_count_ == 0) return;
  const int64_t now = TraceClock::Ticks();
  for (size_t i = open_first_; i < open_first_ + open_count_; ++i) {
    events_[i].end = now;
    events_[i].result = result;
  }
  open_count_ = 0;
}

std::string TraceEventsJson(const TraceRecorderConfig& config, const TraceEvent* events,
                            size_t count, const TraceClock& from, const TraceClock& now) {
  const std::string pid = std::to_string(config.track);
  std::string out = "{\"ph\":\"M\",\"pid\":" + pid +
                    ",\"name\":\"process_name\",\"args\":{\"name\":\"rank " + pid + " (" +
                    JsonEscaped(config.host) + ")\"}},\n";
  out += "{\"ph\":\"M\",\"pid\":" + pid +
         ",\"name\":\"process_sort_index\",\"args\":{\"sort_index\":" + pid + "}}";
  std::set<int32_t> tids;
  for (size_t i = 0; i < count; ++i) tids.insert(events[i].tid);
  for (const int32_t tid : tids) {
    const std::string thread = tid == getpid() ? "main thread" : "thread " + std::to_string(tid);
    out += ",\n{\"ph\":\"M\",\"pid\":" + pid + ",\"tid\":" + std::to_string(tid) +
           ",\"name\":\"thread_name\",\"args\":{\"name\":\"Baton calls (" + thread + ")\"}}";
  }
  char comm_id[24];
  snprintf(comm_id, sizeof(comm_id), "%016" PRIx64, config.comm_id);
  const std::string comm = ",\"comm\":\"" + JsonEscaped(config.comm_name) + "\",\"comm_id\":\"" +
                           comm_id + "\",\"comm_rank\":" + std::to_string(config.comm_rank) + "}}";
  std::string name, args;
  for (size_t i = 0; i < count; ++i) {
    const TraceEvent& e = events[i];
    DescribeEvent(e, &name, &args);
    const int64_t begin = TraceClock::ToNs(e.begin, from, now);
    const int64_t end =
        e.end >= 0 ? TraceClock::ToNs(e.end, from, now) : std::max(now.realtime_ns, begin);
    out += ",\n{\"ph\":\"X\",\"cat\":\"baton\",\"name\":\"" + name + "\",\"pid\":" + pid +
           ",\"tid\":" + std::to_string(e.tid) + ",\"ts\":" + Micros(begin) +
           ",\"dur\":" + Micros(end - begin) + ",\"args\":{" + args + comm;
  }
  return out;
}

Status TraceRecorder::Write() {
  const std::string events =
      TraceEventsJson(config_, events_.get(), used_, created_, TraceClock::Now());
  char comm_id[24];
  snprintf(comm_id, sizeof(comm_id), "%016" PRIx64, config_.comm_id);
  char other[512];
  snprintf(other, sizeof(other),
           "\"otherData\":{\"producer\":\"Baton %d.%d.%d\",\"clock\":\"CLOCK_REALTIME\","
           "\"rank\":%d,\"comm_rank\":%d,\"nranks\":%d,\"comm_id\":\"%s\",\"events\":%zu,"
           "\"capacity\":%u,\"dropped\":%" PRIu64 "}",
           BATON_MAJOR, BATON_MINOR, BATON_PATCH, config_.track, config_.comm_rank, config_.nranks,
           comm_id, used_, config_.capacity, dropped_);
  std::string text = "{\"traceEvents\":[\n" + events;
  if (dropped_ > 0) {
    // Shown on the rank's track, and kept by a merge (otherData is not).
    const std::string pid = std::to_string(config_.track);
    text += ",\n{\"ph\":\"M\",\"pid\":" + pid +
            ",\"name\":\"process_labels\",\"args\":{\"labels\":\"" + std::to_string(dropped_) +
            " Baton calls not traced (BATON_TRACE_EVENTS=" + std::to_string(config_.capacity) +
            " full)\"}}";
  }
  text += "\n],\n\"displayTimeUnit\":\"ns\",\n" + std::string(other) + "}\n";

  BATON_RETURN_IF_ERROR(WriteFileAtomically(config_.path, text));
  if (!noted_ && !config_.list.empty()) {
    // One line appended in one write (O_APPEND: the ranks' lines do not
    // mix). Never created here: without batonrun's file nobody merges.
    noted_ = true;
    const Fd list(open(config_.list.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC));
    const std::string line = config_.base + "\n";
    if (!list.valid() ||
        write(list.get(), line.data(), line.size()) != static_cast<ssize_t>(line.size()))
      return ErrnoError("noting the timeline in " + config_.list, errno);
  }
  return Status::Ok();
}

}  // namespace baton
