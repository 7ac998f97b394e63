#include "tools/batonrun/flight_table.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include "algorithms/call_description.h"
#include "base/flight_record.h"

namespace batonrun {
namespace {

using baton::FlightCall;
using baton::FlightSnapshot;
using baton::FlightState;

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME_COARSE, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

std::string Seconds(int64_t ns) {
  char text[32];
  snprintf(text, sizeof(text), "%.3g s", static_cast<double>(std::max<int64_t>(ns, 0)) / 1e9);
  return text;
}

std::string DescribeEntry(const FlightCall& c, int64_t now) {
  std::string out = baton::DescribeCall(c.call);
  switch (c.state) {
    case FlightState::kRunning:
      return out + " running for " + Seconds(now - c.start_ns);
    case FlightState::kDone:
      return out + " done";
    case FlightState::kFailed:
      return out + " failed (" + batonGetErrorString(static_cast<batonResult_t>(c.result)) + ")";
    case FlightState::kEmpty:
      break;
  }
  return out;
}

// The latest call of a rank that is numbered for the whole communicator.
const FlightCall* LatestCollective(const FlightSnapshot& s) {
  for (auto it = s.last.rbegin(); it != s.last.rend(); ++it)
    if (it->call.kind != baton::kCallKindPointToPoint) return &*it;
  return nullptr;
}

std::string RankList(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

// Where the ranks of one communicator part ways.
std::string Divergence(const std::vector<FlightSnapshot>& ranks, int64_t now) {
  uint32_t newest = 0;
  for (const FlightSnapshot& s : ranks)
    if (const FlightCall* c = LatestCollective(s)) newest = std::max(newest, c->call.seq);
  if (newest == 0) return "";
  // Ranks by what they did under the newest number, and ranks behind it.
  std::map<std::string, std::vector<int>> at_newest;
  std::vector<std::string> behind;
  for (const FlightSnapshot& s : ranks) {
    const FlightCall* c = LatestCollective(s);
    if (c != nullptr && c->call.seq == newest) {
      baton::CallDescriptor call = c->call;
      at_newest[baton::DescribeCall(call)].push_back(s.rank);
    } else {
      behind.push_back("rank " + std::to_string(s.rank) + " (pid " + std::to_string(s.pid) +
                       ") never entered call #" + std::to_string(newest) +
                       (c ? "; its last call: " + DescribeEntry(*c, now) : "; it made no call"));
    }
  }
  std::string out;
  if (at_newest.size() > 1) {
    out += "  mismatch at call #" + std::to_string(newest) + ":";
    for (const auto& [call, who] : at_newest) out += " " + RankList(who) + " called " + call + ";";
    out += "\n";
  }
  for (const std::string& b : behind) out += "  " + b + "\n";
  if (out.empty()) {
    bool running = false;
    for (const FlightSnapshot& s : ranks)
      if (const FlightCall* c = LatestCollective(s)) running |= c->state == FlightState::kRunning;
    if (running)
      out = "  every rank here is in " + at_newest.begin()->first +
            " (a rank elsewhere, or the "
            "network)\n";
  }
  return out;
}

}  // namespace

std::string FlightTable(const std::vector<pid_t>& pids, size_t per_rank) {
  // Communicator id -> its ranks here.
  std::map<uint64_t, std::vector<FlightSnapshot>> comms;
  for (pid_t pid : pids) {
    for (const std::string& path : baton::FlightFilesOf(pid)) {
      FlightSnapshot s;
      if (baton::ReadFlightFile(path, &s)) comms[s.comm_id].push_back(std::move(s));
    }
  }
  if (comms.empty()) return "";
  const int64_t now = NowNs();
  std::ostringstream out;
  out << "batonrun: the last calls of each rank (flight recorders, oldest first):\n";
  for (auto& [id, ranks] : comms) {
    std::sort(ranks.begin(), ranks.end(),
              [](const FlightSnapshot& a, const FlightSnapshot& b) { return a.rank < b.rank; });
    char head[192];
    const std::string& name = ranks.front().name;
    snprintf(head, sizeof(head), "communicator %016llx%s%s%s, %zu of %d ranks on this host:\n",
             static_cast<unsigned long long>(id), name.empty() ? "" : " (\"", name.c_str(),
             name.empty() ? "" : "\")", ranks.size(), ranks.front().nranks);
    out << head;
    for (const FlightSnapshot& s : ranks) {
      out << "  rank " << s.rank << " (pid " << s.pid << " on " << s.host << "), " << s.calls
          << " calls:";
      const size_t first = s.last.size() > per_rank ? s.last.size() - per_rank : 0;
      if (first == s.last.size()) out << " none";
      for (size_t i = first; i < s.last.size(); ++i)
        out << (i > first ? ";" : "") << " " << DescribeEntry(s.last[i], now);
      out << "\n";
    }
    out << Divergence(ranks, now);
  }
  return out.str();
}

std::vector<pid_t> DumpTargets(pid_t pid) {
  std::vector<pid_t> children;
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
  for (pid_t child; in >> child;) children.push_back(child);
  for (pid_t child : children)
    if (!baton::FlightFilesOf(child).empty()) return children;
  return {pid};
}

void RemoveFlightFiles(const std::vector<pid_t>& pids) {
  for (pid_t pid : pids)
    for (const std::string& path : baton::FlightFilesOf(pid)) unlink(path.c_str());
}

}  // namespace batonrun
