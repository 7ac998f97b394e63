// Shrinking a communicator, as ncclCommShrink (NCCL 2.27): after a failure
// (or by choice), the ranks that are left make a new communicator without
// the ones they name, and go on.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/settings.h"
#include "base/status.h"
#include "comm/comm.h"

namespace baton {

// Called by every rank of `parent` not in `excluded` (checked: distinct
// ranks of parent, not this one). With `abort_first` the parent stops what
// is in flight and is failed from then on (BATON_SHRINK_ABORT); without it
// the parent is left as it is. The lowest surviving rank makes the new
// communicator's unique id and sends it to the others over the control
// sockets, which outlive a failure; the new ranks keep the parent's order.
// The exclude lists must agree (checked by a fingerprint).
Status ShrinkCommunicator(Communicator& parent, const Settings& settings,
                          const std::vector<int>& excluded, bool abort_first,
                          std::shared_ptr<Communicator>* out, const std::string& name = "");

}  // namespace baton
