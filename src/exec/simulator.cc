#include "exec/simulator.h"

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

}  // namespace baton
