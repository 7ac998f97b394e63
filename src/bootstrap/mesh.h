// The mesh: authenticated TCP sockets between every pair of ranks, which the
// transports are built on (TCP channels use them for data; shared-memory
// pairs keep one for set-up and to notice a peer's death).
#pragma once

#include <cstdint>
#include <vector>

#include "base/deadline.h"
#include "base/fd.h"
#include "base/status.h"
#include "bootstrap/peer_info.h"
#include "bootstrap/unique_id.h"

namespace baton {

// Connects every pair of ranks with sockets_per_peer[p] authenticated TCP
// sockets (at least 1; both ends must ask for the same number): rank r
// connects to each lower rank and accepts each higher one, all at once in
// one event loop (the listener is left non-blocking). (*sockets)[p] holds
// the sockets to peer p in order (empty for self), blocking.
Status ConnectMesh(const UniqueIdData& id, int rank, int listen_fd,
                   const std::vector<PeerInfo>& peers, const std::vector<int>& sockets_per_peer,
                   Deadline deadline, std::vector<std::vector<Fd>>* sockets);

// Sends `len` bytes to each of `peers` and receives `len` bytes from each,
// over the first mesh socket of each; a small exchange used during set-up.
Status ExchangeWithPeers(const std::vector<std::vector<Fd>>& sockets, const std::vector<int>& peers,
                         const void* send, std::vector<std::vector<uint8_t>>* recv, size_t len,
                         Deadline deadline);

}  // namespace baton
