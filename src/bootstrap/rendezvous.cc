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

#include "base/log.h"
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
  // Takes a whole batch (header and hellos): false when it is foreign or
  // malformed (it is dropped); a batch that makes the rendezvous fail sets
  // failure().
  bool Take(const std::vector<uint8_t>& buf);
  bool complete() const { return nranks_ >= 0 && joined_ == nranks_; }
  const std::string& failure() const { return failure_; }
  void Fail(std::string why) { failure_ = std::move(why); }
  int joined() const { return joined_; }
  int nranks() const { return nranks_; }
  const std::vector<WireAddr>& leaders() const { return leaders_; }
  const std::vector<PeerInfo>& table() const { return table_; }

 private:
  const UniqueIdData id_;
  std::vector<WireAddr> leaders_;
  std::vector<PeerInfo> table_;
  std::vector<bool> have_;
  int nranks_ = -1, joined_ = 0;
  std::string failure_;
};

bool Collector::Take(const std::vector<uint8_t>& buf) {
  LeaderBatch batch;
  memcpy(&batch, buf.data(), sizeof(batch));
  std::vector<ClientHello> hellos(batch.count);
  memcpy(hellos.data(), buf.data() + sizeof(batch), hellos.size() * sizeof(ClientHello));
  for (const ClientHello& h : hellos) {
    const Status valid = CheckClientHello(id_, h);
    if (!valid.ok()) {
      BATON_INFO(kLogBootstrap, "rendezvous: dropped a batch: %s", valid.message().c_str());
      return false;
    }
  }
  // Known before any hello counts, so that a failure reaches this leader.
  if (std::none_of(leaders_.begin(), leaders_.end(), [&](const WireAddr& a) {
        return memcmp(&a, &batch.leader, sizeof(a)) == 0;
      }))
    leaders_.push_back(batch.leader);
  for (const ClientHello& h : hellos) {
    if (nranks_ >= 0 && h.nranks != nranks_) {
      failure_ = "ranks disagree on the communicator size (" + std::to_string(nranks_) + " and " +
                 std::to_string(h.nranks) + ")";
      return true;
    }
    if (nranks_ < 0) {
      nranks_ = h.nranks;
      table_.resize(nranks_);
      have_.assign(nranks_, false);
    }
    if (have_[h.rank]) {
      failure_ = "rank " + std::to_string(h.rank) + " joined twice";
      return true;
    }
    have_[h.rank] = true;
    table_[h.rank] = h.info;
    table_[h.rank].rank = h.rank;
    ++joined_;
  }
  return true;
}

// Reads what arrived on a leader's connection: true once it is done with
// (taken, dropped or closed).
bool ReadBatch(Incoming* in, Collector* collector, RendezvousServerStats* stats) {
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
        BATON_INFO(kLogBootstrap, "rendezvous: dropped a connection: %s", valid.message().c_str());
        return true;
      }
      in->buf.resize(sizeof(batch) + batch.count * sizeof(ClientHello));
      r = ReadSome(in);
    }
  }
  if (r == ReadResult::kDone) {
    if (collector->Take(in->buf)) stats->batches++;
    return true;
  }
  if (r == ReadResult::kClosed)
    BATON_INFO(kLogBootstrap, "rendezvous: dropped a malformed or foreign connection");
  return r == ReadResult::kClosed ||
         Clock::now() - in->since > std::chrono::milliseconds(kSilentDropMs);
}

// The server loop: reads leaders' batches, at most kRootWindow at once,
// until every rank is in (or the rendezvous fails), then sends the table,
// or why it failed, down the tree of leaders.
void ServeRendezvous(std::shared_ptr<ServerState> state) {
  const Deadline deadline = DeadlineIn(state->timeout_s);
  std::vector<Incoming> pending;
  Collector collector(state->id);
  RendezvousServerStats stats;
  int32_t failure_code = batonRemoteError;

  while (collector.failure().empty() && !collector.complete()) {
    std::vector<pollfd> fds;
    const bool accepting = pending.size() < static_cast<size_t>(kRootWindow);
    fds.push_back({state->listener.get(), static_cast<short>(accepting ? POLLIN : 0), 0});
    for (auto& c : pending) fds.push_back({c.fd.get(), POLLIN, 0});
    int n = poll(fds.data(), fds.size(), std::min(MillisLeft(deadline), 1000));
    if (n < 0 && errno != EINTR) {
      collector.Fail(std::string("poll: ") + strerror(errno));
      break;
    }
    if (Clock::now() >= deadline) {
      collector.Fail("rendezvous timed out with " + std::to_string(collector.joined()) + " of " +
                     (collector.nranks() < 0 ? std::string("?")
                                             : std::to_string(collector.nranks())) +
                     " ranks joined");
      failure_code = batonTimeout;
      break;
    }
    // Read pending leaders first (indices stay valid), then accept.
    for (size_t i = pending.size(); i-- > 0 && collector.failure().empty();)
      if (ReadBatch(&pending[i], &collector, &stats)) pending.erase(pending.begin() + i);
    if (accepting && (fds[0].revents & POLLIN)) {
      int fd = accept4(state->listener.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd >= 0) {
        Incoming in;
        in.fd = Fd(fd);
        in.buf.resize(sizeof(LeaderBatch));
        pending.push_back(std::move(in));
        stats.connections++;
        stats.peak_open = std::max(stats.peak_open, static_cast<int>(pending.size()));
      }
    }
  }
  pending.clear();
  const std::string& failure = collector.failure();
  const std::vector<PeerInfo> no_table;
  const TableHeader header =
      MakeTableHeader(state->id, failure.empty() ? 0 : failure_code, failure, collector.leaders(),
                      failure.empty() ? collector.table() : no_table);
  if (!failure.empty()) BATON_WARN(kLogBootstrap, "rendezvous failed: %s", failure.c_str());
  stats.ranks = collector.joined();
  stats.leaders = static_cast<int>(collector.leaders().size());
  BATON_INFO(kLogBootstrap,
             "rendezvous: %d ranks from %d host leaders in %d connections (at most %d open)",
             stats.ranks, stats.leaders, stats.connections, stats.peak_open);
  if (!collector.leaders().empty())
    SendTableDown(collector.leaders(), -1,
                  TableMessage(header, collector.leaders(),
                               failure.empty() ? collector.table() : no_table),
                  DeadlineIn(std::min(state->timeout_s > 0 ? state->timeout_s : 30.0, 30.0)));
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
