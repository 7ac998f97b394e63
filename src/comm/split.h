// Splitting a communicator, as MPI_Comm_split and ncclCommSplit do.
#pragma once

#include <memory>
#include <string>

#include "base/settings.h"
#include "base/status.h"
#include "comm/comm.h"

namespace baton {

// Collective over `parent`: the ranks that pass the same `color` form a new
// communicator (configured by `settings`), ranked by `key`, ties broken by
// their rank in `parent`. A rank passing BATON_SPLIT_NOCOLOR takes part in
// the exchange and gets a null *out.
Status SplitCommunicator(Communicator& parent, const Settings& settings, int color, int key,
                         std::shared_ptr<Communicator>* out, const std::string& name = "");

}  // namespace baton
