#include "exec/call_check.h"

#include <baton.h>

#include "algorithms/call_description.h"
#include "algorithms/collective.h"
#include "base/datatype.h"

namespace baton {
Status CallMismatchError(int me, int peer, const CallDescriptor& mine, const CallMismatch& found,
                         uint64_t expected_bytes) {
  const std::string us = "rank " + std::to_string(me), them = "rank " + std::to_string(peer);
  const std::string head = "collective mismatch between " + them + " and " + us + ": ";
  switch (found.kind) {
    case CallMismatch::Kind::kOtherCall: {
      CallDescriptor theirs = found.theirs;
      // Only the algorithm differs: same call, different choices.
      theirs.algorithm = mine.algorithm;
      if (theirs == mine && IsCollectiveCall(mine.kind))
        return InvalidUsage(head + "both called " + DescribeCall(mine) + " but " + them + " ran " +
                            AlgorithmName(static_cast<Algorithm>(found.theirs.algorithm)) +
                            " and " + us + " " +
                            AlgorithmName(static_cast<Algorithm>(mine.algorithm)) +
                            " (BATON_ALGO, BATON_CHUNKSIZE and the tuning settings must be the "
                            "same on every rank)");
      return InvalidUsage(head + them + " called " + DescribeCall(found.theirs) + ", " + us + " " +
                          DescribeCall(mine));
    }
    case CallMismatch::Kind::kNewCall:
      return InvalidUsage(head + them + " started " + DescribeCall(found.theirs) + " while " + us +
                          " expected more of " + DescribeCall(mine) +
                          " (the ranks called different collectives or counts)");
    case CallMismatch::Kind::kNoDescriptor:
      return InvalidUsage(head + us + " started " + DescribeCall(mine) + " and " + them +
                          " sent data of another step or call (the ranks called different "
                          "collectives or counts, or chose different algorithms)");
    case CallMismatch::Kind::kSize:
    case CallMismatch::Kind::kNone:
      break;
  }
  std::string sizes = found.their_bytes != 0
                          ? them + " sent " + std::to_string(found.their_bytes) + " bytes where " +
                                us + " expected " + std::to_string(expected_bytes)
                          : them + " sent more than the " + std::to_string(expected_bytes) +
                                " bytes " + us + " expected";
  const int c = mine.kind - kCallKindCollectiveBase;
  if (IsCollectiveCall(mine.kind) && HasVariableCounts(static_cast<Collective>(c)))
    return InvalidUsage(head + "in " + DescribeCall(mine) + ", " + sizes +
                        " (the two ranks' counts for the block between them differ)");
  return InvalidUsage(head + "in " + DescribeCall(mine) + ", " + sizes +
                      " (the ranks chose different algorithms or chunk sizes: BATON_ALGO, "
                      "BATON_CHUNKSIZE and the tuning settings must be the same on every rank)");
}

Status CheckPeerState(int me, int peer, const std::string& peer_label,
                      const std::vector<CallDescriptor>& mine, const CallState& theirs,
                      std::string* behind, bool waited_on) {
  // Point-to-point calls are numbered per pair: nothing to compare.
  const CallDescriptor* first = nullptr;
  for (const CallDescriptor& c : mine)
    if (c.kind != kCallKindPointToPoint) {
      first = &c;
      break;
    }
  if ((first == nullptr && !waited_on) || theirs.call.kind == kCallKindPointToPoint)
    return Status::Ok();
  const std::string us = "rank " + std::to_string(me), them = "rank " + std::to_string(peer);
  if (theirs.call.seq == 0) {
    *behind += "; " + peer_label + " has not called anything on this communicator yet";
    return Status::Ok();
  }
  if (first == nullptr) {
    *behind += "; " + peer_label + (theirs.in_call ? " is in " : " has finished ") +
               DescribeCall(theirs.call) + ", not in the matching send or receive";
    return Status::Ok();
  }
  for (const CallDescriptor& m : mine) {
    if (m.kind == kCallKindPointToPoint || m.seq != theirs.call.seq) continue;
    if (theirs.call == m) return Status::Ok();  // in the same call, or done with its part
    CallMismatch found;
    found.kind = CallMismatch::Kind::kOtherCall;
    found.theirs = theirs.call;
    Status st = CallMismatchError(me, peer, m, found, 0);
    if (!theirs.in_call)
      return InvalidUsage(st.message() + " (" + them + " has finished its call)");
    return st;
  }
  if (theirs.call.seq < first->seq)
    *behind += "; " + peer_label + " has not entered " + DescribeCall(*first) +
               ": its last call is " + DescribeCall(theirs.call) +
               (theirs.in_call ? ", still running" : ", finished");
  return Status::Ok();
}

Status CheckPeerMovedOn(int me, int peer, const std::vector<CallDescriptor>& mine,
                        const CallState& theirs) {
  const CallDescriptor* last = nullptr;
  for (const CallDescriptor& c : mine)
    if (c.kind != kCallKindPointToPoint && (last == nullptr || c.seq > last->seq)) last = &c;
  if (last == nullptr || theirs.call.kind == kCallKindPointToPoint || theirs.call.seq <= last->seq)
    return Status::Ok();
  const std::string us = "rank " + std::to_string(me), them = "rank " + std::to_string(peer);
  return InvalidUsage("collective mismatch between " + them + " and " + us + ": " + us +
                      " still waits for data of " + DescribeCall(*last) + " from " + them +
                      ", which has moved on to " + DescribeCall(theirs.call) +
                      " (the ranks called different collectives, roots or counts)");
}

}  // namespace baton
