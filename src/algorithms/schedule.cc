#include "algorithms/schedule.h"

#include <cstdint>
#include <type_traits>
#include <utility>

namespace baton {

void Schedule::Append(Schedule&& other) {
  if (build_error.ok()) build_error = other.build_error;
  LimitTimeout(other.timeout_s);
  int base = static_cast<int>(ops.size());
  const auto call_base = static_cast<uint16_t>(calls.size());
  for (Op op : other.ops) {
    for (int& d : op.deps)
      if (d >= 0) d += base;
    op.call = static_cast<uint16_t>(op.call + call_base);
    ops.push_back(op);
  }
  calls.insert(calls.end(), other.calls.begin(), other.calls.end());
  TakeMemory(std::move(other));
}

void Schedule::TakeMemory(Schedule&& other) {
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

void Schedule::Rebase(const void* send, size_t send_bytes, const void* recv, size_t recv_bytes,
                      ptrdiff_t delta) {
  const auto s0 = reinterpret_cast<uintptr_t>(send), r0 = reinterpret_cast<uintptr_t>(recv);
  auto moved = [&](const uint8_t* p, uint64_t op_bytes) {
    const auto a = reinterpret_cast<uintptr_t>(p);
    auto within = [&](uintptr_t base, size_t bytes) {
      return base != 0 && a >= base && (a - base < bytes || (a - base == bytes && op_bytes == 0));
    };
    return p != nullptr && (within(s0, send_bytes) || within(r0, recv_bytes));
  };
  auto shift = [&](auto* p) {
    using T = std::remove_reference_t<decltype(*p)>;
    *p = reinterpret_cast<T>(reinterpret_cast<uintptr_t>(*p) + static_cast<uintptr_t>(delta));
  };
  for (Op& op : ops) {
    if (moved(op.src, op.bytes)) shift(&op.src);
    if (moved(op.dst, op.bytes)) shift(&op.dst);
    if (moved(op.reduce_with, op.bytes)) shift(&op.reduce_with);
    if (moved(op.copy_to, op.bytes)) shift(&op.copy_to);
  }
  if (lines.valid) {
    if (moved(static_cast<const uint8_t*>(lines.send), 1)) shift(&lines.send);
    if (moved(static_cast<const uint8_t*>(lines.recv), 1)) shift(&lines.recv);
  }
}

}  // namespace baton
