// ChannelSet's connections made on first use (BATON_RUNTIME_CONNECT=1,
// docs/scaling.md): a caller's Connect dials the peers it lacks, and the
// acceptor thread answers the peers that dial this rank, whatever call this
// rank is in. Both run the mesh's authenticated handshake (hello,
// challenge, proof) and then one verdict byte from the acceptor, which
// settles the race when both ranks of a pair dial each other at once: the
// lower rank's connection is kept, and the higher rank, told no, waits for
// it to arrive at its own acceptor.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "base/log.h"
#include "base/shm_names.h"
#include "bootstrap/handshake.h"
#include "transport/channel_set.h"
#include "transport/shm.h"
#include "transport/tcp.h"

namespace baton {

namespace {

constexpr uint8_t kReject = 0, kAccept = 1;
// An accepted connection that sends no hello by then is dropped: a rank
// dialling us sends it at once. A hello of this communicator then gets
// BATON_TIMEOUT, as in the mesh: an oversubscribed rank may be slow.
constexpr double kAcceptHelloSeconds = 5;
// A handshake that broke off (the peer dropped a connection it took for
// silent) is dialled again this many times; a refusal is not.
constexpr int kDialAttempts = 4;

// One non-blocking connect, waited for until `deadline`. Unlike the mesh, a
// refusal is not retried: every rank listens from before the rendezvous
// until its communicator is destroyed, so a refusal means the peer is gone.
// *refused: the peer's host answered that nothing listens there.
Status Dial(const SockAddr& addr, Deadline deadline, Fd* out, bool* refused) {
  *refused = false;
  Fd fd(socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return ErrnoError("socket", errno);
  if (connect(fd.get(), addr.sa(), addr.len) != 0) {
    if (errno != EINPROGRESS) {
      *refused = errno == ECONNREFUSED;
      return ErrnoError("connect", errno);
    }
    for (;;) {
      if (Clock::now() >= deadline) return TimeoutError("connect timed out");
      pollfd pfd{fd.get(), POLLOUT, 0};
      const int n = poll(&pfd, 1, std::min(MillisLeft(deadline), kCancelSliceMs));
      if (n < 0 && errno != EINTR) return ErrnoError("poll", errno);
      if (n > 0) break;
      if (WaitsCancelled()) return InvalidUsage("the communicator was aborted");
    }
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    *refused = err == ECONNREFUSED;
    if (err != 0) return ErrnoError("connect", err);
  }
  BATON_RETURN_IF_ERROR(SetNonBlocking(fd.get(), false));
  SetNoDelay(fd.get());
  *out = std::move(fd);
  return Status::Ok();
}

}  // namespace

std::string ChannelSet::PeerName(int peer) const {
  const PeerInfo& p = peers_[peer];
  return "rank " + std::to_string(peer) + " (pid " + std::to_string(p.pid) + " on " +
         std::string(p.hostname, strnlen(p.hostname, sizeof(p.hostname))) + ")";
}

Status ChannelSet::ConnectAll(Deadline deadline) {
  std::vector<int> all;
  for (int p = 0; p < nranks_; ++p)
    if (p != rank_ && !connected(p)) all.push_back(p);
  return Connect(all, deadline);
}

Status ChannelSet::Connect(const std::vector<int>& peers, Deadline deadline) {
  int made = 0;
  Status st;
  for (int p : peers) {
    if (p < 0 || p >= nranks_ || p == rank_ || connected(p)) continue;
    if (!lazy_) return InternalError("no channel to rank " + std::to_string(p));
    st = ConnectOne(p, deadline);
    if (!st.ok()) break;
    ++made;
  }
  if (made == 0 && st.ok()) return st;  // every peer was connected: nothing dialled
  // The calling thread may be a host stream's, which lives on.
  ReleaseThreadCryptoState();
  if (made > 0) ReportHeld("after connecting on first use");
  return st;
}

Status ChannelSet::ConnectOne(int peer, Deadline deadline) {
  bool dial = false;
  {
    std::lock_guard<std::mutex> lock(connect_mu_);
    if (pair_[peer] == Pair::kConnected) return Status::Ok();
    if (pair_[peer] == Pair::kNone) pair_[peer] = Pair::kOutgoing;
    dial = pair_[peer] == Pair::kOutgoing;
  }
  const std::string who = PeerName(peer);
  bool rejected = false;
  Status st;
  if (dial) {
    const int k = SocketsBetween(peers_[rank_], peers_[peer]);
    const SockAddr addr = FromWire(peers_[peer].listen_addr);
    std::vector<Fd> sockets(k);
    int attempts = 0;
    for (int index = 0; index < k && st.ok() && !rejected; ++index) {
      Fd& fd = sockets[index];
      bool refused = false;
      st = Dial(addr, deadline, &fd, &refused);
      if (!st.ok()) {
        if (refused) MarkFailed({peer});
        st = RemoteError("cannot connect to " + who + " at " + addr.ToString() + ": " +
                         st.message() + " (it has exited or destroyed its communicator)");
        break;
      }
      PairHello hello;
      PairChallenge challenge;
      uint8_t verdict = kReject;
      st = MakePairHello(id_, rank_, peer, index, &hello);
      if (st.ok()) st = SendAll(fd.get(), &hello, sizeof(hello), deadline);
      if (st.ok()) st = RecvAll(fd.get(), &challenge, sizeof(challenge), deadline);
      if (st.ok() && !PairChallengeValid(id_, hello, challenge))
        st = RemoteError("the listener at " + addr.ToString() +
                         " could not prove the job's secret: it is not " + who);
      if (st.ok()) {
        const PairProof proof = MakePairProof(id_, hello, challenge);
        st = SendAll(fd.get(), &proof, sizeof(proof), deadline);
      }
      if (st.ok()) st = RecvAll(fd.get(), &verdict, 1, deadline);
      const bool broke_off =
          st.code() == batonSystemError ||
          (st.code() == batonRemoteError && st.message().find("closed") != std::string::npos);
      if (!st.ok() && broke_off && ++attempts < kDialAttempts && Clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10 * attempts));
        st = Status::Ok();
        --index;
        continue;
      }
      if (!st.ok()) {
        st = st.WithContext("connecting to " + who);
        break;
      }
      // Told no: the peer (a lower rank) is dialling us, or already did.
      rejected = verdict != kAccept;
    }
    if (st.ok() && !rejected) {
      const int first = sockets[0].get();
      st = FinishPair(peer, first, deadline, std::move(sockets));
    }
    if (st.ok() && !rejected) return Status::Ok();
    if (!st.ok()) {
      // The peer's connection to us may have arrived meanwhile (the peer
      // dialled us first, then finished and left): that one stands.
      std::lock_guard<std::mutex> lock(connect_mu_);
      if (pair_[peer] == Pair::kOutgoing) pair_[peer] = Pair::kNone;
      connect_cv_.notify_all();
      if (pair_[peer] == Pair::kNone) return st;
    }
  }
  // The peer's own connection to us is on its way (or being accepted).
  std::unique_lock<std::mutex> lock(connect_mu_);
  while (pair_[peer] != Pair::kConnected) {
    if (Clock::now() >= deadline)
      return TimeoutError("timed out waiting for the connection of " + who +
                          " (it dialled this rank first, and did not finish)");
    if (peer_closed(peer) || aborted() || WaitsCancelled())
      return RemoteError("the connection of " + who + " did not complete: aborted");
    connect_cv_.wait_until(lock, std::min(deadline, Clock::now() + std::chrono::milliseconds(100)));
  }
  return Status::Ok();
}

Status ChannelSet::FinishPair(int peer, int fd, Deadline deadline, std::vector<Fd> sockets) {
  const bool shm = SharesMemory(peers_[rank_], peers_[peer]);
  if (shm) {
    // Each side maps the other's segment before it answers, so after the
    // exchange both are mapped.
    std::unique_ptr<ShmSegment> segment;
    BATON_RETURN_IF_ERROR(
        ShmSegment::Open(ShmSegmentName(id_.comm_id, peer, peers_[peer].pid), &segment)
            .WithContext("shared memory of " + PeerName(peer)));
    uint8_t we_read = config_.cma && ProbeCma(peers_[peer].pid, *segment) ? 1 : 0, they_read = 0;
    BATON_RETURN_IF_ERROR(SendAll(fd, &we_read, 1, deadline));
    BATON_RETURN_IF_ERROR(RecvAll(fd, &they_read, 1, deadline));
    BATON_RETURN_IF_ERROR(AddShmPeer(peer, std::move(segment)));
    auto* channel = static_cast<ShmChannel*>(channels_[peer].get());
    channel->EnableCma(they_read != 0 && config_.cma, peers_[peer].pid, config_.cma_threshold);
    // Both sides are here now, within a socket's round trip of each other.
    channel->MeasureAtConnect(rank_ < peer);
  }
  Fd control = std::move(sockets.back());
  sockets.pop_back();
  if (!shm) BATON_RETURN_IF_ERROR(AddTcpPeer(peer, std::move(sockets)));
  BATON_RETURN_IF_ERROR(Publish(peer, std::move(control)));
  std::lock_guard<std::mutex> lock(connect_mu_);
  pair_[peer] = Pair::kConnected;
  // Every local peer has mapped our segment: its name can go, so that a
  // crash from now on leaves nothing behind in /dev/shm.
  if (shm && ++local_connected_ == local_ranks_ - 1) own_segment_->Unlink();
  connect_cv_.notify_all();
  return Status::Ok();
}

void ChannelSet::ProbeUnconnected(Deadline deadline) {
  if (!lazy_) return;  // every pair connected at creation
  std::vector<int> peers;
  {
    std::lock_guard<std::mutex> lock(control_mu_);
    for (int p = 0; p < nranks_; ++p)
      if (p != rank_ && !connected(p) && !failed_.contains(p)) peers.push_back(p);
  }
  // All dials at once, so a dead rank costs one round trip, not one each.
  std::vector<Fd> fds;
  std::vector<pollfd> waits;
  std::vector<int> waiting_for, gone;
  for (int p : peers) {
    const SockAddr addr = FromWire(peers_[p].listen_addr);
    Fd fd(socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd.valid()) continue;
    if (connect(fd.get(), addr.sa(), addr.len) == 0) continue;  // it listens: alive
    if (errno == ECONNREFUSED) {
      gone.push_back(p);
    } else if (errno == EINPROGRESS) {
      waits.push_back({fd.get(), POLLOUT, 0});
      waiting_for.push_back(p);
      fds.push_back(std::move(fd));
    }
  }
  size_t answered = 0;
  while (answered < waits.size() && Clock::now() < deadline) {
    const int n = poll(waits.data(), waits.size(), std::min(MillisLeft(deadline), 100));
    if (n < 0 && errno != EINTR) break;
    for (size_t i = 0; i < waits.size(); ++i) {
      if (waits[i].fd < 0 || waits[i].revents == 0) continue;
      int err = 0;
      socklen_t len = sizeof(err);
      getsockopt(waits[i].fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err == ECONNREFUSED) gone.push_back(waiting_for[i]);
      waits[i].fd = -1;  // poll skips it from now on
      ++answered;
    }
  }
  // The accepted probes close here; the peer's acceptor drops them as
  // connections without a hello.
  if (!gone.empty()) {
    for (int p : gone) BATON_INFO(kLogNet, "rank %d failed: its listener refuses", p);
    MarkFailed(gone);
  }
}

void ChannelSet::AcceptLoop() {
  SetLogRank(rank_);
  while (!stopping_.load()) {
    pollfd fds[2] = {{listener_.get(), POLLIN, 0}, {accept_wake_.get(), POLLIN, 0}};
    const int n = poll(fds, 2, -1);
    if (n < 0 && errno != EINTR) {
      BATON_WARN(kLogNet, "acceptor: poll: %s", strerror(errno));
      return;
    }
    if (n <= 0 || fds[1].revents != 0) continue;
    for (;;) {
      const int fd = accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) break;  // EAGAIN, or a connection that went away
      AcceptOne(Fd(fd));
      ReleaseThreadCryptoState();
      if (stopping_.load()) break;
    }
  }
}

void ChannelSet::AcceptOne(Fd fd) {
  PairHello hello;
  PairChallenge challenge;
  PairProof proof;
  Status st = RecvAll(fd.get(), &hello, sizeof(hello), DeadlineIn(kAcceptHelloSeconds));
  if (st.ok()) st = CheckPairHello(id_, hello, rank_, nranks_, /*any_sender=*/true);
  const Deadline deadline = DeadlineIn(timeout_s_);
  const int from = st.ok() ? hello.from_rank : -1;
  const int k = st.ok() ? SocketsBetween(peers_[rank_], peers_[from]) : 0;
  if (st.ok() && hello.index >= k) st = InvalidUsage("unexpected socket index");
  if (st.ok()) st = MakePairChallenge(id_, hello, &challenge);
  if (st.ok()) st = SendAll(fd.get(), &challenge, sizeof(challenge), deadline);
  if (st.ok()) st = RecvAll(fd.get(), &proof, sizeof(proof), deadline);
  if (st.ok() && !PairProofValid(id_, hello, challenge, proof))
    st = InvalidUsage("no proof of the job's secret");
  if (!st.ok()) {
    BATON_INFO(kLogBootstrap, "dropped a malformed or foreign connection: %s",
               st.message().c_str());
    return;
  }
  const int index = hello.index;
  bool accept = false;
  {
    std::lock_guard<std::mutex> lock(connect_mu_);
    Pair& state = pair_[from];
    if (index == 0) {
      // The rule for a pair dialling each other: the lower rank's wins. A
      // first socket again from a peer whose connection is unfinished: it
      // dials anew after its handshake broke off, so that one starts over
      // (accepted connections finish on this thread, one at a time).
      accept = state == Pair::kNone || state == Pair::kIncoming ||
               (state == Pair::kOutgoing && from < rank_);
      if (accept) {
        state = Pair::kIncoming;
        incoming_[from].clear();
        incoming_[from].resize(k);
      }
    } else {
      accept = state == Pair::kIncoming && static_cast<int>(incoming_[from].size()) == k &&
               !incoming_[from][index].valid();
    }
  }
  const uint8_t verdict = accept ? kAccept : kReject;
  st = SendAll(fd.get(), &verdict, 1, deadline);
  if (!accept) return;
  SetNoDelay(fd.get());
  std::vector<Fd> sockets;
  {
    std::lock_guard<std::mutex> lock(connect_mu_);
    if (st.ok()) {
      incoming_[from][index] = std::move(fd);
      bool complete = true;
      for (const Fd& s : incoming_[from]) complete = complete && s.valid();
      if (!complete) return;
      sockets = std::move(incoming_[from]);
    }
    incoming_[from].clear();
  }
  if (st.ok()) {
    const int first = sockets[0].get();
    st = FinishPair(from, first, deadline, std::move(sockets));
  }
  if (!st.ok()) {
    BATON_WARN(kLogNet, "the connection of %s failed: %s", PeerName(from).c_str(),
               st.message().c_str());
    std::lock_guard<std::mutex> lock(connect_mu_);
    if (pair_[from] == Pair::kIncoming) pair_[from] = Pair::kNone;
    connect_cv_.notify_all();
  }
}

}  // namespace baton
