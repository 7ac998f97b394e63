// Runs the schedules of many ranks in one process over in-memory queues:
// the test bed for algorithms at scales no machine here could launch.
#pragma once

#include <functional>
#include <string>
#include <vector>

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

}  // namespace baton
