#include "algorithms/schedule.h"

#include <utility>

namespace baton {

void Schedule::Append(Schedule&& other) {
  if (build_error.ok()) build_error = other.build_error;
  int base = static_cast<int>(ops.size());
  const auto call_base = static_cast<uint16_t>(calls.size());
  for (Op op : other.ops) {
    for (int& d : op.deps)
      if (d >= 0) d += base;
    op.call = static_cast<uint16_t>(op.call + call_base);
    ops.push_back(op);
  }
  calls.insert(calls.end(), other.calls.begin(), other.calls.end());
  // Take over other's live blocks; it gets our spare ones in exchange.
  for (size_t i = 0; i < other.scratch_used; ++i) {
    if (scratch_used == scratch.size()) scratch.emplace_back();
    scratch[scratch_used++].swap(other.scratch[i]);
  }
  other.scratch_used = 0;
  for (size_t i = 0; i < other.filled_used; ++i) {
    if (filled_used == filled.size()) filled.emplace_back();
    std::swap(filled[filled_used++], other.filled[i]);
  }
  other.filled_used = 0;
}

}  // namespace baton
