// The full mesh of authenticated sockets between the ranks; see mesh.h.
#include "bootstrap/mesh.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "base/log.h"
#include "bootstrap/handshake.h"

namespace baton {

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
      const std::string who = "rank " + std::to_string(peer);
      Fd fd;
      BATON_RETURN_IF_ERROR(ConnectWithRetry(FromWire(peers[peer].listen_addr), deadline, &fd)
                                .WithContext("connecting to " + who));
      PairHello hello;
      BATON_RETURN_IF_ERROR(MakePairHello(id, rank, peer, static_cast<int>(index), &hello));
      BATON_RETURN_IF_ERROR(SendAll(fd.get(), &hello, sizeof(hello), deadline));
      PairChallenge challenge;
      Status st = RecvAll(fd.get(), &challenge, sizeof(challenge), deadline);
      if (st.code() == batonRemoteError) return RemoteError(who + " refused the handshake");
      BATON_RETURN_IF_ERROR(st.WithContext("handshake with " + who));
      if (!PairChallengeValid(id, hello, challenge))
        return RemoteError("the listener at " + FromWire(peers[peer].listen_addr).ToString() +
                           " could not prove the job's secret: it is not " + who +
                           " of this communicator");
      const PairProof proof = MakePairProof(id, hello, challenge);
      BATON_RETURN_IF_ERROR(SendAll(fd.get(), &proof, sizeof(proof), deadline));
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
    // A short per-connection deadline: a silent foreign client must not
    // stall the real ones.
    const Deadline hello_deadline = std::min(deadline, DeadlineIn(5));
    PairHello hello;
    PairChallenge challenge;
    PairProof proof;
    st = RecvAll(fd.get(), &hello, sizeof(hello), hello_deadline);
    if (st.ok()) st = CheckPairHello(id, hello, rank, nranks);
    if (st.ok() && (hello.index >= static_cast<int>((*sockets)[hello.from_rank].size()) ||
                    (*sockets)[hello.from_rank][hello.index].valid()))
      st = InvalidUsage("unexpected socket index " + std::to_string(hello.index));
    if (st.ok()) st = MakePairChallenge(id, hello, &challenge);
    if (st.ok()) st = SendAll(fd.get(), &challenge, sizeof(challenge), hello_deadline);
    if (st.ok()) st = RecvAll(fd.get(), &proof, sizeof(proof), hello_deadline);
    if (st.ok() && !PairProofValid(id, hello, challenge, proof))
      st = InvalidUsage("no proof of the job's secret");
    if (!st.ok()) {
      BATON_INFO(kLogBootstrap, "dropped a malformed or foreign connection: %s",
                 st.message().c_str());
      continue;
    }
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
