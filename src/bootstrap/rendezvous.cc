// The rendezvous: a server thread in the process that made the unique id
// (or in rank 0, for BATON_ROOT jobs) collects every rank's PeerInfo and
// answers everybody with the full table. See rendezvous.h.
#include "bootstrap/rendezvous.h"

#include <poll.h>
#include <pthread.h>
#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <thread>

#include "base/log.h"
#include "bootstrap/handshake.h"

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

// A client of the server that has not finished sending its hello.
struct PendingClient {
  Fd fd;
  ClientHello hello{};
  size_t got = 0;
};

void SendReply(const PendingClient& client, const UniqueIdData& id, int32_t status,
               const std::string& message, const Mac& table_digest, Deadline deadline,
               const std::vector<PeerInfo>* table) {
  const ServerReply reply = MakeServerReply(id, client.hello.nonce, status, message, table_digest);
  Status st = SendAll(client.fd.get(), &reply, sizeof(reply), deadline);
  if (st.ok() && table)
    st = SendAll(client.fd.get(), table->data(), table->size() * sizeof(PeerInfo), deadline);
  if (!st.ok()) BATON_WARN(kLogBootstrap, "rendezvous: reply failed: %s", st.message().c_str());
}

// The server loop: accepts clients, drops foreign or malformed ones, and
// answers everyone with the full table once all ranks are in.
void ServeRendezvous(std::shared_ptr<ServerState> state) {
  Deadline deadline = DeadlineIn(state->timeout_s);
  std::vector<PendingClient> pending;
  std::vector<PendingClient> joined_clients;
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
      // Check the magic as soon as it is in, so a foreign client is
      // dropped without waiting for the rest.
      if (!drop && c.got >= kClientHelloMagicBytes && !ClientHelloStartValid(c.hello)) drop = true;
      if (!drop && c.got == sizeof(c.hello)) {
        const ClientHello& h = c.hello;
        const Status valid = CheckClientHello(state->id, h);
        if (!valid.ok()) {
          BATON_INFO(kLogBootstrap, "rendezvous: dropped a connection: %s",
                     valid.message().c_str());
          drop = true;
        } else if (nranks >= 0 && h.nranks != nranks) {
          failure = "ranks disagree on the communicator size (" + std::to_string(nranks) + " and " +
                    std::to_string(h.nranks) + ")";
          joined_clients.push_back(std::move(c));
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
          joined_clients.push_back(std::move(c));
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
  const Deadline reply_deadline = DeadlineIn(std::min(state->timeout_s, 30.0));
  const Mac digest = TableDigest(failure.empty() ? table : std::vector<PeerInfo>{});
  for (const auto& client : joined_clients) {
    if (failure.empty()) {
      SendReply(client, state->id, 0, "", digest, reply_deadline, &table);
    } else {
      SendReply(client, state->id, batonRemoteError, failure, digest, reply_deadline, nullptr);
    }
  }
  if (!failure.empty()) BATON_WARN(kLogBootstrap, "rendezvous failed: %s", failure.c_str());
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
  SockAddr root = FromWire(id.root);
  Fd fd;
  BATON_RETURN_IF_ERROR(ConnectWithRetry(root, deadline, &fd).WithContext("rendezvous"));
  ClientHello hello;
  BATON_RETURN_IF_ERROR(MakeClientHello(id, nranks, rank, mine, &hello));
  BATON_RETURN_IF_ERROR(
      SendAll(fd.get(), &hello, sizeof(hello), deadline).WithContext("rendezvous"));
  ServerReply reply;
  Status st = RecvAll(fd.get(), &reply, sizeof(reply), deadline);
  if (st.code() == batonTimeout)
    return TimeoutError("rendezvous at " + root.ToString() +
                        " timed out waiting for all ranks to join (BATON_TIMEOUT)");
  BATON_RETURN_IF_ERROR(st.WithContext("rendezvous at " + root.ToString()));
  if (reply.status != 0) return CheckServerReply(id, hello, reply, nullptr);
  all->resize(nranks);
  BATON_RETURN_IF_ERROR(RecvAll(fd.get(), all->data(), nranks * sizeof(PeerInfo), deadline)
                            .WithContext("rendezvous"));
  return CheckServerReply(id, hello, reply, all);
}

}  // namespace baton
