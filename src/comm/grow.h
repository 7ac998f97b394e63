// Growing a communicator, as ncclCommGrow (NCCL 2.29): the ranks of a
// running communicator and ranks that join it from outside make a larger
// one. One existing rank (the coordinator) makes a grow id with
// MakeGrowId and hands it to the joining ranks out of band; the existing
// ranks learn it from the coordinator over the parent, and everyone meets at
// that id's rendezvous. Existing ranks keep their numbers; joining ranks
// take the ones above (which one each takes is the caller's choice).
#pragma once

#include <baton.h>

#include <memory>
#include <string>

#include "base/settings.h"
#include "base/status.h"
#include "comm/comm.h"

namespace baton {

// An existing rank's part: collective over `parent` (every rank calls it,
// none in a group). `id` is the grow id on the coordinator (the rank that
// made it with Communicator::MakeGrowId) and null, or the same id, on the
// others. The ranks check together that exactly one of them coordinates and
// that all ask for the same `nranks` (batonInvalidUsage on every rank
// otherwise), then join the id's rendezvous as their parent rank. The
// coordinator's id is used up whatever the outcome.
Status GrowCommunicator(Communicator& parent, const Settings& settings, int nranks,
                        const batonUniqueId* id, std::shared_ptr<Communicator>* out,
                        const std::string& name = "");

// A joining rank's part: `rank` of `nranks` at the rendezvous of `id`, which
// an existing rank made (it fails with batonTimeout when the existing ranks
// do not come within the timeout).
Status JoinGrownCommunicator(const Settings& settings, int nranks, const batonUniqueId& id,
                             int rank, std::shared_ptr<Communicator>* out,
                             const std::string& name = "", const std::string& gpu_pci = "");

}  // namespace baton
