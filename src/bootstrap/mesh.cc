// The full mesh of authenticated sockets between the ranks; see mesh.h.
#include "bootstrap/mesh.h"

#include <algorithm>
#include <cstring>

#include "base/log.h"

namespace baton {
namespace {

constexpr uint32_t kPairMagic = 0x52494150;  // "PAIR"

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

}  // namespace

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
                                .WithContext("connecting to rank " + std::to_string(peer)));
      PairHello hello{kPairMagic, kBootstrapVersion,          {}, id.comm_id, rank,
                      peer,       static_cast<int32_t>(index)};
      memcpy(hello.secret, id.secret, kSecretBytes);
      BATON_RETURN_IF_ERROR(SendAll(fd.get(), &hello, sizeof(hello), deadline));
      uint8_t ack = 0;
      BATON_RETURN_IF_ERROR(RecvAll(fd.get(), &ack, 1, deadline)
                                .WithContext("handshake with rank " + std::to_string(peer)));
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
                 hello.magic == kPairMagic && hello.version == kBootstrapVersion &&
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
                              .WithContext("set-up exchange with rank " + std::to_string(p)));
  recv->assign(peers.size(), std::vector<uint8_t>(len));
  for (size_t i = 0; i < peers.size(); ++i)
    BATON_RETURN_IF_ERROR(
        RecvAll(sockets[peers[i]][0].get(), (*recv)[i].data(), len, deadline)
            .WithContext("set-up exchange with rank " + std::to_string(peers[i])));
  return Status::Ok();
}

}  // namespace baton
