#include "exec/simulator.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <deque>
#include <map>

#include "exec/executor.h"

namespace baton {

Status SimulateSchedules(const std::vector<Schedule>& schedules, std::vector<SimRankStats>* stats) {
  const int p = static_cast<int>(schedules.size());
  stats->assign(p, SimRankStats{});
  // In-flight messages from src to dst.
  std::map<std::pair<int, int>, std::deque<std::vector<uint8_t>>> wire;
  std::vector<std::vector<uint8_t>> complete(p);
  // Per rank, per (peer, direction): next op index in schedule order.
  std::vector<std::map<std::pair<int, bool>, std::vector<int>>> queues(p);
  std::vector<std::map<std::pair<int, bool>, size_t>> cursors(p);
  size_t remaining = 0;
  for (int r = 0; r < p; ++r) {
    complete[r].assign(schedules[r].ops.size(), 0);
    remaining += schedules[r].ops.size();
    for (int i = 0; i < static_cast<int>(schedules[r].ops.size()); ++i) {
      const Op& op = schedules[r].ops[i];
      if (op.kind == Op::Kind::kCopy) {
        queues[r][{-1, false}].push_back(i);
      } else {
        if (op.peer < 0 || op.peer >= p || op.peer == r)
          return InternalError("rank " + std::to_string(r) + " op " + std::to_string(i) +
                               " has bad peer " + std::to_string(op.peer));
        queues[r][{op.peer, op.kind == Op::Kind::kSend}].push_back(i);
      }
    }
  }
  while (remaining > 0) {
    bool any = false;
    // One synchronous round: each rank advances every queue by at most one
    // op, and messages sent this round arrive next round.
    std::vector<std::pair<std::pair<int, int>, std::vector<uint8_t>>> sent;
    for (int r = 0; r < p; ++r) {
      bool active = false;
      for (auto& [key, ops] : queues[r]) {
        size_t& cur = cursors[r][key];
        if (cur >= ops.size()) continue;
        const Op& op = schedules[r].ops[ops[cur]];
        bool ready = (op.deps[0] < 0 || complete[r][op.deps[0]]) &&
                     (op.deps[1] < 0 || complete[r][op.deps[1]]);
        if (!ready) continue;
        if (op.kind == Op::Kind::kCopy) {
          RunCopyOp(op);
        } else if (op.kind == Op::Kind::kSend) {
          sent.push_back({{r, op.peer}, std::vector<uint8_t>(op.src, op.src + op.bytes)});
          (*stats)[r].sends++;
          (*stats)[r].bytes_sent += op.bytes;
        } else {
          auto& q = wire[{op.peer, r}];
          if (q.empty()) continue;
          std::vector<uint8_t> msg = std::move(q.front());
          q.pop_front();
          if (msg.size() != op.bytes)
            return InternalError("rank " + std::to_string(r) + " expected " +
                                 std::to_string(op.bytes) + " bytes from rank " +
                                 std::to_string(op.peer) + ", got " + std::to_string(msg.size()));
          Deliver(RecvTargetOf(op), 0, msg.data(), msg.size());
          (*stats)[r].recvs++;
          if (op.reduce_with) (*stats)[r].bytes_reduced += op.bytes;
        }
        complete[r][ops[cur]] = 1;
        ++cur;
        --remaining;
        any = active = true;
      }
      if (active) (*stats)[r].rounds++;
    }
    for (auto& [key, msg] : sent) wire[key].push_back(std::move(msg));
    if (!any && sent.empty()) return InternalError("schedules deadlock");
  }
  for (auto& [key, q] : wire)
    if (!q.empty())
      return InternalError(std::to_string(q.size()) + " messages from rank " +
                           std::to_string(key.first) + " to rank " + std::to_string(key.second) +
                           " were never received");
  return Status::Ok();
}

Status SimulateBootstrap(const BootstrapPlan& plan, uint64_t peer_info_bytes,
                         BootstrapStats* stats) {
  *stats = BootstrapStats{};
  const int n = plan.nranks;
  const size_t words = (static_cast<size_t>(n) + 63) / 64;
  // known[r]: which ranks' PeerInfo rank r holds; the root is row n.
  std::vector<uint64_t> known((n + 1) * words, 0), at_start;
  for (int r = 0; r < n; ++r) known[r * words + r / 64] |= uint64_t{1} << (r % 64);
  auto row = [&](std::vector<uint64_t>& m, int who) { return &m[(who < 0 ? n : who) * words]; };
  std::vector<uint64_t> traffic(n + 1, 0);
  std::vector<std::vector<int>> partners(n + 1);
  for (const PlanRound& round : plan.rounds) {
    at_start = known;
    std::vector<int> fan_in(n + 1, 0);
    for (const PlanMessage& m : round.messages) {
      if (m.from < kPlanRoot || m.from >= n || m.to < kPlanRoot || m.to >= n || m.from == m.to)
        return InternalError("plan round '" + round.what + "' has a message from " +
                             std::to_string(m.from) + " to " + std::to_string(m.to));
      const int from = m.from < 0 ? n : m.from, to = m.to < 0 ? n : m.to;
      if (m.carries_table) {
        const uint64_t* src = row(at_start, m.from);
        uint64_t* dst = row(known, m.to);
        uint64_t count = 0;
        for (size_t w = 0; w < words; ++w) {
          count += std::popcount(src[w]);
          dst[w] |= src[w];
        }
        if (count * peer_info_bytes != m.bytes)
          return InternalError("plan round '" + round.what + "': " + std::to_string(m.bytes) +
                               " bytes from " + std::to_string(m.from) + ", who knows " +
                               std::to_string(count) + " ranks");
      }
      ++fan_in[to];
      traffic[from] += m.bytes;
      traffic[to] += m.bytes;
      partners[from].push_back(to);
      partners[to].push_back(from);
      stats->messages++;
      stats->bytes += m.bytes;
    }
    stats->rounds++;
    stats->root_fan_in = std::max(stats->root_fan_in, fan_in[n]);
    stats->rank_fan_in =
        std::max(stats->rank_fan_in, *std::max_element(fan_in.begin(), fan_in.end() - 1));
  }
  for (int r = 0; r < n; ++r) {
    const uint64_t* mine = row(known, r);
    for (int q = 0; q < n; ++q)
      if (!(mine[q / 64] >> (q % 64) & 1))
        return InternalError("after the plan, rank " + std::to_string(r) +
                             " lacks the PeerInfo of rank " + std::to_string(q));
    stats->rank_bytes = std::max(stats->rank_bytes, traffic[r]);
    std::sort(partners[r].begin(), partners[r].end());
    const size_t distinct =
        std::unique(partners[r].begin(), partners[r].end()) - partners[r].begin();
    stats->bootstrap_peers = std::max(stats->bootstrap_peers, distinct);
  }
  stats->root_bytes = traffic[n];
  for (uint32_t c : plan.eager_connections)
    stats->eager_connections = std::max(stats->eager_connections, c);
  return Status::Ok();
}

}  // namespace baton
