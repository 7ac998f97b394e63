#include "bootstrap/bootstrap.h"

#include <poll.h>
#include <pthread.h>
#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>

#include "core/env.h"
#include "core/log.h"

namespace baton {
namespace {

constexpr uint32_t kHelloMagic = 0x4f4c4548;  // "HELO"
constexpr uint32_t kPairMagic = 0x52494150;   // "PAIR"
constexpr uint32_t kProtocolVersion = 1;
constexpr int kMaxRanks = 1 << 16;

// First message of a rank to the rendezvous server.
struct ClientHello {
  uint32_t magic;
  uint32_t version;
  uint8_t secret[kSecretBytes];
  uint64_t comm_id;
  int32_t nranks;
  int32_t rank;
  PeerInfo info;
};

// The server's answer; `nranks` PeerInfo records follow when status == 0.
struct ServerReply {
  uint32_t magic;
  int32_t status;
  char message[120];
};

// First message on a mesh socket, proving the secret.
struct PairHello {
  uint32_t magic;
  uint32_t version;
  uint8_t secret[kSecretBytes];
  uint64_t comm_id;
  int32_t from_rank;
  int32_t to_rank;
  int32_t index;  // which of the pair's sockets
};

// A rendezvous being served in this process. The registry lets a forked
// child drop servers whose thread exists only in its parent.
struct ServerState {
  Fd listener;
  UniqueIdData id{};
  double timeout_s = 0;
  pid_t owner = 0;
};

std::mutex g_servers_mu;
std::vector<std::shared_ptr<ServerState>> g_servers;

void AtForkPrepare() {
  g_servers_mu.lock();
}
void AtForkParent() {
  g_servers_mu.unlock();
}
void AtForkChild() {
  // The serving threads did not survive the fork: close the child's copies
  // of their listeners (the parent keeps serving) and forget them.
  // (Memory is the child's own copy, so releasing it cannot disturb the
  // parent's threads.)
  for (auto& s : g_servers) s->listener.reset();
  g_servers.clear();
  g_servers_mu.unlock();
}

void RegisterServer(const std::shared_ptr<ServerState>& s) {
  static std::once_flag once;
  std::call_once(once, [] { pthread_atfork(AtForkPrepare, AtForkParent, AtForkChild); });
  std::lock_guard<std::mutex> lock(g_servers_mu);
  g_servers.push_back(s);
}

void UnregisterServer(const ServerState* s) {
  std::lock_guard<std::mutex> lock(g_servers_mu);
  for (auto it = g_servers.begin(); it != g_servers.end(); ++it) {
    if (it->get() == s) {
      g_servers.erase(it);
      return;
    }
  }
}

// A client of the server that has not finished sending its hello.
struct PendingClient {
  Fd fd;
  ClientHello hello{};
  size_t got = 0;
};

void SendReply(int fd, int32_t status, const std::string& message, Deadline deadline,
               const std::vector<PeerInfo>* table) {
  ServerReply reply{};
  reply.magic = kHelloMagic;
  reply.status = status;
  snprintf(reply.message, sizeof(reply.message), "%s", message.c_str());
  Status st = SendAll(fd, &reply, sizeof(reply), deadline);
  if (st.ok() && table) st = SendAll(fd, table->data(), table->size() * sizeof(PeerInfo), deadline);
  if (!st.ok()) BATON_WARN(kLogBootstrap, "rendezvous: reply failed: %s", st.message().c_str());
}

// The server loop: accepts clients, drops foreign or malformed ones, and
// answers everyone with the full table once all ranks are in.
void ServeRendezvous(std::shared_ptr<ServerState> state) {
  Deadline deadline = DeadlineIn(state->timeout_s);
  std::vector<PendingClient> pending;
  std::vector<Fd> joined_fds;
  std::vector<PeerInfo> table;
  std::vector<bool> have;
  int nranks = -1, joined = 0;
  std::string failure;

  while (failure.empty() && (nranks < 0 || joined < nranks)) {
    std::vector<pollfd> fds;
    fds.push_back({state->listener.get(), POLLIN, 0});
    for (auto& c : pending) fds.push_back({c.fd.get(), POLLIN, 0});
    int n = poll(fds.data(), fds.size(), std::min(MillisLeft(deadline), 1000));
    if (n < 0 && errno != EINTR) {
      failure = std::string("poll: ") + strerror(errno);
      break;
    }
    if (Clock::now() >= deadline) {
      failure = "rendezvous timed out with " + std::to_string(joined) + " of " +
                (nranks < 0 ? std::string("?") : std::to_string(nranks)) + " ranks joined";
      break;
    }
    if (n <= 0) continue;
    // Read from pending clients first (indices stay valid), then accept.
    for (size_t i = pending.size(); i-- > 0;) {
      if (!(fds[i + 1].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      PendingClient& c = pending[i];
      ssize_t r = recv(c.fd.get(), reinterpret_cast<char*>(&c.hello) + c.got,
                       sizeof(c.hello) - c.got, MSG_DONTWAIT);
      bool drop = r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR);
      if (r > 0) c.got += r;
      // Check the magic and secret as soon as they are in, so a foreign
      // client is dropped without waiting for the rest.
      constexpr size_t kAuthBytes = offsetof(ClientHello, comm_id);
      if (!drop && c.got >= kAuthBytes &&
          (c.hello.magic != kHelloMagic || c.hello.version != kProtocolVersion ||
           !SecretsEqual(c.hello.secret, state->id.secret, kSecretBytes)))
        drop = true;
      if (!drop && c.got == sizeof(c.hello)) {
        const ClientHello& h = c.hello;
        if (h.comm_id != state->id.comm_id || h.nranks < 1 || h.nranks > kMaxRanks || h.rank < 0 ||
            h.rank >= h.nranks) {
          drop = true;
        } else if (nranks >= 0 && h.nranks != nranks) {
          failure = "ranks disagree on the communicator size (" + std::to_string(nranks) + " and " +
                    std::to_string(h.nranks) + ")";
          joined_fds.push_back(std::move(c.fd));
          pending.erase(pending.begin() + i);
          continue;
        } else {
          if (nranks < 0) {
            nranks = h.nranks;
            table.resize(nranks);
            have.assign(nranks, false);
          }
          if (have[h.rank]) {
            failure = "rank " + std::to_string(h.rank) + " joined twice";
          } else {
            have[h.rank] = true;
            table[h.rank] = h.info;
            table[h.rank].rank = h.rank;
            ++joined;
          }
          joined_fds.push_back(std::move(c.fd));
          pending.erase(pending.begin() + i);
          continue;
        }
      }
      if (drop) {
        BATON_INFO(kLogBootstrap, "rendezvous: dropped a malformed or foreign connection");
        pending.erase(pending.begin() + i);
      }
    }
    if (fds[0].revents & POLLIN) {
      int fd = accept4(state->listener.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd >= 0) {
        if (pending.size() < 4096) {
          pending.push_back(PendingClient{Fd(fd)});
        } else {
          close(fd);
        }
      }
    }
  }
  Deadline reply_deadline = DeadlineIn(std::min(state->timeout_s, 30.0));
  for (auto& fd : joined_fds) {
    SetNonBlocking(fd.get(), false).ok();
    if (failure.empty()) {
      SendReply(fd.get(), 0, "", reply_deadline, &table);
    } else {
      SendReply(fd.get(), batonRemoteError, failure, reply_deadline, nullptr);
    }
  }
  if (!failure.empty()) BATON_WARN(kLogBootstrap, "rendezvous failed: %s", failure.c_str());
  UnregisterServer(state.get());
}

}  // namespace

Status DecodeUniqueId(const batonUniqueId& id, UniqueIdData* out) {
  memcpy(out, id.internal, sizeof(*out));
  if (out->magic != kUniqueIdMagic || out->version != kProtocolVersion)
    return InvalidArgument("not a unique id made by batonGetUniqueId of this Baton version");
  return Status::Ok();
}

batonUniqueId EncodeUniqueId(const UniqueIdData& data) {
  batonUniqueId id;
  memset(&id, 0, sizeof(id));
  memcpy(id.internal, &data, sizeof(data));
  return id;
}

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

Status CreateUniqueId(batonUniqueId* out) {
  UniqueIdData data{};
  data.magic = kUniqueIdMagic;
  data.version = kProtocolVersion;
  if (getrandom(data.secret, sizeof(data.secret), 0) != sizeof(data.secret) ||
      getrandom(&data.comm_id, sizeof(data.comm_id), 0) != sizeof(data.comm_id))
    return ErrnoError("getrandom", errno);
  SockAddr addr, bound;
  std::string ifname;
  BATON_RETURN_IF_ERROR(SelectInterfaceAddress(&addr, &ifname));
  Fd listener;
  BATON_RETURN_IF_ERROR(ListenOn(addr, &listener, &bound));
  data.root = ToWire(bound);
  BATON_RETURN_IF_ERROR(
      StartRendezvousServer(std::move(listener), data, (double)GetEnvInt("BATON_TIMEOUT", 300)));
  BATON_INFO(kLogBootstrap, "unique id: rendezvous at %s", bound.toString().c_str());
  *out = EncodeUniqueId(data);
  return Status::Ok();
}

Status Rendezvous(const UniqueIdData& id, int nranks, int rank, const PeerInfo& mine,
                  Deadline deadline, std::vector<PeerInfo>* all) {
  SockAddr root = FromWire(id.root);
  Fd fd;
  BATON_RETURN_IF_ERROR(ConnectWithRetry(root, deadline, &fd).withContext("rendezvous"));
  ClientHello hello{};
  hello.magic = kHelloMagic;
  hello.version = kProtocolVersion;
  memcpy(hello.secret, id.secret, kSecretBytes);
  hello.comm_id = id.comm_id;
  hello.nranks = nranks;
  hello.rank = rank;
  hello.info = mine;
  BATON_RETURN_IF_ERROR(
      SendAll(fd.get(), &hello, sizeof(hello), deadline).withContext("rendezvous"));
  ServerReply reply{};
  Status st = RecvAll(fd.get(), &reply, sizeof(reply), deadline);
  if (st.code() == batonTimeout)
    return TimeoutError("rendezvous at " + root.toString() +
                        " timed out waiting for all ranks to join (BATON_TIMEOUT)");
  BATON_RETURN_IF_ERROR(st.withContext("rendezvous at " + root.toString()));
  if (reply.magic != kHelloMagic) return RemoteError("rendezvous: malformed reply");
  if (reply.status != 0) {
    reply.message[sizeof(reply.message) - 1] = '\0';
    return RemoteError(std::string("rendezvous failed: ") + reply.message);
  }
  all->resize(nranks);
  return RecvAll(fd.get(), all->data(), nranks * sizeof(PeerInfo), deadline)
      .withContext("rendezvous");
}

Status ConnectMesh(const UniqueIdData& id, int rank, int listen_fd,
                   const std::vector<PeerInfo>& peers, const std::vector<int>& sockets_per_peer,
                   Deadline deadline, std::vector<std::vector<Fd>>* sockets) {
  const int nranks = static_cast<int>(peers.size());
  sockets->clear();
  sockets->resize(nranks);
  for (int p = 0; p < nranks; ++p)
    if (p != rank) (*sockets)[p].resize(std::max(1, sockets_per_peer[p]));
  // Connect to lower ranks in order. Connects complete in the kernel's
  // backlog even before the peer accepts, and each lower rank reaches its
  // accept phase after its own connects, so this cannot deadlock.
  for (int peer = 0; peer < rank; ++peer) {
    for (size_t index = 0; index < (*sockets)[peer].size(); ++index) {
      Fd fd;
      BATON_RETURN_IF_ERROR(ConnectWithRetry(FromWire(peers[peer].listen_addr), deadline, &fd)
                                .withContext("connecting to rank " + std::to_string(peer)));
      PairHello hello{kPairMagic, kProtocolVersion,           {}, id.comm_id, rank,
                      peer,       static_cast<int32_t>(index)};
      memcpy(hello.secret, id.secret, kSecretBytes);
      BATON_RETURN_IF_ERROR(SendAll(fd.get(), &hello, sizeof(hello), deadline));
      uint8_t ack = 0;
      BATON_RETURN_IF_ERROR(RecvAll(fd.get(), &ack, 1, deadline)
                                .withContext("handshake with rank " + std::to_string(peer)));
      if (ack != 1) return RemoteError("rank " + std::to_string(peer) + " refused the handshake");
      (*sockets)[peer][index] = std::move(fd);
    }
  }
  int missing = 0;
  for (int p = rank + 1; p < nranks; ++p) missing += static_cast<int>((*sockets)[p].size());
  while (missing > 0) {
    Fd fd;
    Status st = AcceptWithDeadline(listen_fd, deadline, &fd);
    if (st.code() == batonTimeout)
      return TimeoutError("timed out waiting for " + std::to_string(missing) +
                          " connections from higher ranks");
    BATON_RETURN_IF_ERROR(st);
    PairHello hello{};
    // A short per-connection deadline: a silent foreign client must not
    // stall the real ones.
    Deadline hello_deadline = std::min(deadline, DeadlineIn(5));
    bool valid = RecvAll(fd.get(), &hello, sizeof(hello), hello_deadline).ok() &&
                 hello.magic == kPairMagic && hello.version == kProtocolVersion &&
                 SecretsEqual(hello.secret, id.secret, kSecretBytes) &&
                 hello.comm_id == id.comm_id && hello.to_rank == rank && hello.from_rank > rank &&
                 hello.from_rank < nranks && hello.index >= 0 &&
                 hello.index < static_cast<int>((*sockets)[hello.from_rank].size()) &&
                 !(*sockets)[hello.from_rank][hello.index].valid();
    if (!valid) {
      BATON_INFO(kLogBootstrap, "dropped a malformed or foreign connection");
      continue;
    }
    uint8_t ack = 1;
    BATON_RETURN_IF_ERROR(SendAll(fd.get(), &ack, 1, deadline));
    (*sockets)[hello.from_rank][hello.index] = std::move(fd);
    --missing;
  }
  return Status::Ok();
}

Status ExchangeWithPeers(const std::vector<std::vector<Fd>>& sockets, const std::vector<int>& peers,
                         const void* send, std::vector<std::vector<uint8_t>>* recv, size_t len,
                         Deadline deadline) {
  for (int p : peers)
    BATON_RETURN_IF_ERROR(SendAll(sockets[p][0].get(), send, len, deadline)
                              .withContext("set-up exchange with rank " + std::to_string(p)));
  recv->assign(peers.size(), std::vector<uint8_t>(len));
  for (size_t i = 0; i < peers.size(); ++i)
    BATON_RETURN_IF_ERROR(
        RecvAll(sockets[peers[i]][0].get(), (*recv)[i].data(), len, deadline)
            .withContext("set-up exchange with rank " + std::to_string(peers[i])));
  return Status::Ok();
}

}  // namespace baton
