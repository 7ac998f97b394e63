// The full mesh of authenticated sockets between the ranks; see mesh.h.
#include "bootstrap/mesh.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "base/log.h"
#include "bootstrap/handshake.h"

namespace baton {

namespace {

// At most this many of a rank's own connects are in flight at once, so a
// large communicator does not flood its lower ranks' listen backlogs.
constexpr int kMaxConnectsInFlight = 64;
// At most this many accepted connections may still be shaking hands.
constexpr size_t kMaxAcceptsInFlight = 4096;

// One mesh socket being made: an outgoing one (this rank connects to a lower
// rank) or an incoming one (a higher rank connected to this one). Either
// side moves three messages: hello (connector to acceptor), challenge (back)
// and proof (connector to acceptor), each checked as it completes.
struct Handshake {
  Fd fd;
  bool outgoing = false;
  bool connecting = false;  // outgoing: the connect has not completed yet
  int peer = -1;            // incoming: known once the hello is in
  int index = 0;
  int step = 0;      // the message being moved: 0 hello, 1 challenge, 2 proof
  size_t moved = 0;  // bytes of it moved so far
  PairHello hello{};
  PairChallenge challenge{};
  PairProof proof{};
  Deadline deadline{};           // incoming: a silent client is dropped then
  Clock::time_point retry_at{};  // outgoing, refused: when to connect again
  int retry_delay_ms = 1;
};

constexpr int kHandshakeSteps = 3;

bool SendsStep(const Handshake& h) {
  return (h.step == 1) != h.outgoing;
}

uint8_t* StepData(Handshake* h, size_t* len) {
  switch (h->step) {
    case 0:
      *len = sizeof(h->hello);
      return reinterpret_cast<uint8_t*>(&h->hello);
    case 1:
      *len = sizeof(h->challenge);
      return reinterpret_cast<uint8_t*>(&h->challenge);
    default:
      *len = sizeof(h->proof);
      return reinterpret_cast<uint8_t*>(&h->proof);
  }
}

// Starts (or restarts) the connect of an outgoing handshake.
Status StartConnect(const SockAddr& addr, Handshake* h) {
  h->fd.reset(socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!h->fd.valid()) return ErrnoError("socket", errno);
  h->step = 0;
  h->moved = 0;
  h->connecting = connect(h->fd.get(), addr.sa(), addr.len) != 0;
  if (h->connecting && errno != EINPROGRESS) {
    const int err = errno;
    h->fd.reset();
    errno = err;
  }
  return Status::Ok();
}

// Refused or unreachable: the peer may not listen yet, so connect again.
bool RetryableConnectError(int err) {
  return err == ECONNREFUSED || err == ETIMEDOUT || err == EHOSTUNREACH || err == ENETUNREACH ||
         err == EAGAIN || err == ECONNRESET;
}

// After a connect that failed with `err`: a retry later (backing off from
// 1 to 100 ms), or the error when retrying cannot help.
Status RetryConnectLater(const SockAddr& addr, int err, Clock::time_point now, Handshake* h) {
  if (!RetryableConnectError(err)) return ErrnoError("connect " + addr.ToString(), err);
  h->fd.reset();
  h->retry_at = now + std::chrono::milliseconds(h->retry_delay_ms);
  h->retry_delay_ms = std::min(h->retry_delay_ms * 2, 100);
  return Status::Ok();
}

// The whole mesh of one rank as one event loop: its own connects and the
// accepts of higher ranks' connects progress together, so no rank waits for
// another to finish its connects before it is answered.
class MeshBuilder {
 public:
  MeshBuilder(const UniqueIdData& id, int rank, int listen_fd, const std::vector<PeerInfo>& peers,
              Deadline deadline, std::vector<std::vector<Fd>>* sockets)
      : id_(id),
        rank_(rank),
        nranks_(static_cast<int>(peers.size())),
        listen_fd_(listen_fd),
        peers_(peers),
        deadline_(deadline),
        sockets_(sockets) {}

  Status Run();

 private:
  // Moves what the socket allows; true when the handshake is complete.
  // An error on an outgoing handshake fails the mesh; on an incoming one
  // it drops the connection.
  Status Progress(Handshake* h, bool* complete);
  // Checks the message just moved and prepares the next one.
  Status StepDone(Handshake* h);
  Status Finish(Handshake* h);
  void AcceptAll();
  std::string Who(const Handshake& h) const { return "rank " + std::to_string(h.peer); }

  const UniqueIdData& id_;
  const int rank_, nranks_, listen_fd_;
  const std::vector<PeerInfo>& peers_;
  const Deadline deadline_;
  std::vector<std::vector<Fd>>* sockets_;
  std::vector<Handshake> queued_;  // outgoing, not started yet (taken from the back)
  std::vector<Handshake> active_;
  int missing_in_ = 0, missing_out_ = 0, connects_in_flight_ = 0;
};

Status MeshBuilder::StepDone(Handshake* h) {
  if (h->outgoing) {
    if (h->step == 1) {
      if (!PairChallengeValid(id_, h->hello, h->challenge))
        return RemoteError("the listener at " + FromWire(peers_[h->peer].listen_addr).ToString() +
                           " could not prove the job's secret: it is not " + Who(*h) +
                           " of this communicator");
      h->proof = MakePairProof(id_, h->hello, h->challenge);
    }
    return Status::Ok();
  }
  if (h->step == 0) {
    BATON_RETURN_IF_ERROR(CheckPairHello(id_, h->hello, rank_, nranks_));
    h->peer = h->hello.from_rank;
    h->index = h->hello.index;
    if (h->index < 0 || h->index >= static_cast<int>((*sockets_)[h->peer].size()) ||
        (*sockets_)[h->peer][h->index].valid())
      return InvalidUsage("unexpected socket index " + std::to_string(h->index));
    // A hello of this communicator: a rank, perhaps slowed by an
    // oversubscribed host. Dropping it now would leave it holding a socket
    // this rank then waits for until BATON_TIMEOUT, so it gets the whole
    // creation's deadline, as the connects do.
    h->deadline = deadline_;
    return MakePairChallenge(id_, h->hello, &h->challenge);
  }
  if (h->step == 2 && !PairProofValid(id_, h->hello, h->challenge, h->proof))
    return InvalidUsage("no proof of the job's secret");
  return Status::Ok();
}

Status MeshBuilder::Progress(Handshake* h, bool* complete) {
  *complete = false;
  if (h->connecting) {
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(h->fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0)
      return RetryConnectLater(FromWire(peers_[h->peer].listen_addr), err, Clock::now(), h);
    h->connecting = false;
  }
  while (h->step < kHandshakeSteps) {
    size_t len = 0;
    uint8_t* data = StepData(h, &len);
    const ssize_t n =
        SendsStep(*h)
            ? ::send(h->fd.get(), data + h->moved, len - h->moved, MSG_NOSIGNAL | MSG_DONTWAIT)
            : ::recv(h->fd.get(), data + h->moved, len - h->moved, MSG_DONTWAIT);
    if (n == 0 && !SendsStep(*h))
      return h->outgoing ? RemoteError(Who(*h) + " refused the handshake")
                         : RemoteError("connection closed during the handshake");
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::Ok();
      return ErrnoError(SendsStep(*h) ? "send" : "recv", errno)
          .WithContext(h->outgoing ? "handshake with " + Who(*h) : "handshake");
    }
    h->moved += static_cast<size_t>(n);
    if (h->moved < len) continue;
    BATON_RETURN_IF_ERROR(StepDone(h));
    ++h->step;
    h->moved = 0;
  }
  *complete = true;
  return Status::Ok();
}

Status MeshBuilder::Finish(Handshake* h) {
  Fd& slot = (*sockets_)[h->peer][h->index];
  // Two connections claiming the same socket: only a foreign client can do
  // that, and the one that proved the secret first keeps it.
  if (slot.valid()) return InvalidUsage("unexpected socket index " + std::to_string(h->index));
  BATON_RETURN_IF_ERROR(SetNonBlocking(h->fd.get(), false));
  SetNoDelay(h->fd.get());
  slot = std::move(h->fd);
  if (h->outgoing) {
    --missing_out_;
    --connects_in_flight_;
  } else {
    --missing_in_;
  }
  return Status::Ok();
}

void MeshBuilder::AcceptAll() {
  for (;;) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;  // EAGAIN, or a connection that went away
    if (active_.size() - static_cast<size_t>(connects_in_flight_) >= kMaxAcceptsInFlight) {
      close(fd);
      continue;
    }
    Handshake h;
    h.fd.reset(fd);
    // A short deadline per connection: a silent foreign client must not
    // stall the real ones.
    h.deadline = std::min(deadline_, DeadlineIn(5));
    active_.push_back(std::move(h));
  }
}

Status MeshBuilder::Run() {
  // Outgoing sockets, nearest lower rank first (taken from the back), so
  // that the ranks' first connects spread over the listeners.
  for (int peer = 0; peer < rank_; ++peer) {
    for (size_t index = (*sockets_)[peer].size(); index-- > 0;) {
      Handshake h;
      h.outgoing = true;
      h.peer = peer;
      h.index = static_cast<int>(index);
      BATON_RETURN_IF_ERROR(MakePairHello(id_, rank_, peer, h.index, &h.hello));
      queued_.push_back(std::move(h));
    }
  }
  missing_out_ = static_cast<int>(queued_.size());
  for (int p = rank_ + 1; p < nranks_; ++p) missing_in_ += static_cast<int>((*sockets_)[p].size());
  if (missing_in_ > 0) BATON_RETURN_IF_ERROR(SetNonBlocking(listen_fd_, true));

  std::vector<pollfd> fds;
  std::vector<size_t> which;  // fds[i + 1] belongs to active_[which[i]]
  Status result;
  while (missing_in_ > 0 || missing_out_ > 0) {
    while (connects_in_flight_ < kMaxConnectsInFlight && !queued_.empty()) {
      active_.push_back(std::move(queued_.back()));
      queued_.pop_back();
      ++connects_in_flight_;
    }
    const auto now = Clock::now();
    if (now >= deadline_) {
      result = TimeoutError("timed out making connections: " + std::to_string(missing_out_) +
                            " to lower ranks and " + std::to_string(missing_in_) +
                            " from higher ranks missing");
      break;
    }
    if (WaitsCancelled()) {
      result = InvalidUsage("the communicator was aborted while it was being created");
      break;
    }
    int timeout_ms = std::min(MillisLeft(deadline_), kCancelSliceMs);
    fds.clear();
    which.clear();
    fds.push_back({listen_fd_, static_cast<short>(missing_in_ > 0 ? POLLIN : 0), 0});
    for (size_t i = 0; i < active_.size(); ++i) {
      Handshake& h = active_[i];
      if (h.outgoing && !h.fd.valid()) {  // waiting to connect (again)
        if (h.retry_at <= now) {
          const SockAddr addr = FromWire(peers_[h.peer].listen_addr);
          BATON_RETURN_IF_ERROR(StartConnect(addr, &h));
          if (!h.fd.valid()) BATON_RETURN_IF_ERROR(RetryConnectLater(addr, errno, now, &h));
        }
        if (!h.fd.valid()) {
          timeout_ms = std::min<int>(
              timeout_ms, std::chrono::ceil<std::chrono::milliseconds>(h.retry_at - now).count());
          continue;
        }
      }
      if (!h.outgoing) {
        timeout_ms = std::min(timeout_ms, MillisLeft(h.deadline));
      }
      const short events = h.connecting || SendsStep(h) ? POLLOUT : POLLIN;
      fds.push_back({h.fd.get(), events, 0});
      which.push_back(i);
    }
    const int n = poll(fds.data(), fds.size(), std::max(timeout_ms, 0));
    if (n < 0 && errno != EINTR) return ErrnoError("poll", errno);
    std::vector<uint8_t> drop(active_.size(), 0);
    for (size_t k = 0; k < which.size(); ++k) {
      Handshake& h = active_[which[k]];
      bool complete = false;
      Status st;
      if (fds[k + 1].revents != 0) st = Progress(&h, &complete);
      // A silent (or dribbling) client is dropped at its deadline.
      if (st.ok() && !complete && !h.outgoing && Clock::now() >= h.deadline) {
        BATON_INFO(kLogBootstrap, "dropped a connection that sent no hello of this communicator");
        drop[which[k]] = 1;
        continue;
      }
      if (st.ok() && complete) st = Finish(&h);
      if (!st.ok()) {
        if (h.outgoing) return st.WithContext("connecting to " + Who(h));
        BATON_INFO(kLogBootstrap, "dropped a malformed or foreign connection: %s",
                   st.message().c_str());
        drop[which[k]] = 1;
      } else if (complete) {
        drop[which[k]] = 1;
      }
    }
    size_t kept = 0;
    for (size_t i = 0; i < active_.size(); ++i)
      if (!drop[i]) {
        if (kept != i) active_[kept] = std::move(active_[i]);
        ++kept;
      }
    active_.resize(kept);
    if (fds[0].revents & POLLIN) AcceptAll();
  }
  return result;
}

}  // namespace

Status ConnectMesh(const UniqueIdData& id, int rank, int listen_fd,
                   const std::vector<PeerInfo>& peers, const std::vector<int>& sockets_per_peer,
                   Deadline deadline, std::vector<std::vector<Fd>>* sockets) {
  const int nranks = static_cast<int>(peers.size());
  sockets->clear();
  sockets->resize(nranks);
  for (int p = 0; p < nranks; ++p)
    if (p != rank) (*sockets)[p].resize(std::max(1, sockets_per_peer[p]));
  MeshBuilder builder(id, rank, listen_fd, peers, deadline, sockets);
  return builder.Run();
}

Status ExchangeWithPeers(const std::vector<std::vector<Fd>>& sockets, const std::vector<int>& peers,
                         const void* send, std::vector<std::vector<uint8_t>>* recv, size_t len,
                         Deadline deadline) {
  for (int p : peers)
    BATON_RETURN_IF_ERROR(SendAll(sockets[p][0].get(), send, len, deadline)
                              .WithContext("set-up exchange with rank " + std::to_string(p)));
  recv->assign(peers.size(), std::vector<uint8_t>(len));
  for (size_t i = 0; i < peers.size(); ++i)
    BATON_RETURN_IF_ERROR(
        RecvAll(sockets[peers[i]][0].get(), (*recv)[i].data(), len, deadline)
            .WithContext("set-up exchange with rank " + std::to_string(peers[i])));
  return Status::Ok();
}

}  // namespace baton
