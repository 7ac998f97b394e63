// Send and receive: one message each, as schedules, so that groups of them
// merge into one schedule like any other call.
#pragma once

#include "algorithms/schedule.h"

namespace baton {

// args.count elements of args.send to `peer` (nothing for peer == args.rank:
// a send to self is paired with its receive by the caller).
void BuildSend(const CollArgs& args, int peer, Schedule* out);
// args.count elements from `peer` into args.recv.
void BuildRecv(const CollArgs& args, int peer, Schedule* out);

}  // namespace baton
