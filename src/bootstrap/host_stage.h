// The rank side of the rendezvous (issue 19): ranks of one host find their
// leader through an abstract unix socket named after the communicator and
// the host (abstract names belong to a network namespace, so simulated
// hosts in namespaces each get their own). The first rank to bind the name
// leads: it forwards its own and its ranks' sealed hellos to the root in
// batches as they come, over a TCP connection it closes when idle, takes the table from its parent
// in a tree over the leaders, passes it to its children and hands every rank of its host its sealed
// reply and the table. The root thus sees hosts, not ranks, and sends the table to kTableTreeFanout
// leaders only (the tree, base/table_tree.h, is over the leaders in the order the root lists them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/deadline.h"
#include "base/fd.h"
#include "base/socket.h"
#include "base/status.h"
#include "base/table_tree.h"
#include "bootstrap/handshake.h"
#include "bootstrap/peer_info.h"
#include "bootstrap/unique_id.h"

namespace baton {

// How many leader connections the root reads at once; the others wait in
// its listen backlog.
inline constexpr int kRootWindow = 256;
// A leader sends each rank's hello as it comes, on one connection that it
// closes this long after its last batch: the ranks of a host, started
// together, share one connection, and the root's window turns over.
inline constexpr int kLeaderLingerMs = 20;
// A connection that has not sent its whole message in this time is dropped
// (a silent foreign client must not hold a slot).
inline constexpr int kSilentDropMs = 5000;

// A message still arriving on a non-blocking socket: `buf` is sized to
// what is expected so far.
struct Incoming {
  Fd fd;
  std::vector<uint8_t> buf;
  size_t got = 0;
  Clock::time_point since = Clock::now();
};
enum class ReadResult { kMore, kDone, kClosed };
// Reads what has arrived, up to buf.size().
ReadResult ReadSome(Incoming* in);

// Header, leaders and table as one message.
std::vector<uint8_t> TableMessage(const TableHeader& header, const std::vector<WireAddr>& leaders,
                                  const std::vector<PeerInfo>& table);

// Sends `message` to the children of `self` (-1: the root). A child that
// cannot be reached is skipped and its own children are served instead, so
// a dead leader does not cut off its subtree.
void SendTableDown(const std::vector<WireAddr>& leaders, int self,
                   const std::vector<uint8_t>& message, Deadline deadline);

// The abstract unix socket name of a host's leader (without the leading
// NUL).
std::string HostLeaderSocketName(const UniqueIdData& id, uint64_t host_hash);

// Joins the rendezvous through this host's leader, leading when first.
Status HostRendezvous(const UniqueIdData& id, int nranks, int rank, const PeerInfo& mine,
                      Deadline deadline, std::vector<PeerInfo>* all);

}  // namespace baton
