// Runs the schedules of many ranks in one process over in-memory queues:
// the test bed for algorithms at scales no machine here could launch.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "algorithms/bootstrap_plan.h"
#include "algorithms/schedule.h"
#include "base/status.h"

namespace baton {

// What one simulated rank did.
struct SimRankStats {
  size_t sends = 0;  // messages sent
  size_t recvs = 0;  // messages received
  size_t bytes_sent = 0;
  size_t bytes_reduced = 0;  // bytes received into a reduction
  size_t rounds = 0;         // synchronous rounds in which this rank was active
};

// Runs schedules[r] for every rank r. Messages move whole, in per-pair FIFO
// order, as on a real transport. Fails on a deadlock (no rank can move), a
// size mismatch, or a message left unreceived.
Status SimulateSchedules(const std::vector<Schedule>& schedules, std::vector<SimRankStats>* stats);

// What a communicator's creation plan (algorithms/bootstrap_plan.h) costs.
struct BootstrapStats {
  size_t rounds = 0;
  size_t messages = 0;
  uint64_t bytes = 0;
  int root_fan_in = 0;             // most messages into the root in one round
  int rank_fan_in = 0;             // most messages into one rank in one round
  uint64_t root_bytes = 0;         // bytes the root sends and receives
  uint64_t rank_bytes = 0;         // most bytes one rank sends and receives
  size_t bootstrap_peers = 0;      // most partners of one rank during the bootstrap
  uint32_t eager_connections = 0;  // most transport connections a rank makes at creation
};

// Runs a creation plan round by round, tracking which ranks' PeerInfo each
// rank knows (`peer_info_bytes` each). Fails unless every rank knows every
// rank's at the end, or when a message's size disagrees with what its
// sender knew.
Status SimulateBootstrap(const BootstrapPlan& plan, uint64_t peer_info_bytes,
                         BootstrapStats* stats);

}  // namespace baton
