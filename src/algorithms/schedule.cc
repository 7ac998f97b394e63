#include "algorithms/schedule.h"

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
  for (auto& block : other.filled) filled.push_back(std::move(block));
  other.filled.clear();
}

}  // namespace baton
