// A reference for the cost model: the time the schedules of all ranks take
// when replayed op by op with the costs of the resources they use. Every op
// waits for its dependencies and its queue (sends to a peer, and receives
// from it, go in order). Over shared memory the sender's CPU copies a
// message into the channel (half of beta per byte) and the receiver's CPU
// copies or reduces it out (the other half, plus gamma when reducing); over
// a network the sender's CPU pays the per-message overhead, the bytes
// occupy the sending host's egress and the receiving host's ingress (beta
// per byte each, shared by all ranks of the host), and the receiver's CPU
// reduces. Ops that could start at the same time start in schedule order. Independent of the model's formulas: it reads the schedules the
// builders produce.
#pragma once

#include <algorithm>
#include <functional>
#include <map>
#include <vector>

#include "algorithms/schedule.h"

namespace baton_test {

struct LinkTiming {
  double alpha = 0;     // a small message's latency
  double overhead = 0;  // CPU time per message
  double beta = 0;      // per byte
  bool network = false;
};

// The completion time of the last op of any rank, or -1 when the schedules
// cannot complete (a deadlock). `link(a, b)`: the figures of messages from
// a to b; `host(r)`: the host of rank r; `gamma`: per byte reduced.
inline double ReplaySchedules(const std::vector<baton::Schedule>& schedules,
                              const std::function<LinkTiming(int, int)>& link,
                              const std::function<int(int)>& host, double gamma) {
  using baton::Op;
  const int p = static_cast<int>(schedules.size());
  std::vector<std::vector<double>> done(p);
  // Arrival times of the messages from a to b, in order, as they are sent.
  std::map<std::pair<int, int>, std::vector<double>> arrivals;
  std::vector<double> cpu(p, 0);
  std::map<int, double> egress, ingress;
  // Per rank and (peer, is_send): the ops of that queue in order and a cursor.
  std::vector<std::map<std::pair<int, bool>, std::vector<int>>> queues(p);
  std::vector<std::map<std::pair<int, bool>, size_t>> cursors(p);
  std::vector<std::map<int, size_t>> received(p);  // per peer: messages received
  size_t remaining = 0;
  for (int r = 0; r < p; ++r) {
    done[r].assign(schedules[r].ops.size(), -1);
    remaining += schedules[r].ops.size();
    for (int i = 0; i < static_cast<int>(schedules[r].ops.size()); ++i) {
      const Op& op = schedules[r].ops[i];
      queues[r][{op.kind == Op::Kind::kCopy ? -1 : op.peer, op.kind == Op::Kind::kSend}].push_back(
          i);
    }
  }
  // Event order: each round runs the ready queue head that can start
  // first, so resources are taken in time order.
  double end = 0;
  while (remaining > 0) {
    int best_r = -1, best_i = -1;
    std::pair<int, bool> best_key;
    double best_start = 0, best_ready = 0;
    for (int r = 0; r < p; ++r) {
      for (auto& [key, ops] : queues[r]) {
        const size_t cur = cursors[r][key];
        if (cur >= ops.size()) continue;
        const int i = ops[cur];
        const Op& op = schedules[r].ops[i];
        double ready = cur > 0 ? done[r][ops[cur - 1]] : 0;
        bool blocked = false;
        for (int d : op.deps) {
          if (d < 0) continue;
          if (done[r][d] < 0) blocked = true;
          ready = std::max(ready, done[r][d]);
        }
        if (blocked) continue;
        double start = ready;
        if (op.kind == Op::Kind::kSend) {
          start = std::max(ready, cpu[r]);
          if (link(r, op.peer).network) start = std::max(start, egress[host(r)]);
        } else if (op.kind == Op::Kind::kRecv) {
          const auto& in = arrivals[{op.peer, r}];
          const size_t k = received[r][op.peer];
          if (k >= in.size()) continue;  // not sent yet
          start = std::max({ready, in[k], cpu[r]});
        }
        // Ties go to the op listed first, as the executor posts them.
        if (best_r < 0 || start < best_start ||
            (start == best_start && r == best_r && i < best_i)) {
          best_r = r, best_i = i, best_key = key, best_start = start, best_ready = ready;
        }
      }
    }
    if (best_r < 0) return -1;
    const int r = best_r;
    const Op& op = schedules[r].ops[best_i];
    const double bytes = static_cast<double>(op.bytes);
    const double start = best_start;
    double t = start;
    if (op.kind == Op::Kind::kSend) {
      const LinkTiming l = link(r, op.peer);
      double arrival;
      if (l.network) {
        double& in = ingress[host(op.peer)];
        cpu[r] = start + l.overhead;
        egress[host(r)] = start + bytes * l.beta;  // the overhead is the CPU's
        arrival = std::max(start + l.alpha + bytes * l.beta, in + bytes * l.beta);
        in = arrival;
      } else {
        cpu[r] = start + l.overhead + bytes * l.beta / 2;
        arrival = start + l.alpha + bytes * l.beta / 2;
      }
      t = cpu[r];
      arrivals[{r, op.peer}].push_back(arrival);
    } else if (op.kind == Op::Kind::kRecv) {
      const LinkTiming l = link(op.peer, r);
      ++received[r][op.peer];
      t = start +
          bytes * ((l.network ? 0 : l.beta / 2) + (op.reduce_with != nullptr ? gamma : 0));
      cpu[r] = t;
    }
    (void)best_ready;
    done[r][best_i] = t;
    end = std::max(end, t);
    ++cursors[r][best_key];
    --remaining;
  }
  return end;
}

}  // namespace baton_test
