// How a replacement rank joins a running elastic job: the out-of-band step of batonCommGrow
// (NCCL's ncclCommGrow leaves it to the application). batonrun --elastic gives every rank a
// private directory (BATON_ELASTIC_DIR); in it
//
//   join.PID    a replacement (process PID) asks to join (written by the replacement)
//   grant.PID   "NRANKS RANK HEX-ID\n": the grow it is to take part in (written by rank 0)
//   finished    the job trained to the end: nobody joins any more (written by rank 0)
//
// Files are written to a temporary name and renamed, so a reader never sees half of one. Rank 0
// looks for requests at every step boundary; a glance costs one stat of the directory (its
// modification time changes when a file comes or goes), so the steps pay nothing while nobody
// asks.
#pragma once

#include <baton.h>
#include <sys/types.h>

#include <ctime>
#include <string>
#include <vector>

namespace trainer {

// Rank 0's side.
class JoinDesk {
 public:
  // dir: BATON_ELASTIC_DIR (empty: nobody can ask, and Requests() is always empty).
  explicit JoinDesk(std::string dir) : dir_(std::move(dir)) {}

  bool open() const { return !dir_.empty(); }
  // The processes asking to join, oldest pid first.
  std::vector<pid_t> Requests();
  // Answers `pids` (from Requests): pids[i] is to join as rank first_rank + i of nranks at the
  // rendezvous of `id`. Throws TrainError when a file cannot be written.
  void Grant(const std::vector<pid_t>& pids, const batonUniqueId& id, int nranks, int first_rank);
  // The job is over: replacements asking from now on are told so.
  void CloseDesk();

 private:
  std::string dir_;
  timespec seen_{};  // the directory's modification time at the last look
};

// What a replacement learns.
struct JoinGrant {
  bool finished = false;  // the job ended before it could join
  int nranks = 0;
  int rank = -1;
  batonUniqueId id{};
};

// The replacement's side: asks in `dir` and waits up to timeout_s for the answer. Throws
// TrainError when there is no answer in time or the answer is malformed.
JoinGrant AskToJoin(const std::string& dir, double timeout_s);

}  // namespace trainer
