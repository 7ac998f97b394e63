// The rendezvous: turns a unique id into the table of every rank's PeerInfo.
// The process that makes the id (batonGetUniqueId, or rank 0 of a
// BATON_ROOT job) serves it from a background thread; every rank connects,
// proves the id's secret and sends its PeerInfo, and gets the whole table
// back once all ranks are in.
//
// A foreign or malformed connection is dropped as soon as its magic or
// secret is wrong; everything has a deadline, so a missing rank makes every
// joined rank fail with batonTimeout instead of hanging.
#pragma once

#include <baton.h>

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

// Joins the rendezvous as `rank` of `nranks`, returning all ranks' info
// indexed by rank.
Status Rendezvous(const UniqueIdData& id, int nranks, int rank, const PeerInfo& mine,
                  Deadline deadline, std::vector<PeerInfo>* all);

}  // namespace baton
