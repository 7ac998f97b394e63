// The dissemination barrier: ceil(log2 p) rounds of one-byte messages.
#pragma once

#include "algorithms/schedule.h"

namespace baton {

// In round k each rank signals rank + 2^k and waits for rank - 2^k; after
// the last round every rank has heard, directly or not, from all.
void BuildDisseminationBarrier(const CollArgs& args, Schedule* out);

}  // namespace baton
