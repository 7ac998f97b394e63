// Messages nobody received, looked for as a rank frees its communicator.
//
// A rank that takes itself for the root of a small broadcast or scatter
// receives nothing, so no descriptor of that call is ever compared: each
// side finishes with its own idea of the result, and the messages the
// mistaken side sent wait unread at their receivers. If no later call reads
// them, this is where the mismatch shows.
#include <string>

#include "comm/comm.h"
#include "exec/call_check.h"

namespace baton {

Status Communicator::StrayMessages() {
  std::lock_guard<std::mutex> lock(run_mu_);
  // After a failure, messages left behind are the failure's, already told.
  if (!channels_ || nranks_ == 1 || async_error_.load() != batonSuccess || channels_->aborted())
    return Status::Ok();
  std::string found;
  int strays = 0;
  for (int p = 0; p < nranks_; ++p) {
    if (p == rank_ || !channels_->connected(p)) continue;
    Channel* ch = channels_->channel(p);
    bool ready = false, tagged = false;
    CallDescriptor tag;
    // A peer that has left with nothing pending answers with an error:
    // nothing stray there.
    if (ch == nullptr || !ch->PeekOpening(&ready, &tagged, &tag).ok() || !ready || !tagged)
      continue;
    if (strays++ < 4)
      found += std::string(found.empty() ? "" : "; ") + "rank " + std::to_string(p) + "'s " +
               DescribeCall(tag);
  }
  if (strays == 0) return Status::Ok();
  return InvalidUsage("rank " + std::to_string(rank_) + " never received " + found +
                      (strays > 4 ? "; ..." : "") +
                      ": the ranks disagreed on a call (a root, or a call one rank skipped), "
                      "and a rank that took itself for the root received nothing to compare");
}

}  // namespace baton
