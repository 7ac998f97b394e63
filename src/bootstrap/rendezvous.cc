// The rendezvous: a server thread in the process that made the unique id
// (or in rank 0, for BATON_ROOT jobs) collects every rank's PeerInfo from
// the host leaders and sends the table down their tree. See rendezvous.h.
#include "bootstrap/rendezvous.h"

#include <poll.h>
#include <pthread.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <thread>
#include <unordered_map>

#include "base/log.h"
#include "base/rank_ranges.h"
#include "bootstrap/handshake.h"
#include "bootstrap/host_stage.h"

namespace baton {
namespace {

// A rendezvous being served in this process. The registry lets a forked
// child drop servers whose thread exists only in its parent.
struct ServerState {
  Fd listener;
  UniqueIdData id{};
  double timeout_s = 0;
  pid_t owner = 0;
};

// The serving threads are detached and may still run while the process
// exits, so the registry is never destroyed: a static destructor would race
// with them (ThreadSanitizer saw it). Built in static storage on first use.
struct ServerRegistry {
  std::mutex mu;
  std::vector<std::shared_ptr<ServerState>> servers;
  // Stats of the last rendezvous this process served, by comm id (tests).
  std::vector<std::pair<uint64_t, RendezvousServerStats>> finished;
};
ServerRegistry& Registry() {
  alignas(ServerRegistry) static unsigned char storage[sizeof(ServerRegistry)];
  static ServerRegistry* registry = ::new (storage) ServerRegistry();
  return *registry;
}

void AtForkPrepare() {
  Registry().mu.lock();
}
void AtForkParent() {
  Registry().mu.unlock();
}
void AtForkChild() {
  // The serving threads did not survive the fork: close the child's copies
  // of their listeners (the parent keeps serving) and forget them.
  // (Memory is the child's own copy, so releasing it cannot disturb the
  // parent's threads.)
  for (auto& s : Registry().servers) s->listener.reset();
  Registry().servers.clear();
  Registry().mu.unlock();
}

void RegisterServer(const std::shared_ptr<ServerState>& s) {
  static std::once_flag once;
  std::call_once(once, [] { pthread_atfork(AtForkPrepare, AtForkParent, AtForkChild); });
  std::lock_guard<std::mutex> lock(Registry().mu);
  Registry().servers.push_back(s);
}

void UnregisterServer(const ServerState* s) {
  std::lock_guard<std::mutex> lock(Registry().mu);
  for (auto it = Registry().servers.begin(); it != Registry().servers.end(); ++it) {
    if (it->get() == s) {
      Registry().servers.erase(it);
      return;
    }
  }
}

// What the root collects from the leaders' batches.
class Collector {
 public:
  explicit Collector(const UniqueIdData& id) : id_(id) {}

  const UniqueIdData& id() const { return id_; }
  // Takes a whole batch (header and hellos), returning its leader's index,
  // or -1 when it is foreign or malformed (it is dropped); a batch that
  // makes the rendezvous fail sets failure().
  int Take(const std::vector<uint8_t>& buf);
  bool complete() const { return nranks_ >= 0 && joined_ == nranks_; }
  const std::string& failure() const { return failure_; }
  void Fail(std::string why) { failure_ = std::move(why); }
  void Refused(const Status& why) {
    ++refused_;
    LogRefused("rendezvous root", why, &warned_);
  }
  // Why the missing ranks may be missing, for the timeout's message.
  std::string MissingWhy(const SockAddr& root) const;
  int joined() const { return joined_; }
  int nranks() const { return nranks_; }
  // The ranks that have not joined, as "rank 3" or "ranks 2, 5-7, 9"
  // (the first ranges only, for a message of bounded length).
  std::string Missing() const;
  const std::vector<WireAddr>& leaders() const { return leaders_; }
  const std::vector<PeerInfo>& table() const { return table_; }

 private:
  const UniqueIdData id_;
  std::vector<WireAddr> leaders_;
  std::unordered_map<std::string, int> leader_index_;  // by the address's bytes
  std::vector<PeerInfo> table_;
  std::vector<bool> have_;
  int nranks_ = -1, joined_ = 0;
  std::string failure_;
  bool warned_ = false;  // LogRefused's first warning given
  int refused_ = 0;      // connections refused as another job's or secret's
};

std::string Collector::Missing() const {
  std::vector<int> missing;
  for (int r = 0; r < nranks_; ++r)
    if (!have_[r]) missing.push_back(r);
  return RankRanges(missing);
}

std::string Collector::MissingWhy(const SockAddr& root) const {
  std::string why = "not started, or cannot reach " + root.ToString();
  if (refused_ > 0)
    why += "; the root refused " + std::to_string(refused_) +
           (refused_ == 1 ? " connection" : " connections") +
           " sealed with another secret or id: is BATON_SECRET alike on every rank?";
  return why;
}

int Collector::Take(const std::vector<uint8_t>& buf) {
  LeaderBatch batch;
  memcpy(&batch, buf.data(), sizeof(batch));
  std::vector<ClientHello> hellos(batch.count);
  memcpy(hellos.data(), buf.data() + sizeof(batch), hellos.size() * sizeof(ClientHello));
  for (const ClientHello& h : hellos) {
    const Status valid = CheckClientHello(id_, h);
    if (!valid.ok()) {
      Refused(valid);
      return -1;
    }
  }
  // Known before any hello counts, so that a failure reaches this leader.
  const auto [known, added] = leader_index_.try_emplace(
      std::string(reinterpret_cast<const char*>(&batch.leader), sizeof(batch.leader)),
      static_cast<int>(leaders_.size()));
  if (added) leaders_.push_back(batch.leader);
  const int leader = known->second;
  for (const ClientHello& h : hellos) {
    if (nranks_ < 0) {
      nranks_ = h.nranks;
      table_.resize(nranks_);
      have_.assign(nranks_, false);
    }
    // After a failure, only which ranks came counts: the root answers late
    // ranks with the failure until every rank has had it.
    if (failure_.empty() && h.nranks != nranks_)
      failure_ = "ranks disagree on the communicator size (" + std::to_string(nranks_) + " and " +
                 std::to_string(h.nranks) + ")";
    else if (failure_.empty() && have_[h.rank])
      failure_ = "rank " + std::to_string(h.rank) + " joined twice";
    if (h.rank >= nranks_ || have_[h.rank]) continue;
    have_[h.rank] = true;
    table_[h.rank] = h.info;
    table_[h.rank].rank = h.rank;
    ++joined_;
  }
  return leader;
}

// Reads what arrived on a leader's connection, batch after batch: true
// once it is done with (closed, dropped, or silent too long); `taken` gets
// the index of each taken batch's leader.
bool ReadBatches(Incoming* in, Collector* collector, RendezvousServerStats* stats,
                 std::vector<int>* taken) {
  for (;;) {
    ReadResult r = ReadSome(in);
    if (in->buf.size() == sizeof(LeaderBatch) && in->got >= kLeaderBatchMagicBytes) {
      LeaderBatch batch;
      memcpy(&batch, in->buf.data(), sizeof(batch));
      if (!LeaderBatchStartValid(batch)) {
        BATON_INFO(kLogBootstrap, "rendezvous: dropped a foreign connection");
        return true;
      }
      if (in->got == sizeof(batch)) {
        const Status valid = CheckLeaderBatch(collector->id(), batch);
        if (!valid.ok()) {
          collector->Refused(valid);
          return true;
        }
        in->buf.resize(sizeof(batch) + batch.count * sizeof(ClientHello));
        r = ReadSome(in);
      }
    }
    if (r == ReadResult::kDone) {
      const int leader = collector->Take(in->buf);
      if (leader < 0) return true;
      stats->batches++;
      taken->push_back(leader);
      in->buf.assign(sizeof(LeaderBatch), 0);  // the next batch, if any
      in->got = 0;
      in->since = Clock::now();
      continue;
    }
    if (r == ReadResult::kClosed) {
      if (in->got != 0)
        BATON_INFO(kLogBootstrap, "rendezvous: dropped a malformed or foreign connection");
      return true;
    }
    return Clock::now() - in->since > std::chrono::milliseconds(kSilentDropMs);
  }
}

// Sends the table, or why the rendezvous failed, to `leaders` and, down
// the tree, to theirs.
void Answer(const ServerState& state, const Collector& collector, int32_t status,
            const std::vector<WireAddr>& leaders) {
  const std::vector<PeerInfo> no_table;
  const std::vector<PeerInfo>& table = status == 0 ? collector.table() : no_table;
  const TableHeader header = MakeTableHeader(state.id, status, collector.failure(), leaders, table);
  SendTableDown(leaders, -1, TableMessage(header, leaders, table),
                DeadlineIn(std::min(state.timeout_s > 0 ? state.timeout_s : 30.0, 30.0)));
}

// The server loop: reads leaders' batches, from at most kRootWindow
// connections at once,
// until every rank is in, then sends the table down the tree of leaders.
// When the rendezvous fails, every leader known gets the reason, and the
// root goes on answering late leaders with it until all ranks have come
// or its deadline.
void ServeRendezvous(std::shared_ptr<ServerState> state) {
  const Deadline deadline = DeadlineIn(state->timeout_s);
  std::vector<Incoming> pending;
  Collector collector(state->id);
  RendezvousServerStats stats;
  int32_t failure_code = batonRemoteError;
  bool answered = false;
  std::vector<bool> told;  // after a failure: which leaders have the reason

  while (!collector.complete()) {
    if (!collector.failure().empty() && !answered) {
      BATON_WARN(kLogBootstrap, "rendezvous failed: %s", collector.failure().c_str());
      Answer(*state, collector, failure_code, collector.leaders());
      answered = true;
      told.assign(collector.leaders().size(), true);
    }
    std::vector<pollfd> fds;
    const bool accepting = pending.size() < static_cast<size_t>(kRootWindow);
    fds.push_back({state->listener.get(), static_cast<short>(accepting ? POLLIN : 0), 0});
    for (auto& c : pending) fds.push_back({c.fd.get(), POLLIN, 0});
    int n = poll(fds.data(), fds.size(), std::min(MillisLeft(deadline), 1000));
    if (n < 0 && errno != EINTR && collector.failure().empty())
      collector.Fail(std::string("poll: ") + strerror(errno));
    if (Clock::now() >= deadline) {
      if (collector.failure().empty()) {
        collector.Fail(collector.nranks() < 0
                           ? std::string("rendezvous timed out with no rank joined")
                           : "rendezvous timed out with " + std::to_string(collector.joined()) +
                                 " of " + std::to_string(collector.nranks()) + " ranks joined; " +
                                 collector.Missing() + " never came (" +
                                 collector.MissingWhy(FromWire(state->id.root)) + ")");
        failure_code = batonTimeout;
      }
      break;
    }
    // Read pending leaders first (indices stay valid), then accept.
    for (size_t i = pending.size(); i-- > 0;) {
      std::vector<int> taken;
      const bool done =
          fds[i + 1].revents != 0
              ? ReadBatches(&pending[i], &collector, &stats, &taken)
              : Clock::now() - pending[i].since > std::chrono::milliseconds(kSilentDropMs);
      if (done) pending.erase(pending.begin() + i);
      for (int leader : taken) {
        if (!answered) continue;
        if (told.size() <= static_cast<size_t>(leader)) told.resize(leader + 1, false);
        if (told[leader]) continue;
        told[leader] = true;
        Answer(*state, collector, failure_code, {collector.leaders()[leader]});
      }
    }
    // Every connection waiting, up to the window.
    while (accepting && (fds[0].revents & POLLIN) &&
           pending.size() < static_cast<size_t>(kRootWindow)) {
      int fd = accept4(state->listener.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) break;
      Incoming in;
      in.fd = Fd(fd);
      in.buf.resize(sizeof(LeaderBatch));
      pending.push_back(std::move(in));
      stats.connections++;
      stats.peak_open = std::max(stats.peak_open, static_cast<int>(pending.size()));
    }
  }
  pending.clear();
  stats.ranks = collector.joined();
  stats.leaders = static_cast<int>(collector.leaders().size());
  BATON_INFO(kLogBootstrap,
             "rendezvous: %d ranks from %d host leaders in %d connections (at most %d open)",
             stats.ranks, stats.leaders, stats.connections, stats.peak_open);
  if (!answered) {
    if (!collector.failure().empty())
      BATON_WARN(kLogBootstrap, "rendezvous failed: %s", collector.failure().c_str());
    Answer(*state, collector, collector.failure().empty() ? 0 : failure_code, collector.leaders());
  }
  {
    std::lock_guard<std::mutex> lock(Registry().mu);
    auto& finished = Registry().finished;
    if (finished.size() >= 16) finished.erase(finished.begin());
    finished.emplace_back(state->id.comm_id, stats);
  }
  UnregisterServer(state.get());
}

}  // namespace

Status StartRendezvousServer(Fd listener, const UniqueIdData& id, double timeout_s) {
  auto state = std::make_shared<ServerState>();
  state->listener = std::move(listener);
  state->id = id;
  state->timeout_s = timeout_s;
  state->owner = getpid();
  BATON_RETURN_IF_ERROR(SetNonBlocking(state->listener.get(), true));
  RegisterServer(state);
  // Detached: the thread owns its state and ends when the rendezvous does;
  // nothing in this process waits for it, so a fork cannot inherit a join.
  std::thread(ServeRendezvous, state).detach();
  return Status::Ok();
}

Status CreateUniqueId(const std::string& ifname_spec, double timeout_s, batonUniqueId* out) {
  UniqueIdData data{};
  data.magic = kUniqueIdMagic;
  data.version = kBootstrapVersion;
  if (getrandom(data.secret, sizeof(data.secret), 0) != sizeof(data.secret) ||
      getrandom(&data.comm_id, sizeof(data.comm_id), 0) != sizeof(data.comm_id))
    return ErrnoError("getrandom", errno);
  SockAddr addr, bound;
  std::string ifname;
  BATON_RETURN_IF_ERROR(SelectInterfaceAddress(ifname_spec, &addr, &ifname));
  Fd listener;
  BATON_RETURN_IF_ERROR(ListenOn(addr, &listener, &bound));
  data.root = ToWire(bound);
  BATON_RETURN_IF_ERROR(StartRendezvousServer(std::move(listener), data, timeout_s));
  BATON_INFO(kLogBootstrap, "unique id: rendezvous at %s", bound.ToString().c_str());
  *out = EncodeUniqueId(data);
  return Status::Ok();
}

Status Rendezvous(const UniqueIdData& id, int nranks, int rank, const PeerInfo& mine,
                  Deadline deadline, std::vector<PeerInfo>* all) {
  return HostRendezvous(id, nranks, rank, mine, deadline, all);
}

bool FinishedRendezvousStats(uint64_t comm_id, RendezvousServerStats* out) {
  std::lock_guard<std::mutex> lock(Registry().mu);
  for (const auto& [id, stats] : Registry().finished) {
    if (id == comm_id) {
      *out = stats;
      return true;
    }
  }
  return false;
}

}  // namespace baton
