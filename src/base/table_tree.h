// The shape of the tree that carries the rendezvous table from the root to
// the host leaders (bootstrap/host_stage.h), shared with its model
// (algorithms/bootstrap_plan.h) so that the simulator runs the same tree.
#pragma once

#include <cstdint>
#include <vector>

namespace baton {

// Node 0 is the root and leader i is node i + 1; node v sends to leaders
// [v * kTableTreeFanout, v * kTableTreeFanout + kTableTreeFanout): every
// leader has one parent, and the depth is about log2(leaders).
inline constexpr int kTableTreeFanout = 2;

// The leaders that leader `self` (-1: the root) sends the table to.
inline std::vector<int> TableTreeChildren(int self, int leaders) {
  std::vector<int> children;
  const int64_t first = (static_cast<int64_t>(self) + 1) * kTableTreeFanout;
  for (int64_t c = first; c < first + kTableTreeFanout && c < leaders; ++c)
    children.push_back(static_cast<int>(c));
  return children;
}

}  // namespace baton
