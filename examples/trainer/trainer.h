// What the training modes share: batches, the learning-rate schedule, evaluation, per-epoch
// reports and checkpoints. Each mode is a file of its own (below).
#pragma once

#include <baton.h>

#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend.h"
#include "data.h"
#include "model.h"
#include "optimizers.h"
#include "options.h"
#include "straggle.h"
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
  double clock_gap_max = 0;      // async parameter server: pushes ahead of the slowest worker
  double gradients_applied = 0;  // --backup-workers: the server's
  double gradients_dropped = 0;
  double local_k = 0;   // --mode local: the averaging period this epoch (0: synchronous)
  double averages = 0;  // --mode local: allreduces of the parameters (or gradients) this epoch
};

// One rank's disjoint part of an epoch: samples order[begin + step * batch + i].
struct Shard {
  size_t begin = 0;
  long steps = 0;
};

// What every mode's epoch report adds beyond the data-parallel figures (model parallelism).
struct EpochExtras {
  bool pipeline = false;         // print the bubble
  double bubble = 0;             // measured idle share of the stages during the pipelined part
  double bubble_predicted = 0;   // (S - 1) / (M + S - 1)
  bool traffic = false;          // print the bytes
  double sent_per_step = 0;      // bytes sent per rank and step, mean over the ranks
  double sent_per_step_max = 0;  // and the busiest rank's
};

// What every mode shares: the rank, options, data, the learning-rate schedule, the per-epoch
// report and the progress bar.
class RunContext {
 public:
  // comm: main's communicator variable, which --elastic replaces when the ranks change (so that
  // main destroys, or aborts, the current one).
  RunContext(batonComm_t& comm, const Options& options, Backend& backend, const DataSplit& data);
  ~RunContext();
  RunContext(const RunContext&) = delete;
  RunContext& operator=(const RunContext&) = delete;

  // The permutation of the training set for an epoch (same on every rank: seed and epoch).
  std::vector<uint32_t> EpochOrder(int epoch) const;
  // lr_schedule.cc. Goyal et al.: linear warm-up from --lr to the peak rate (--lr scaled by the
  // global batch of `contributors` ranks' batches, --lr-scaling) over WarmupSteps(), then
  // constant or a cosine decay to 0 at total_steps (Loshchilov & Hutter's SGDR without restarts).
  float LearningRate(long step, int contributors) const;
  double PeakLearningRate(int contributors) const;
  // contributors x --batch x --accumulate (0: data_ranks).
  double GlobalBatch(int contributors = 0) const;
  // --warmup in steps, or its epochs in steps of total_steps.
  long WarmupSteps() const;
  // The last epoch to train now (--epochs, or --stop-after when it comes first, or the epoch
  // that reached --target-acc with --stop-at-target).
  int LastEpoch() const;
  // config.cc: the effective configuration as (key, JSON value) pairs, one JSON object and text.
  std::vector<std::pair<std::string, std::string>> ConfigEntries() const;
  std::string ConfigJson() const;
  std::string ConfigText() const;
  // Writes rows images of `set`, order[first..first+rows), as floats in [0, 1] to host (rows x
  // features) and their labels to labels (either may be null).
  void LoadRows(const Dataset& set, const uint32_t* indices, int rows, float* host,
                uint8_t* labels) const;
  // Opens --json (rank 0) and prints the run's first line; every rank fails alike when rank 0
  // cannot open the file. what: e.g. "model 784-512-256-10 (535818 parameters), batch 64 per
  // rank".
  void Start(const std::string& what);
  // Sums the epoch's statistics and test counts across ranks and reports them on rank 0 (line,
  // JSON). test and ema_test: this rank's share of the evaluation (ema_test null without --ema).
  // val: this rank's share of the validation set (--val-fraction); class_counts: this rank's
  // correct and total per class of the test set (2 x classes), reported at the last epoch.
  void ReportEpoch(int epoch, const EpochStats& stats, const BatchStats& test,
                   const BatchStats* ema_test, double wall_s, float lr, long samples_trained,
                   const EpochExtras& extras = EpochExtras(), const BatchStats* val = nullptr,
                   const std::vector<double>* class_counts = nullptr);
  // At the end: says whether --target-acc was reached.
  void ReportTarget();
  // Progress bar on rank 0 when stderr is a terminal; --log-every lines.
  void Progress(int epoch, long step, long steps, const EpochStats& stats);
  // Rank 0's problem text (empty: none) reaches every rank (FirstRankProblem), which then throws
  // it, so each reports the reason (batonrun may stop rank 0 before it prints).
  void FailOnRootProblem(const std::string& problem);
  // --elastic: rank and world have changed (elastic.h); a new rank 0 takes over the --json file.
  void MembershipChanged();

  batonComm_t& comm;
  int rank = 0;
  int world = 1;
  const Options& opt;
  Backend& backend;
  const DataSplit& data;
  int start_epoch = 0;
  long global_step = 0;
  long total_steps = 0;          // of the whole run (--epochs), set by each mode for the schedule
  Timeline* timeline = nullptr;  // --trace: the trainer's events (null: none)
  bool joined = false;           // a replacement that joined the running job (--elastic)
  int data_ranks = 0;            // ranks whose batches make one global batch (0: world)
  Straggler straggler;           // --straggle, --straggle-random
  int lr_contributors = 1;       // what the mode passes LearningRate (for the configuration)
  double last_score = 0;         // the last epoch's validation accuracy (test without one)
  double last_train_loss = 0;    // the last epoch's mean training loss (every rank)

 private:
  double start_time_ = 0;
  int stop_epoch_ = -1;  // --stop-at-target: the epoch that reached it
  bool target_reached_ = false;
  double straggle_s_ = 0;  // straggler's figures at the last report
  long straggled_ = 0;
  long logged_steps_ = 0;           // --log-every: this rank's steps
  std::vector<double> step_times_;  // this epoch: seconds between this rank's step ends
  double last_step_end_ = 0;
  double log_loss_ = 0, log_samples_ = 0;
  // Loss jitter: this epoch's per-step mean losses on this rank (count, sum, sum of squares), and
  // where the epoch's running sums stood after the step before.
  double jitter_n_ = 0, jitter_sum_ = 0, jitter_sq_ = 0;
  double jitter_loss_ = 0, jitter_samples_ = 0;
  std::FILE* json_ = nullptr;
  int last_printed_epoch_ = -1;  // an epoch's end redone after a loss is not printed twice
  bool tty_ = false;
  double last_progress_ = 0;
};

// The data-parallel modes (sync, local SGD, parameter server): every rank holds the whole model.
class TrainingRun : public RunContext {
 public:
  TrainingRun(batonComm_t& comm, const Options& options, Backend& backend, const DataSplit& data);
  ~TrainingRun();

  // Trains options.epochs epochs in the chosen mode (from a checkpoint with --resume).
  void Run();

  // ---- used by the mode implementations ----
  // Part `part` of `parts` equal shards of the permutation (remainders dropped so every rank
  // takes the same number of steps).
  Shard ShardOf(int part, int parts) const;
  // Loads batch `step` of the shard and runs forward (keeping activations when training).
  BatchStats ForwardBatch(const std::vector<uint32_t>& order, const Shard& shard, long step,
                          bool train);
  // rank 0's parameters (and the model's state: running statistics) to everyone.
  void BroadcastParameters();
  // The mean of the model's state (batch norm's running statistics) over the ranks that trained
  // (contributes), so every rank evaluates the same model; nothing for the MLP.
  void AverageModelState(bool contributes);
  // --elastic: root's parameters, momentum and EMA to everyone.
  void ShareState(int root);
  // Allreduces a hash of the parameters with max and min; throws if ranks disagree.
  void CheckReplicas(const char* when);
  // Evaluates, sums the epoch's statistics across ranks, reports (line, JSON) and checkpoints.
  void FinishEpoch(int epoch, const EpochStats& stats, double wall_s, float lr,
                   long samples_trained, const EpochExtras& extras = EpochExtras());
  // Micro-batch `micro` of update `step` (--accumulate): the rows after those of the micro-batches
  // before it.
  BatchStats ForwardMicroBatch(const std::vector<uint32_t>& order, const Shard& shard, long step,
                               int micro);
  // The gradient of update `step` in grads(): forward and backward over --accumulate
  // micro-batches, their mean; layer_done(l) as Mlp::Backward's, once layer l's mean is final.
  BatchStats ComputeGradient(const std::vector<uint32_t>& order, const Shard& shard, long step,
                             const std::function<void(int layer)>& layer_done);

  std::unique_ptr<Model> model_storage;
  Model& model;  // --model mlp or cnn
  Optimizer optimizer;
  std::unique_ptr<ParameterEma> ema;

 private:
  // This rank's share of `set` (rank/world of it); class_counts as ReportEpoch's, or null.
  BatchStats Evaluate(const Dataset& set, const float* params, std::vector<double>* class_counts);
  void SaveCheckpoint(int epochs_done, const std::string& path);
  void LoadCheckpoint();
  uint64_t ParameterHash();

  // --sync-bn: a communicator of its own for the batch statistics, so that their allreduces,
  // issued inside backward, never interleave with the gradient buckets' on comm.
  void StartSyncBatchNorm();
  batonComm_t bn_comm_ = nullptr;

  Buffer batch_x_;
  std::vector<float> host_x_;
  std::vector<uint8_t> batch_labels_;
  Buffer grad_sum_;         // --accumulate: the micro-batches' gradients so far
  double best_score_ = -1;  // --keep-best
};

// This rank's share [begin, end) of `set` through `model` with `params` (x and host: scratch of
// at least kEvalBatch rows); class_counts (2 x classes: correct, then total) added to when not
// null. evaluation.cc.
inline constexpr int kEvalBatch = 500;
BatchStats EvaluateRows(Backend& backend, Model& model, const Dataset& set, const float* params,
                        size_t begin, size_t end, float* x, std::vector<float>& host,
                        std::vector<double>* class_counts);
// Moves the last --val-fraction of a seeded permutation of data->train into data->val.
void SplitValidation(DataSplit* data, double fraction, uint64_t seed);
// --train-subset: keeps the first `count` samples of data->train (0: all of them).
void TakeTrainSubset(DataSplit* data, long count);
// `baton-train eval --checkpoint F`: one process, no communicator; returns the exit status.
int RunEvaluation(const Options& options);

// The model's layer sizes: features, --hidden..., classes (--model mlp), or Cnn::Sizes.
std::vector<int> ModelSizes(const Options& o, const DataSplit& data);
// "784-512-256-10".
std::string SizesText(const std::vector<int>& sizes);
// --save-params: the floats as they are in memory (little-endian float32), nothing else.
void WriteParameters(const std::string& path, const std::vector<float>& params);

// The data-parallel modes, one file each: sync.cc, local_sgd.cc, param_server.cc (--mode ps,
// synchronous or --async). The model-parallel ones: model_parallel.h.
void TrainSync(TrainingRun& run);
void TrainLocal(TrainingRun& run);
// --mode ps (synchronous or --async, --ps-shards servers): param_server.cc, ps_layout.h.
void TrainParameterServer(TrainingRun& run);

}  // namespace trainer
