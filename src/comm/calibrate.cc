#include "comm/calibrate.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "algorithms/ops.h"
#include "base/call_descriptor.h"
#include "base/datatype.h"
#include "base/log.h"
#include "comm/comm.h"
#include "kernels/cpu_reduce.h"

namespace baton {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kCacheVersion = 1;
// The beta ping-pong and the reduce probe: large enough to leave the
// caches, as the large messages whose cost beta and gamma decide do (over a
// network, 4 MiB is already far beyond what a burst of the NIC carries).
constexpr size_t kLargeShmBytes = 32 << 20;
constexpr size_t kLargeNetBytes = 4 << 20;
constexpr int kPairsPerClass = 3;  // measured pairs per link class; the fastest counts
constexpr int kStream = 16;        // messages in the overhead stream

// What one rank measured, exchanged as plain bytes.
struct Figures {
  uint8_t link_measured[kNumLinkClasses];
  uint8_t reduce_measured;
  uint8_t pad[2];
  LinkCost link[kNumLinkClasses];
  double reduce[batonNumTypes];
};

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// One ping-pong (or, with `stream` > 1, a stream of that many messages one
// way and one reply) of `bytes` between this rank and `peer`. Each message
// is a send/recv call of its own, numbered per peer as batonSend's are:
// only the pair runs it, so it must not take a collective's number (the
// ranks that wait in the barrier meanwhile would fall out of step).
Status Exchange(Communicator* comm, int peer, bool initiator, size_t bytes, int stream,
                std::vector<uint8_t>* buf) {
  Schedule s;
  const CollArgs a = comm->MakeArgs();
  uint8_t* data = buf->data();
  auto message = [&](bool send, size_t size, int dep) {
    Op op = send ? SendOp(peer, data, size, dep) : RecvOp(a, peer, data, size, nullptr, 0, dep);
    op.call = static_cast<uint16_t>(s.calls.size());
    s.calls.emplace_back();
    MakeCallDescriptor(&s.calls.back(), kCallKindPointToPoint, size, batonInt8, 0, peer, 0, send);
    return s.Add(op);
  };
  int last = -1;
  for (int i = 0; i < stream; ++i) last = message(initiator, bytes, -1);
  message(!initiator, stream > 1 ? 8 : bytes, last);
  return comm->Run(s);
}

// Times `reps` exchanges after `warmup` (seconds per exchange, the median of
// three batches so one descheduling does not decide it).
Status TimeExchanges(Communicator* comm, int peer, bool initiator, size_t bytes, int stream,
                     int reps, std::vector<uint8_t>* buf, double* seconds) {
  for (int i = 0; i < 3; ++i)
    BATON_RETURN_IF_ERROR(Exchange(comm, peer, initiator, bytes, stream, buf));
  double batch[3];
  for (double& b : batch) {
    const auto start = Clock::now();
    for (int i = 0; i < reps; ++i)
      BATON_RETURN_IF_ERROR(Exchange(comm, peer, initiator, bytes, stream, buf));
    b = Seconds(start, Clock::now()) / reps;
  }
  std::sort(batch, batch + 3);
  *seconds = batch[1];
  return Status::Ok();
}

// The link figures between this rank and `peer` (the initiator's are the
// ones used).
Status MeasureLink(Communicator* comm, int peer, bool initiator, bool network, LinkCost* out) {
  const size_t large_bytes = network ? kLargeNetBytes : kLargeShmBytes;
  std::vector<uint8_t> buf(large_bytes);
  const int small_reps = network ? 30 : 300, large_reps = 2;
  double round_trip, stream, large;
  BATON_RETURN_IF_ERROR(TimeExchanges(comm, peer, initiator, 8, 1, small_reps, &buf, &round_trip));
  BATON_RETURN_IF_ERROR(
      TimeExchanges(comm, peer, initiator, 8, kStream, small_reps, &buf, &stream));
  BATON_RETURN_IF_ERROR(
      TimeExchanges(comm, peer, initiator, large_bytes, 1, large_reps, &buf, &large));
  out->alpha_us = round_trip / 2 * 1e6;
  // A stream costs the first message, kStream - 1 overheads and the reply.
  out->overhead_us = std::max(out->alpha_us * 0.05, (stream - round_trip) / (kStream - 1) * 1e6);
  out->us_per_byte = std::max(1e-7, (large / 2 * 1e6 - out->alpha_us) / large_bytes);
  return Status::Ok();
}

// Microseconds per byte to reduce one incoming buffer into a local one.
void MeasureReduce(double out[batonNumTypes]) {
  constexpr size_t kBytes = kLargeShmBytes;
  std::vector<uint8_t> a(kBytes, 1), b(kBytes, 1), dst(kBytes);
  for (int t = 0; t < batonNumTypes; ++t) {
    const auto dt = static_cast<batonDataType_t>(t);
    const size_t count = kBytes / DatatypeSize(dt);
    double best = 1e30;
    for (int rep = 0; rep < 2; ++rep) {
      const auto start = Clock::now();
      ReduceInto(dst.data(), a.data(), b.data(), count, dt, batonSum);
      best = std::min(best, Seconds(start, Clock::now()));
    }
    out[t] = best * 1e6 / kBytes;
  }
}

std::string CacheFile(const std::string& dir, uint64_t host) {
  char name[64];
  snprintf(name, sizeof(name), "/calibration-%016llx.txt", static_cast<unsigned long long>(host));
  return dir + name;
}

// Reads a cache written by WriteCache; false when absent or malformed.
bool ReadCache(const std::string& path, Figures* f) {
  FILE* in = fopen(path.c_str(), "r");
  if (in == nullptr) return false;
  Figures got{};
  int version = 0;
  bool ok = fscanf(in, "baton-calibration %d\n", &version) == 1 && version == kCacheVersion;
  char kind[16];
  while (ok) {
    int index;
    if (fscanf(in, "%15s %d", kind, &index) != 2) break;
    if (strcmp(kind, "link") == 0 && index > 0 && index < kNumLinkClasses) {
      LinkCost& l = got.link[index];
      ok = fscanf(in, "%lf %lf %lf", &l.alpha_us, &l.overhead_us, &l.us_per_byte) == 3;
      got.link_measured[index] = 1;
    } else if (strcmp(kind, "reduce") == 0 && index >= 0 && index < batonNumTypes) {
      ok = fscanf(in, "%lf", &got.reduce[index]) == 1;
      got.reduce_measured = 1;
    } else {
      ok = false;
    }
  }
  fclose(in);
  if (ok) *f = got;
  return ok;
}

void WriteCache(const std::string& dir, const std::string& path, const Figures& f) {
  // mkdir -p of the last two levels (~/.cache/baton); failures show at fopen.
  const size_t slash = dir.rfind('/');
  if (slash != std::string::npos && slash > 0) mkdir(dir.substr(0, slash).c_str(), 0755);
  mkdir(dir.c_str(), 0755);
  const std::string tmp = path + "." + std::to_string(getpid());
  FILE* out = fopen(tmp.c_str(), "w");
  if (out == nullptr) {
    BATON_WARN(kLogInit, "BATON_CALIBRATE: cannot write the cache %s", path.c_str());
    return;
  }
  fprintf(out, "baton-calibration %d\n", kCacheVersion);
  for (int c = 1; c < kNumLinkClasses; ++c)
    if (f.link_measured[c])
      fprintf(out, "link %d %.9g %.9g %.9g\n", c, f.link[c].alpha_us, f.link[c].overhead_us,
              f.link[c].us_per_byte);
  for (int t = 0; t < batonNumTypes && f.reduce_measured; ++t)
    fprintf(out, "reduce %d %.9g\n", t, f.reduce[t]);
  const bool ok = fclose(out) == 0;
  if (!ok || rename(tmp.c_str(), path.c_str()) != 0) remove(tmp.c_str());
}

// Per link class present in the communicator, up to kPairsPerClass pairs of
// ranks with no rank in common (the first in rank order), identical on
// every rank. Several pairs, because one pair may be unlucky: two ranks of
// simulated hosts that share a core measure the scheduler, not the link.
std::vector<std::vector<std::pair<int, int>>> RepresentativePairs(const CommTopology& topology) {
  std::vector<std::vector<std::pair<int, int>>> pairs(kNumLinkClasses);
  const int p = topology.nranks();
  std::vector<std::vector<char>> used(kNumLinkClasses, std::vector<char>(p, 0));
  long budget = 1 << 20;  // pairs examined at most
  for (int a = 0; a < p && budget > 0; ++a)
    for (int b = a + 1; b < p && budget > 0; ++b, --budget) {
      const int c = static_cast<int>(topology.Link(a, b));
      if (pairs[c].size() >= kPairsPerClass || used[c][a] || used[c][b]) continue;
      pairs[c].push_back({a, b});
      used[c][a] = used[c][b] = 1;
    }
  return pairs;
}

}  // namespace

std::string CalibrationCacheDir(const std::string& setting) {
  if (!setting.empty()) return setting;
  if (const char* xdg = getenv("XDG_CACHE_HOME"); xdg != nullptr && xdg[0] == '/')
    return std::string(xdg) + "/baton";
  if (const char* home = getenv("HOME"); home != nullptr && home[0] == '/')
    return std::string(home) + "/.cache/baton";
  return "";
}

Status Calibrate(Communicator* comm, CostParams* params) {
  const CommTopology& topology = comm->topology();
  const int me = comm->rank(), p = comm->nranks();
  const auto pairs = RepresentativePairs(topology);
  const bool host_leader = topology.host_ranks()[topology.host_of(me)][0] == me;
  const std::string dir = CalibrationCacheDir(comm->config().calibration_cache);
  const std::string path = dir.empty() ? "" : CacheFile(dir, topology.place(me).host);

  // Use the caches when every host has one covering every class here.
  Figures mine{};
  bool cached = !path.empty() && ReadCache(path, &mine) && mine.reduce_measured;
  for (int c = 1; c < kNumLinkClasses && cached; ++c)
    cached = pairs[c].empty() || mine.link_measured[c];
  std::vector<uint8_t> flags(p);
  const uint8_t flag = cached ? 1 : 0;
  BATON_RETURN_IF_ERROR(comm->AllGatherBytes(&flag, 1, flags.data()));
  const bool use_cache = std::all_of(flags.begin(), flags.end(), [](uint8_t f) { return f != 0; });

  if (!use_cache) {
    mine = Figures{};
    for (int c = 1; c < kNumLinkClasses; ++c) {
      for (const auto& [a, b] : pairs[c]) {
        // One pair at a time; the others wait in a barrier rather than
        // competing for the cores.
        BATON_RETURN_IF_ERROR(comm->Barrier());
        if (me != a && me != b) continue;
        LinkCost measured;
        BATON_RETURN_IF_ERROR(MeasureLink(comm, me == a ? b : a, me == a,
                                          static_cast<LinkClass>(c) == LinkClass::kNetwork,
                                          &measured));
        if (me == a) {
          mine.link[c] = measured;
          mine.link_measured[c] = 1;
        }
      }
    }
    // One host at a time: simulated hosts share a machine's cores, and a
    // probe competing with another measures the contention.
    const auto& hosts = topology.host_ranks();
    for (size_t h = 0; h < hosts.size(); ++h) {
      BATON_RETURN_IF_ERROR(comm->Barrier());
      if (hosts[h][0] != me) continue;
      MeasureReduce(mine.reduce);
      mine.reduce_measured = 1;
    }
  }
  std::vector<Figures> all(p);
  BATON_RETURN_IF_ERROR(comm->AllGatherBytes(&mine, sizeof(Figures), all.data()));

  // Every rank merges the same figures the same way. A link is what its
  // fastest pair measured (the model adds contention for cores itself); a
  // reduction, the slowest host.
  Figures merged{};
  for (const Figures& f : all) {
    for (int c = 1; c < kNumLinkClasses; ++c) {
      if (!f.link_measured[c]) continue;
      LinkCost& m = merged.link[c];
      if (!merged.link_measured[c]) m = f.link[c];
      m.alpha_us = std::min(m.alpha_us, f.link[c].alpha_us);
      m.overhead_us = std::min(m.overhead_us, f.link[c].overhead_us);
      m.us_per_byte = std::min(m.us_per_byte, f.link[c].us_per_byte);
      merged.link_measured[c] = 1;
    }
    if (!f.reduce_measured) continue;
    for (int t = 0; t < batonNumTypes; ++t)
      merged.reduce[t] = std::max(merged.reduce[t], f.reduce[t]);
    merged.reduce_measured = 1;
  }
  for (int c = 1; c < kNumLinkClasses; ++c)
    if (merged.link_measured[c]) params->link[c] = merged.link[c];
  if (merged.reduce_measured)
    std::copy(merged.reduce, merged.reduce + batonNumTypes, params->reduce_us_per_byte);
  params->source = use_cache ? "calibration cache" : "calibrated";

  // Each host caches what it measured and what its links measured.
  if (!use_cache && host_leader && !path.empty()) {
    Figures host = merged;  // the links as measured, this host's own reductions
    std::copy(mine.reduce, mine.reduce + batonNumTypes, host.reduce);
    WriteCache(dir, path, host);
  }
  BATON_INFO(kLogTuning, "calibration: %s%s", params->source.c_str(),
             use_cache ? (" (" + path + ")").c_str() : "");
  return Status::Ok();
}

}  // namespace baton
