// The rendezvous: turns a unique id into the table of every rank's PeerInfo.
// The process that makes the id (batonGetUniqueId, or rank 0 of a
// BATON_ROOT job) serves it from a background thread. Ranks reach it
// through their host's leader (bootstrap/host_stage.h): each leader sends
// its ranks' sealed hellos in batches over short connections, at most
// kRootWindow read at once; once all ranks are in, the root sends the table
// to the first leaders of a tree over the leaders, which pass it on.
//
// A foreign or malformed connection is dropped as soon as its magic or
// secret is wrong; everything has a deadline, so a missing rank makes every
// joined rank fail with batonTimeout instead of hanging.
#pragma once

#include <baton.h>

#include <cstdint>
#include <string>
#include <vector>

#include "base/deadline.h"
#include "base/fd.h"
#include "base/status.h"
#include "bootstrap/peer_info.h"
#include "bootstrap/unique_id.h"

namespace baton {

// Creates a new unique id: opens a listener on the interface `ifname_spec`
// selects (BATON_SOCKET_IFNAME, see SelectInterfaceAddress) and serves the
// rendezvous until every rank has joined or `timeout_s` passes.
Status CreateUniqueId(const std::string& ifname_spec, double timeout_s, batonUniqueId* out);

// Serves a rendezvous on `listener` (already bound) from a detached thread;
// used by CreateUniqueId and by rank 0 in BATON_ROOT mode. The thread lives
// only in this process: a forked child forgets it and closes its copy of
// the listener.
Status StartRendezvousServer(Fd listener, const UniqueIdData& id, double timeout_s);

// What the root saw, for tests: it sees hosts, not ranks.
struct RendezvousServerStats {
  int ranks = 0;        // ranks registered
  int leaders = 0;      // distinct host leaders
  int connections = 0;  // connections accepted (leaders' batches, foreign ones)
  int batches = 0;      // batches taken
  int peak_open = 0;    // most connections open at once
};
// The stats of a rendezvous with `comm_id` this process served and that
// has ended; false when there is none (the last 16 are kept).
bool FinishedRendezvousStats(uint64_t comm_id, RendezvousServerStats* out);

// Joins the rendezvous as `rank` of `nranks`, returning all ranks' info
// indexed by rank.
Status Rendezvous(const UniqueIdData& id, int nranks, int rank, const PeerInfo& mine,
                  Deadline deadline, std::vector<PeerInfo>* all);

}  // namespace baton
