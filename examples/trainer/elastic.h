// --elastic: training that survives a lost rank and takes replacements in, for the modes whose
// ranks hold whole copies of the model (--mode sync, and the workers of a synchronous --mode
// ps). When a collective fails because a peer died, Baton's error names it ("rank 2 left the
// communicator"); the survivors shrink the communicator without it (batonCommShrink), agree on
// the last step they completed, take that state from one of them, re-cut the samples not yet
// trained among themselves and go on with the learning rate of the new global batch. At every
// step boundary rank 0 looks for replacements asking to join (elastic_join.h); when there are
// some, every rank grows the communicator with them (batonCommGrow) and the newcomers receive
// the state. The modes that split the model itself cannot lose a rank and refuse --elastic
// (options.cc).
#pragma once

#include <baton.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "elastic_join.h"
#include "trainer.h"
#include "util.h"

namespace trainer {

// What an epoch trains: the samples still to train, in order, cut into `parts` equal parts (one
// per data-parallel rank or worker); part p's batch at step s is pending[p per() + s batch + i],
// as TrainingRun::ShardOf cuts a whole epoch. When the parts change (a rank lost or joined), the
// plan is remade from the samples no part has trained yet (Replan).
struct EpochPlan {
  int epoch = 0;
  std::vector<uint32_t> pending;
  int parts = 1;
  long step = 0;            // steps done under this plan
  long steps = 0;           // steps of this plan
  long steps_before = 0;    // steps of this epoch under earlier plans
  long samples_before = 0;  // samples trained in this epoch under earlier plans
  bool finished = false;    // the epoch's end (evaluation, report) is done

  size_t per() const { return pending.size() / static_cast<size_t>(parts); }
  Shard PartShard(int part) const { return {per() * static_cast<size_t>(part), steps}; }
  long SamplesDone(int batch) const {
    return samples_before + step * static_cast<long>(batch) * parts;
  }
};

// A whole epoch of `order` over `parts` (remainders dropped; at most max_steps steps if > 0).
EpochPlan FirstPlan(int epoch, std::vector<uint32_t> order, int parts, int batch, long max_steps);
// The samples of `plan` not trained yet, over `parts` (nothing once the plan is complete).
EpochPlan Replan(const EpochPlan& plan, int parts, int batch, long max_steps);
// Steps of a whole epoch of `samples` over `parts`.
long StepsPerEpoch(size_t samples, int parts, int batch, long max_steps);

// The learning-rate schedule's length after a change of membership: the steps done, the rest of
// this epoch under `plan`, and the epochs after it under `parts`.
long TotalSteps(const RunContext& run, const EpochPlan& plan, long global_step, int parts);

// "rank 2" or "ranks 1, 3" (the log's words for the ranks lost).
std::string RanksWords(const std::vector<int>& ranks);

class Elastic {
 public:
  explicit Elastic(RunContext& run);
  bool enabled() const { return enabled_; }

  // After `error` was thrown while training: when it is the loss of peers (the communicator has
  // failed and batonCommGetFailedRanks lists them), the survivors shrink the communicator without
  // them (run.comm, run.rank and run.world then describe the new one) and it returns the lost
  // ranks of the old communicator, ascending, with *world_before. Otherwise, or without
  // --elastic, it rethrows; a failure of the shrink itself is a TrainError. Call it from the
  // handler that caught `error`. `refuse`, when given, sees each lost rank first and throws when
  // the mode cannot lose it.
  std::vector<int> Shrink(const TrainError& error, int* world_before,
                          const std::function<void(int lost)>& refuse = nullptr);

  // At a step boundary, on every rank: rank 0 looks for replacements asking to join; when there
  // are some, everyone grows the communicator with them (run.comm, run.rank, run.world change)
  // and it returns how many joined. A grow that times out (a replacement that never came) leaves
  // the communicator as it was and returns 0.
  int MaybeGrow();

  // Tells replacements still asking that the job is over (rank 0; at the end of training).
  void CloseDesk();

  // Seconds the last batonCommShrink or batonCommGrow took (the reports' recovery times).
  double change_s() const { return change_s_; }

  // The state the ranks go on from after a change: the lowest rank whose progress is the agreed
  // one. take_max: the most advanced rank's (sync: a step some ranks completed was completed with
  // everyone's gradient); else the least advanced (ps: servers ahead roll their shard back).
  // step: the steps this rank completed; epoch_key: 2 x epoch + 1 once the epoch's end is done.
  int AgreeOnRoot(long step, long epoch_key, bool take_max, long* agreed_step);

 private:
  void Adopt(batonComm_t comm);

  RunContext& run_;
  bool enabled_;
  JoinDesk desk_;
  double change_s_ = 0;
};

// Broadcasts the plan (and the global step) from `root`; every rank ends with root's.
void SharePlan(RunContext& run, int root, EpochPlan* plan);

// A replacement's start (BATON_ELASTIC_JOIN=1 from batonrun --replace): asks to join through
// BATON_ELASTIC_DIR and grows into the job. Returns null when the job finished before it could
// join (it has nothing to do); throws TrainError when it cannot join.
batonComm_t JoinRunningJob();

}  // namespace trainer
