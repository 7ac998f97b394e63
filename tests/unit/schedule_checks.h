// Static checks of a rank's schedule, for the algorithm tests: no zero-byte
// messages, dependencies point backwards, no two ops that may run at
// once touch the same bytes while one of them writes, and nothing touches
// a streamed final output afterwards (the simulator alone
// would not catch that: it copies a message the moment it is sent). Then the
// simulator, over all ranks' checked schedules.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <map>
#include <utility>
#include <vector>

#include "algorithms/schedule.h"
#include "exec/simulator.h"

namespace baton {

struct Region {
  uintptr_t begin = 0, end = 0;
};

inline bool Overlap(Region x, Region y) {
  return x.begin < x.end && y.begin < y.end && x.begin < y.end && y.begin < x.end;
}

inline Region RegionOf(const void* p, size_t bytes) {
  auto b = reinterpret_cast<uintptr_t>(p);
  return {b, p ? b + bytes : b};
}

// Fails on a zero-byte message, a dependency that does not point at an
// earlier op, or two ops that are not ordered (by deps or by sharing a
// per-peer queue, transitively) where one writes bytes the other touches.
inline ::testing::AssertionResult CheckSchedule(const Schedule& s) {
  const auto& ops = s.ops;
  const int n = static_cast<int>(ops.size());
  const size_t words = (n + 63) / 64;
  std::vector<std::vector<uint64_t>> before(n, std::vector<uint64_t>(words, 0));
  std::map<std::pair<int, int>, int> queue_tail;  // (peer, kind) -> last op
  // writes[2 * i + 1]: a receive's copy_to.
  std::vector<Region> reads(2 * n), writes(2 * n);
  for (int i = 0; i < n; ++i) {
    const Op& op = ops[i];
    std::vector<int> preds;
    for (int d : op.deps) {
      if (d >= i || d < -1)
        return ::testing::AssertionFailure() << "op " << i << " depends on op " << d;
      if (d >= 0) preds.push_back(d);
    }
    const int peer = op.kind == Op::Kind::kCopy ? -1 : op.peer;
    auto [it, fresh] = queue_tail.try_emplace({peer, static_cast<int>(op.kind)}, i);
    if (!fresh) {
      preds.push_back(it->second);
      it->second = i;
    }
    for (int d : preds) {
      for (size_t w = 0; w < words; ++w) before[i][w] |= before[d][w];
      before[i][d / 64] |= uint64_t{1} << (d % 64);
    }
    if (op.kind != Op::Kind::kCopy && op.bytes == 0)
      return ::testing::AssertionFailure() << "op " << i << " is a zero-byte message";
    switch (op.kind) {
      case Op::Kind::kSend:
        reads[2 * i] = RegionOf(op.src, op.bytes);
        break;
      case Op::Kind::kRecv:
        reads[2 * i] = RegionOf(op.reduce_with, op.bytes);
        writes[2 * i] = RegionOf(op.dst, op.bytes);
        if (op.copy_to != nullptr) {
          if (op.reduce_with == nullptr)
            return ::testing::AssertionFailure() << "op " << i << " copies a plain receive";
          writes[2 * i + 1] = RegionOf(op.copy_to, op.bytes);
        }
        break;
      case Op::Kind::kCopy:
        reads[2 * i] = RegionOf(op.src, op.bytes);
        writes[2 * i] = RegionOf(op.dst, op.bytes);
        break;
    }
    if (op.kind != Op::Kind::kRecv && op.copy_to != nullptr)
      return ::testing::AssertionFailure() << "op " << i << " has copy_to but is no receive";
  }
  auto writes_overlap = [&](int i, const Region& r) {
    return Overlap(writes[2 * i], r) || Overlap(writes[2 * i + 1], r);
  };
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < j; ++i) {
      if (before[j][i / 64] >> (i % 64) & 1) continue;
      if (writes_overlap(i, writes[2 * j]) || writes_overlap(i, writes[2 * j + 1]) ||
          writes_overlap(i, reads[2 * j]) || writes_overlap(j, reads[2 * i]))
        return ::testing::AssertionFailure()
               << "ops " << i << " and " << j << " may run at once on the same bytes";
    }
  }
  // A streamed output (Op::stream_dst) is final: no op that may run after
  // it reads or writes those bytes again.
  for (int i = 0; i < n; ++i) {
    if (!ops[i].stream_dst) continue;
    if (ops[i].kind == Op::Kind::kSend)
      return ::testing::AssertionFailure() << "op " << i << " is a send marked to stream";
    for (int j = 0; j < n; ++j) {
      if (j == i || (before[i][j / 64] >> (j % 64) & 1)) continue;
      if (Overlap(writes[2 * i], reads[2 * j]) || writes_overlap(j, writes[2 * i]))
        return ::testing::AssertionFailure()
               << "op " << j << " may touch the bytes op " << i << " streams as final";
    }
  }
  return ::testing::AssertionSuccess();
}

// Builds every rank's schedule with `build`, checks each, and simulates.
inline ::testing::AssertionResult Simulate(int p, const std::function<void(int, Schedule*)>& build,
                                           std::vector<SimRankStats>* stats) {
  std::vector<Schedule> sched(p);
  for (int r = 0; r < p; ++r) {
    build(r, &sched[r]);
    auto ok = CheckSchedule(sched[r]);
    if (!ok) return ok << " (rank " << r << ")";
  }
  Status st = SimulateSchedules(sched, stats);
  if (!st.ok()) return ::testing::AssertionFailure() << st.message();
  return ::testing::AssertionSuccess();
}

}  // namespace baton
