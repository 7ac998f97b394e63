// Bootstrap: the rendezvous that turns a unique id (or a launcher's
// environment) into a table of peers, and the full mesh of authenticated
// sockets that the transports are then built on.
#pragma once

#include <baton.h>

#include <cstdint>
#include <vector>

#include "bootstrap/socket.h"
#include "core/status.h"

namespace baton {

constexpr uint32_t kUniqueIdMagic = 0x314e5442;  // "BTN1"
constexpr int kSecretBytes = 32;

// What batonUniqueId carries: where the rendezvous listens and the secret
// every connection of the new communicator must prove.
struct UniqueIdData {
  uint32_t magic;
  uint32_t version;
  WireAddr root;
  uint8_t secret[kSecretBytes];
  uint64_t comm_id;  // names shared-memory segments; random per communicator
};
static_assert(sizeof(UniqueIdData) <= BATON_UNIQUE_ID_BYTES);

Status DecodeUniqueId(const batonUniqueId& id, UniqueIdData* out);
batonUniqueId EncodeUniqueId(const UniqueIdData& data);

// What each rank tells all others at rendezvous.
struct PeerInfo {
  int32_t rank;
  int32_t pid;
  uint64_t host_hash;
  WireAddr listen_addr;  // where this rank accepts its peers' connections
  char hostname[64];
  uint8_t wants_tcp;    // BATON_TRANSPORT=tcp on this rank
  uint8_t tcp_sockets;  // BATON_NSOCKS_PERPEER: TCP sockets it wants per peer
  uint8_t reserved[2];
  int32_t ncpus;  // topology summary, for the cost model
  int32_t numa_nodes;
};

// Creates a new unique id: opens a listener on the selected interface and
// serves the rendezvous from a background thread of this process until
// every rank has joined (or BATON_TIMEOUT passes).
Status CreateUniqueId(batonUniqueId* out);

// Serves a rendezvous on `listener` (already bound) from a background
// thread; used by CreateUniqueId and by rank 0 in BATON_ROOT mode.
Status StartRendezvousServer(Fd listener, const UniqueIdData& id, double timeout_s);

// Joins the rendezvous as `rank` of `nranks`, returning all ranks' info
// indexed by rank.
Status Rendezvous(const UniqueIdData& id, int nranks, int rank, const PeerInfo& mine,
                  Deadline deadline, std::vector<PeerInfo>* all);

// Connects every pair of ranks with sockets_per_peer[p] authenticated TCP
// sockets (at least 1; both ends must ask for the same number): rank r
// connects to each lower rank and accepts each higher one. (*sockets)[p]
// holds the sockets to peer p in order (empty for self).
Status ConnectMesh(const UniqueIdData& id, int rank, int listen_fd,
                   const std::vector<PeerInfo>& peers, const std::vector<int>& sockets_per_peer,
                   Deadline deadline, std::vector<std::vector<Fd>>* sockets);

// Sends `len` bytes to each of `peers` and receives `len` bytes from each,
// over the first mesh socket of each; a small exchange used during set-up.
Status ExchangeWithPeers(const std::vector<std::vector<Fd>>& sockets, const std::vector<int>& peers,
                         const void* send, std::vector<std::vector<uint8_t>>* recv, size_t len,
                         Deadline deadline);

}  // namespace baton
