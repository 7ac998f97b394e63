// The training loop shared by every mode: sharding, batches, learning-rate schedule, evaluation,
// per-epoch reports and checkpoints. trainer.cc runs sync and local SGD; param_server.cc the
// parameter-server modes.
#pragma once

#include <baton.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "backend.h"
#include "data.h"
#include "model.h"
#include "options.h"
#include "timeline.h"

namespace trainer {

// What one rank accumulates over an epoch; summed across ranks for the report.
struct EpochStats {
  double loss_sum = 0;
  double correct = 0;
  double samples = 0;
  double comm_wait_s = 0;    // time blocked on communication
  double step_s = 0;         // time inside training steps
  double staleness_sum = 0;  // async parameter server: versions between pull and apply
  double staleness_count = 0;
  double staleness_max = 0;
};

// One rank's disjoint part of an epoch: samples order[begin + step * batch + i].
struct Shard {
  size_t begin = 0;
  long steps = 0;
};

// The state of one training run on this rank, shared by the mode implementations.
class TrainingRun {
 public:
  TrainingRun(batonComm_t comm, const Options& options, Backend& backend, const DataSplit& data);
  ~TrainingRun();
  TrainingRun(const TrainingRun&) = delete;
  TrainingRun& operator=(const TrainingRun&) = delete;

  // Trains options.epochs epochs in the chosen mode (from a checkpoint with --resume).
  void Run();

  // ---- used by the mode implementations ----
  // The permutation of the training set for an epoch (same on every rank: seed and epoch).
  std::vector<uint32_t> EpochOrder(int epoch) const;
  // Part `part` of `parts` equal shards of the permutation (remainders dropped so every rank
  // takes the same number of steps).
  Shard ShardOf(int part, int parts) const;
  // Loads batch `step` of the shard and runs forward (keeping activations when training).
  BatchStats ForwardBatch(const std::vector<uint32_t>& order, const Shard& shard, long step,
                          bool train);
  // Goyal et al.: linear warm-up from lr to lr * contributors over warmup_steps, then constant
  // or a cosine decay to 0 at total_steps (Loshchilov & Hutter's SGDR without restarts).
  float LearningRate(long step, int contributors) const;
  // The last epoch to train now (--epochs, or --stop-after when it comes first).
  int LastEpoch() const;
  // rank 0's parameters to everyone.
  void BroadcastParameters();
  // Allreduces a hash of the parameters with max and min; throws if ranks disagree.
  void CheckReplicas(const char* when);
  // Evaluates, sums the epoch's statistics across ranks, reports (line, JSON) and checkpoints.
  void FinishEpoch(int epoch, const EpochStats& stats, double wall_s, float lr,
                   long samples_trained);
  // Progress bar on rank 0 when stderr is a terminal.
  void Progress(int epoch, long step, long steps, const EpochStats& stats);

  batonComm_t comm;
  int rank = 0;
  int world = 1;
  const Options& opt;
  Backend& backend;
  const DataSplit& data;
  Mlp model;
  SgdOptimizer optimizer;
  std::unique_ptr<ParameterEma> ema;
  int start_epoch = 0;
  long global_step = 0;
  long total_steps = 0;          // of the whole run (--epochs), set by each mode for the schedule
  Timeline* timeline = nullptr;  // --trace: the trainer's events (null: none)

 private:
  void TrainSync();
  void TrainLocal();
  BatchStats Evaluate(const float* params);
  // Broadcasts rank 0's problem text (empty: none); every rank then throws it, so each reports the
  // reason (batonrun may stop rank 0 before it prints).
  void FailOnRootProblem(const std::string& problem);
  void SaveCheckpoint(int epochs_done);
  void LoadCheckpoint();
  uint64_t ParameterHash();

  Buffer batch_x_;
  std::vector<float> host_x_;
  std::vector<uint8_t> batch_labels_;
  std::FILE* json_ = nullptr;
  bool tty_ = false;
  double last_progress_ = 0;
};

// --mode ps (synchronous or --async): defined in param_server.cc.
void TrainParameterServer(TrainingRun& run);

}  // namespace trainer
