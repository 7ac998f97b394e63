// Words for calls and for calls that do not match: what a rank reports when
// a peer's descriptor differs from its own (see base/call_descriptor.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "algorithms/call_description.h"
#include "base/call_descriptor.h"
#include "base/status.h"
#include "transport/channel.h"
#include "transport/control.h"

namespace baton {

// "allreduce #17 (4096 x float32, sum)", "broadcast #3 (10 x int8, root 2)",
// "send/recv #4 (16 x float64)".
std::string DescribeCall(const CallDescriptor& call);

// The error for a mismatch that rank `me`, in call `mine` and expecting
// `expected_bytes`, found on its connection from rank `peer`. Its message
// names both ranks and both calls, so that it reads the same on every rank
// it reaches.
Status CallMismatchError(int me, int peer, const CallDescriptor& mine, const CallMismatch& found,
                         uint64_t expected_bytes);

// Compares where `peer` says it is with the calls of this rank's stalled
// run (`mine`, numbered). A peer in another call with the same number, or
// done with one, is a mismatch: the error. A peer that has not reached
// these calls yet adds a line to *behind (for the timeout's verdict).
// `peer_label` names it ("rank 3 (pid 4242 on h3)"). A run of sends and
// receives only has no number to compare; for a peer it waits on
// (`waited_on`) that answered from a collective, or from no call yet, the
// line says where that peer is.
Status CheckPeerState(int me, int peer, const std::string& peer_label,
                      const std::vector<CallDescriptor>& mine, const CallState& theirs,
                      std::string* behind, bool waited_on = false);

// For a peer this rank still waits for data from over shared memory, in its
// run of the calls `mine` (numbered): a peer that answers from a collective
// after all of them has left them, and its sends for them were in the ring
// before it did, so what is missing never comes: the ranks called different
// things (a rank ahead on the lines, comm/lines.cc, puts nothing on the
// rings that would show it). The error then, else Ok.
Status CheckPeerMovedOn(int me, int peer, const std::vector<CallDescriptor>& mine,
                        const CallState& theirs);

}  // namespace baton
