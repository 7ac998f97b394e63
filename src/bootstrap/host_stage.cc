// The host stage of the rendezvous and the table tree; see host_stage.h.
#include "bootstrap/host_stage.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <deque>
#include <thread>

#include "base/log.h"

namespace baton {
namespace {

// One hop of the tree: a live leader listens before it registers, so a
// refused connection for this long means it is gone.
constexpr double kTreeHopConnectSeconds = 2;
constexpr double kTreeHopSendSeconds = 30;
constexpr size_t kMaxArriving = 4096;

sockaddr_un AbstractAddress(const std::string& name, socklen_t* len) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const size_t n = std::min(name.size(), sizeof(addr.sun_path) - 1);
  memcpy(addr.sun_path + 1, name.data(), n);  // sun_path[0] = 0: abstract
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
  return addr;
}

// Binds the host's name; `*leader` says whether this rank got it.
Status TryLead(const std::string& name, Fd* listener, bool* leader) {
  *leader = false;
  Fd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return ErrnoError("socket", errno);
  socklen_t len = 0;
  const sockaddr_un addr = AbstractAddress(name, &len);
  if (bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), len) != 0) {
    if (errno == EADDRINUSE) return Status::Ok();
    return ErrnoError("bind the host's bootstrap socket", errno);
  }
  if (listen(fd.get(), 4096) != 0) return ErrnoError("listen", errno);
  *leader = true;
  *listener = std::move(fd);
  return Status::Ok();
}

// Connects to the host's leader; `*retry` when nobody listens there (yet:
// between its bind and listen; or any more: it exited and a new leader
// may bind) or its backlog is full.
Status TryJoin(const std::string& name, Fd* out, bool* retry) {
  *retry = false;
  Fd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return ErrnoError("socket", errno);
  socklen_t len = 0;
  const sockaddr_un addr = AbstractAddress(name, &len);
  if (connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), len) == 0) {
    *out = std::move(fd);
    return Status::Ok();
  }
  if (errno == ECONNREFUSED || errno == ENOENT || errno == EAGAIN || errno == EINTR) {
    *retry = true;
    return Status::Ok();
  }
  return ErrnoError("connect to the host's bootstrap leader", errno);
}

// A rank waits for the root's answer a little past its own deadline: the
// root's clock started no later than most ranks' (the launcher or the
// unique id's maker serves it, or rank 0 as it starts), and its answer to a
// timeout names the ranks that never came, where a rank's own timeout
// cannot. A leader gets one grace, its host's other ranks two (the
// leader passes the answer on).
Clock::duration VerdictGrace(Deadline deadline) {
  const auto left = deadline - Clock::now();
  return std::max(Clock::duration::zero(),
                  std::min<Clock::duration>(left / 10, std::chrono::seconds(2)));
}

Status WaitTimedOut(const SockAddr& root) {
  return TimeoutError("rendezvous at " + root.ToString() +
                      " timed out waiting for all ranks to join (BATON_TIMEOUT)");
}

// A rank that is not its host's leader: the star protocol of one rank
// with the root, spoken to the leader over the unix socket.
Status JoinLeader(const Fd& fd, const UniqueIdData& id, const ClientHello& hello, Deadline deadline,
                  std::vector<PeerInfo>* all) {
  const SockAddr root = FromWire(id.root);
  auto lost = [](Status st) {
    return RemoteError(
        "rendezvous: lost this host's leader (the host's first rank to join: "
        "did it exit or crash?): " +
        st.message());
  };
  Status st = SendAll(fd.get(), &hello, sizeof(hello), deadline);
  if (!st.ok()) return st.code() == batonTimeout ? WaitTimedOut(root) : lost(st);
  ServerReply reply;
  st = RecvAll(fd.get(), &reply, sizeof(reply), deadline);
  if (!st.ok()) return st.code() == batonTimeout ? WaitTimedOut(root) : lost(st);
  if (reply.status != 0) return CheckServerReply(id, hello, reply, nullptr);
  all->resize(hello.nranks);
  st = RecvAll(fd.get(), all->data(), all->size() * sizeof(PeerInfo), deadline);
  if (!st.ok()) return st.code() == batonTimeout ? WaitTimedOut(root) : lost(st);
  return CheckServerReply(id, hello, reply, all);
}

// A rank of this host, waiting for its reply.
struct Local {
  Fd fd;
  ClientHello hello;
};

// What a leader waits for: its ranks' hellos and the table message.
class Leader {
 public:
  Leader(const UniqueIdData& id, int nranks, Deadline deadline, Deadline verdict_deadline)
      : id_(id),
        nranks_(nranks),
        deadline_(deadline),
        verdict_deadline_(verdict_deadline),
        root_(FromWire(id.root)) {}

  Status Run(Fd host_listener, const ClientHello& hello, const PeerInfo& mine,
             std::vector<PeerInfo>* all);

 private:
  Status WaitForTable(const WireAddr& me, std::vector<ClientHello> unsent);
  Status SendBatch(const WireAddr& me, const std::vector<ClientHello>& hellos);
  void ReadLocals(const std::vector<pollfd>& fds, size_t first, std::vector<ClientHello>* unsent);
  void ReadTables(const std::vector<pollfd>& fds, size_t first);
  void Accept(int listener, size_t header_bytes, std::vector<Incoming>* into);

  const UniqueIdData id_;
  const int nranks_;
  const Deadline deadline_;
  // How long this rank waits for the root's answer once its batch is in
  // (VerdictGrace).
  const Deadline verdict_deadline_;
  const SockAddr root_;
  Fd host_listener_, tree_listener_;
  Fd root_conn_;  // open until kLeaderLingerMs after the last batch
  Clock::time_point last_batch_;
  std::vector<Local> locals_;
  std::vector<Incoming> arriving_locals_, arriving_tables_;
  std::vector<uint8_t> message_;  // the table message, once in
  Status forged_;                 // why a table of this id did not check
  bool warned_refused_ = false;   // LogRefused's first warning given
  bool root_closed_ = false;      // the root hung up on our batch (refused it)
};

void Leader::Accept(int listener, size_t header_bytes, std::vector<Incoming>* into) {
  for (;;) {  // every connection waiting
    const int fd = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;
    Incoming in;
    in.fd = Fd(fd);
    if (into->size() >= kMaxArriving) continue;  // closed
    in.buf.resize(header_bytes);
    into->push_back(std::move(in));
  }
}

void Leader::ReadLocals(const std::vector<pollfd>& fds, size_t first,
                        std::vector<ClientHello>* unsent) {
  for (size_t i = arriving_locals_.size(); i-- > 0;) {
    Incoming& in = arriving_locals_[i];
    bool drop = false, done = false;
    if (fds[first + i].revents != 0) {
      const ReadResult r = ReadSome(&in);
      ClientHello hello;
      memcpy(&hello, in.buf.data(), std::min(in.got, sizeof(hello)));
      drop = r == ReadResult::kClosed ||
             (in.got >= kClientHelloMagicBytes && !ClientHelloStartValid(hello));
      if (!drop && r == ReadResult::kDone) {
        const Status valid = CheckClientHello(id_, hello);
        if (valid.ok()) {
          unsent->push_back(hello);
          locals_.push_back(Local{std::move(in.fd), hello});
          done = true;
        } else {
          LogRefused("host leader", valid, &warned_refused_);
          drop = true;
        }
      }
    }
    if (!done && !drop && Clock::now() - in.since > std::chrono::milliseconds(kSilentDropMs))
      drop = true;
    if (drop) BATON_INFO(kLogBootstrap, "host leader: dropped a malformed or foreign connection");
    if (drop || done) arriving_locals_.erase(arriving_locals_.begin() + i);
  }
}

void Leader::ReadTables(const std::vector<pollfd>& fds, size_t first) {
  for (size_t i = arriving_tables_.size(); i-- > 0 && message_.empty() && forged_.ok();) {
    Incoming& in = arriving_tables_[i];
    bool drop = false;
    if (fds[first + i].revents != 0) {
      ReadResult r = ReadSome(&in);
      if (r == ReadResult::kDone && in.buf.size() == sizeof(TableHeader)) {
        TableHeader header;
        memcpy(&header, in.buf.data(), sizeof(header));
        const Status valid = CheckTableHeaderStart(id_, header, nranks_);
        if (valid.ok()) {
          in.buf.resize(sizeof(header) + header.nleaders * sizeof(WireAddr) +
                        header.nranks * sizeof(PeerInfo));
          r = ReadSome(&in);
        } else {
          BATON_INFO(kLogBootstrap, "host leader: dropped a table: %s", valid.message().c_str());
          drop = true;
        }
      }
      if (!drop && r == ReadResult::kDone) {
        TableHeader header;
        memcpy(&header, in.buf.data(), sizeof(header));
        std::vector<WireAddr> leaders(header.nleaders);
        std::vector<PeerInfo> table(header.nranks);
        memcpy(leaders.data(), in.buf.data() + sizeof(header), leaders.size() * sizeof(WireAddr));
        memcpy(table.data(), in.buf.data() + sizeof(header) + leaders.size() * sizeof(WireAddr),
               table.size() * sizeof(PeerInfo));
        // This communicator's id but not its secret: a server at the root's
        // address that is not this job's. Fail as a rank of the star did.
        forged_ = CheckTableHeader(id_, header, leaders, table);
        if (forged_.ok()) message_ = std::move(in.buf);
        drop = !forged_.ok();
      }
      drop |= r == ReadResult::kClosed;
    }
    if (message_.empty() && !drop &&
        Clock::now() - in.since > std::chrono::milliseconds(kSilentDropMs))
      drop = true;
    if (drop || !message_.empty()) arriving_tables_.erase(arriving_tables_.begin() + i);
  }
}

// Registers `hellos` with the root, on the connection of the last batch
// while it is open (once more on a new one if that fails: the root may
// have dropped it).
Status Leader::SendBatch(const WireAddr& me, const std::vector<ClientHello>& hellos) {
  LeaderBatch batch;
  BATON_RETURN_IF_ERROR(MakeLeaderBatch(id_, me, static_cast<int>(hellos.size()), &batch));
  for (int attempt = 0;; ++attempt) {
    if (!root_conn_.valid()) BATON_RETURN_IF_ERROR(ConnectWithRetry(root_, deadline_, &root_conn_));
    Status st = SendAll(root_conn_.get(), &batch, sizeof(batch), deadline_);
    if (st.ok())
      st = SendAll(root_conn_.get(), hellos.data(), hellos.size() * sizeof(ClientHello), deadline_);
    if (st.ok()) {
      last_batch_ = Clock::now();
      return st;
    }
    root_conn_.reset();
    if (attempt == 1) return st;
  }
}

Status Leader::WaitForTable(const WireAddr& me, std::vector<ClientHello> unsent) {
  while (message_.empty()) {
    if (!unsent.empty()) {
      BATON_RETURN_IF_ERROR(SendBatch(me, unsent).WithContext("rendezvous at " + root_.ToString()));
      unsent.clear();
    }
    int wait_ms = PollSliceMs(verdict_deadline_);
    // Wake to drop silent connections.
    if (!arriving_locals_.empty() || !arriving_tables_.empty())
      wait_ms = std::min(wait_ms, kSilentDropMs / 5);
    if (root_conn_.valid()) {
      const auto idle =
          std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - last_batch_);
      if (idle.count() >= kLeaderLingerMs) {
        root_conn_.reset();
      } else {
        wait_ms = std::min<int>(wait_ms, kLeaderLingerMs - idle.count());
      }
    }
    std::vector<pollfd> fds;
    fds.push_back({host_listener_.get(), POLLIN, 0});
    fds.push_back({tree_listener_.get(), POLLIN, 0});
    for (const auto& in : arriving_locals_) fds.push_back({in.fd.get(), POLLIN, 0});
    for (const auto& in : arriving_tables_) fds.push_back({in.fd.get(), POLLIN, 0});
    // The root never writes on this connection; it closes it at once when
    // it refuses the batch (another secret or job).
    const size_t root_at = fds.size();
    if (root_conn_.valid()) fds.push_back({root_conn_.get(), POLLIN, 0});
    const int n = poll(fds.data(), fds.size(), wait_ms);
    if (n < 0 && errno != EINTR) return ErrnoError("poll", errno);
    if (WaitsCancelled())
      return InvalidUsage("the communicator was aborted while it was being created");
    if (Clock::now() >= verdict_deadline_) {
      Status timed_out = WaitTimedOut(root_);
      if (!root_closed_) return timed_out;
      return Status(timed_out.code(),
                    timed_out.message() +
                        "; the root closed this host's connection as soon as it had the hellos: "
                        "is BATON_SECRET alike on every rank?");
    }
    if (root_conn_.valid() && fds[root_at].revents != 0) {
      // A reset when it closed with our hellos unread.
      char byte;
      const ssize_t got = recv(root_conn_.get(), &byte, 1, MSG_DONTWAIT);
      root_closed_ = got == 0 || (got < 0 && errno == ECONNRESET);
      if (got >= 0 || errno != EAGAIN) root_conn_.reset();
    }
    const size_t tables_first = 2 + arriving_locals_.size();
    ReadLocals(fds, 2, &unsent);
    ReadTables(fds, tables_first);
    if (!forged_.ok()) return forged_;
    if (fds[0].revents & POLLIN)
      Accept(host_listener_.get(), sizeof(ClientHello), &arriving_locals_);
    if (fds[1].revents & POLLIN)
      Accept(tree_listener_.get(), sizeof(TableHeader), &arriving_tables_);
  }
  return Status::Ok();
}

Status Leader::Run(Fd host_listener, const ClientHello& hello, const PeerInfo& mine,
                   std::vector<PeerInfo>* all) {
  host_listener_ = std::move(host_listener);
  SockAddr tree_addr = FromWire(mine.listen_addr), tree_bound;
  tree_addr.set_port(0);
  BATON_RETURN_IF_ERROR(ListenOn(tree_addr, &tree_listener_, &tree_bound));
  BATON_RETURN_IF_ERROR(SetNonBlocking(tree_listener_.get(), true));
  const WireAddr me = ToWire(tree_bound);
  Status waited = WaitForTable(me, {hello});
  root_conn_.reset();
  host_listener_.reset();
  tree_listener_.reset();

  TableHeader header{};
  std::vector<WireAddr> leaders;
  std::vector<PeerInfo> table;
  if (waited.ok()) {
    memcpy(&header, message_.data(), sizeof(header));
    leaders.resize(header.nleaders);
    table.resize(header.nranks);
    memcpy(leaders.data(), message_.data() + sizeof(header), leaders.size() * sizeof(WireAddr));
    memcpy(table.data(), message_.data() + sizeof(header) + leaders.size() * sizeof(WireAddr),
           table.size() * sizeof(PeerInfo));
    int self = -1;
    for (size_t i = 0; i < leaders.size(); ++i)
      if (memcmp(&leaders[i], &me, sizeof(me)) == 0) self = static_cast<int>(i);
    if (self >= 0) SendTableDown(leaders, self, message_, deadline_);
  } else {
    // The ranks of this host learn why, rather than that their leader left.
    header.status = waited.code();
    snprintf(header.message, sizeof(header.message), "%s", waited.message().c_str());
  }
  header.message[sizeof(header.message) - 1] = '\0';
  const Mac digest = TableDigest(table);
  const Deadline reply_deadline = std::min(deadline_, DeadlineIn(kTreeHopSendSeconds));
  for (const Local& local : locals_) {
    const ServerReply reply =
        MakeServerReply(id_, local.hello.nonce, header.status, header.message, digest);
    Status st = SendAll(local.fd.get(), &reply, sizeof(reply), reply_deadline);
    if (st.ok() && header.status == 0)
      st = SendAll(local.fd.get(), table.data(), table.size() * sizeof(PeerInfo), reply_deadline);
    if (!st.ok())
      BATON_WARN(kLogBootstrap, "host leader: reply to rank %d failed: %s", local.hello.rank,
                 st.message().c_str());
  }
  if (!waited.ok()) return waited;
  const ServerReply mine_reply =
      MakeServerReply(id_, hello.nonce, header.status, header.message, digest);
  if (header.status != 0) return CheckServerReply(id_, hello, mine_reply, nullptr);
  *all = std::move(table);
  return CheckServerReply(id_, hello, mine_reply, all);
}

}  // namespace

ReadResult ReadSome(Incoming* in) {
  while (in->got < in->buf.size()) {
    const ssize_t r =
        recv(in->fd.get(), in->buf.data() + in->got, in->buf.size() - in->got, MSG_DONTWAIT);
    if (r > 0) {
      in->got += r;
      continue;
    }
    if (r == 0) return ReadResult::kClosed;
    if (errno == EINTR) continue;
    return errno == EAGAIN || errno == EWOULDBLOCK ? ReadResult::kMore : ReadResult::kClosed;
  }
  return ReadResult::kDone;
}

std::vector<uint8_t> TableMessage(const TableHeader& header, const std::vector<WireAddr>& leaders,
                                  const std::vector<PeerInfo>& table) {
  std::vector<uint8_t> message(sizeof(header) + leaders.size() * sizeof(WireAddr) +
                               table.size() * sizeof(PeerInfo));
  memcpy(message.data(), &header, sizeof(header));
  memcpy(message.data() + sizeof(header), leaders.data(), leaders.size() * sizeof(WireAddr));
  memcpy(message.data() + sizeof(header) + leaders.size() * sizeof(WireAddr), table.data(),
         table.size() * sizeof(PeerInfo));
  return message;
}

void SendTableDown(const std::vector<WireAddr>& leaders, int self,
                   const std::vector<uint8_t>& message, Deadline deadline) {
  const int nleaders = static_cast<int>(leaders.size());
  std::deque<int> todo;
  for (int c : TableTreeChildren(self, nleaders)) todo.push_back(c);
  while (!todo.empty()) {
    const int child = todo.front();
    todo.pop_front();
    const SockAddr addr = FromWire(leaders[child]);
    Fd fd;
    Status st = ConnectWithRetry(addr, std::min(deadline, DeadlineIn(kTreeHopConnectSeconds)), &fd);
    if (st.ok())
      st = SendAll(fd.get(), message.data(), message.size(),
                   std::min(deadline, DeadlineIn(kTreeHopSendSeconds)));
    if (!st.ok()) {
      BATON_WARN(kLogBootstrap,
                 "rendezvous: leader at %s did not take the table (%s); sending "
                 "to its children instead",
                 addr.ToString().c_str(), st.message().c_str());
      for (int c : TableTreeChildren(child, nleaders)) todo.push_back(c);
    }
  }
}

std::string HostLeaderSocketName(const UniqueIdData& id, uint64_t host_hash) {
  char name[64];
  snprintf(name, sizeof(name), "baton-boot-%016" PRIx64 "-%016" PRIx64, id.comm_id, host_hash);
  return name;
}

Status HostRendezvous(const UniqueIdData& id, int nranks, int rank, const PeerInfo& mine,
                      Deadline deadline, std::vector<PeerInfo>* all) {
  ClientHello hello;
  BATON_RETURN_IF_ERROR(MakeClientHello(id, nranks, rank, mine, &hello));
  const std::string name = HostLeaderSocketName(id, mine.host_hash);
  const Clock::duration grace = VerdictGrace(deadline);
  int delay_ms = 1;
  for (;;) {
    Fd fd;
    bool leader = false, retry = false;
    BATON_RETURN_IF_ERROR(TryLead(name, &fd, &leader).WithContext("rendezvous"));
    if (leader) {
      BATON_INFO(kLogBootstrap, "rendezvous: rank %d leads its host", rank);
      return Leader(id, nranks, deadline, deadline + grace).Run(std::move(fd), hello, mine, all);
    }
    BATON_RETURN_IF_ERROR(TryJoin(name, &fd, &retry).WithContext("rendezvous"));
    if (!retry) return JoinLeader(fd, id, hello, deadline + 2 * grace, all);
    if (Clock::now() + std::chrono::milliseconds(delay_ms) >= deadline)
      return WaitTimedOut(FromWire(id.root));
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    if (WaitsCancelled())
      return InvalidUsage("the communicator was aborted while it was being created");
    delay_ms = std::min(delay_ms * 2, 20);
  }
}

}  // namespace baton
