// Command-line options of baton-train.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace trainer {

// How gradients (or parameters) travel between ranks.
enum class Mode {
  kSync,   // allreduce of the gradients every step (DDP / Horovod)
  kPs,     // parameter server on ranks 0..K-1 (--ps-shards), built from send/recv (synchronous or
           // --async)
  kLocal,  // local SGD: parameters averaged every K steps
  // Model parallelism (model_parallel.h): the model itself is split over the ranks.
  kTensor,    // Megatron-style intra-layer split over a tensor group (--tp, default all ranks)
  kPipeline,  // layers cut into stages, micro-batches sent along them (--stages, --schedule)
  kHybrid,    // --dp x --tp x --pp: replicas of tensor-parallel pipeline stages
};

// The order of a pipeline's micro-batches (pipeline_schedule.h).
enum class Schedule {
  kGpipe,      // all forwards, then all backwards, one synchronous update
  kOneFOneB,   // PipeDream-Flush: one forward one backward, same update as gpipe
  kPipeDream,  // asynchronous 1F1B without flushes, an update per micro-batch, weight stashing
};

// The update rule (optimizers.h).
enum class OptimizerKind {
  kSgd,       // SGD with momentum (PyTorch's formulation)
  kNesterov,  // SGD with Nesterov momentum (PyTorch's nesterov=True)
  kAdam,      // Adam (Kingma & Ba), L2 weight decay added to the gradient as torch.optim.Adam
  kLars,      // LARS (You et al. 2017): layer-wise trust ratio on momentum SGD
  kLamb,      // LAMB (You et al. 2019): layer-wise trust ratio on Adam's update
};

// How the peak learning rate follows the global batch (ranks x batch x accumulation).
enum class LrScaling {
  kLinear,  // lr * global / base (Goyal et al. 2017)
  kSqrt,    // lr * sqrt(global / base) (Krizhevsky 2014, Hoffer et al. 2017)
  kNone,
};

// The model the data-parallel modes train (model.h, cnn.h).
enum class ModelKind {
  kMlp,  // --hidden layers
  kCnn,  // LeNet-5 size (cnn.h)
};

// Where the math runs (backend.h).
enum class Device {
  kCpu,   // OpenBLAS on the host
  kCuda,  // a CUDA GPU (cuda_backend.cc)
};

// Everything the command line sets; defaults are the documented ones (docs/trainer.md).
struct Options {
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  size_t synthetic = 0;  // > 0: a synthetic set of this many training samples
  int epochs = 5;
  int batch = 64;    // per rank (per worker in ps mode)
  double lr = 0.05;  // for --base-batch samples; scaled by the global batch (LearningRate)
  LrScaling lr_scaling = LrScaling::kLinear;
  int base_batch = 0;         // --base-batch; 0: one rank's batch (--batch)
  int warmup_steps = 200;     // --warmup N
  double warmup_epochs = -1;  // --warmup Xep; >= 0 overrides warmup_steps
  OptimizerKind optimizer = OptimizerKind::kSgd;
  double beta1 = 0.9, beta2 = 0.999, adam_eps = 1e-8;  // adam, lamb
  double trust = 0.001;                                // lars: the trust coefficient eta
  int accumulate = 1;  // --accumulate: micro-batches per update (data-parallel modes)
  bool cosine = true;  // cosine decay to 0 after the warm-up (else constant)
  int stop_after = 0;  // > 0: stop after this epoch, as if interrupted (tests of --resume)
  double momentum = 0.9;
  bool momentum_set = false;  // --momentum given (else --async lowers it, see main.cc)
  double weight_decay = 1e-4;
  std::vector<int> hidden = {512, 256};
  ModelKind model = ModelKind::kMlp;  // --model
  bool hidden_set = false;            // --hidden given (meaningless for --model cnn)
  bool batch_norm = false;            // --batch-norm: after each convolution
  bool sync_bn = false;               // --sync-bn: batch statistics over all data-parallel ranks
  Mode mode = Mode::kSync;
  bool async = false;
  int ps_shards = 1;     // --ps-shards: server ranks 0..K-1, each owning 1/K of the parameters
  bool elastic = false;  // --elastic: survive lost ranks, take replacements in (elastic.h)
  int average_every = 8;
  double ema = 0;  // 0: off
  bool fp16_allreduce = false;
  bool overlap = true;
  double bucket_cap_mb = 25;
  double first_bucket_mb = 1;
  std::string checkpoint;
  std::string resume;
  std::string json;
  uint64_t seed = 1;
  bool check_replicas = false;
  int blas_threads = -1;  // -1: automatic (see main.cc)
  Device device = Device::kCpu;
  long max_steps = 0;  // > 0: at most this many steps per epoch (quick tests)
  bool progress = true;
  bool print_hash = false;
  std::string trace;        // --trace FILE: the job's timeline (docs/tracing.md)
  std::string save_params;  // --save-params FILE: rank 0 writes the whole model's parameters

  // Everyday features (docs/trainer.md).
  double val_fraction = 0;      // --val-fraction: held out of the training set for validation
  long train_subset = 0;        // --train-subset: train on the first N samples (0: all)
  long log_every = 0;           // --log-every N: a loss line every N steps (rank 0 or worker 0)
  double target_acc = 0;        // --target-acc X: report the time and steps to reach it
  bool stop_at_target = false;  // and stop there
  bool keep_best = false;       // --keep-best: FILE.best holds the best epoch (--checkpoint)
  std::string eval_checkpoint;  // `baton-train eval --checkpoint F`: evaluate, do not train
  bool eval = false;

  // Experiments (straggle.h, param_server_*.cc).
  std::vector<std::pair<int, double>> straggle;  // --straggle RANK:FACTOR,...
  double straggle_random_p = 0, straggle_random_factor = 1;
  int staleness = -1;       // --staleness S (--mode ps --async); -1: unbounded
  int backup_workers = 0;   // --backup-workers B (synchronous --mode ps)
  int post_local = 0;       // --post-local E: --mode local averages gradients for E epochs first
  bool adaptive_k = false;  // --adaptive-k: --average-every doubles when the loss flattens
  std::string algo;         // --algo: the gradient allreduce's algorithm (BATON_ALGO)

  // Model parallelism (--mode tensor|pipeline|hybrid). 0: not given (derived from the ranks).
  int dp = 0;
  int tp = 0;
  int pp = 0;              // --pp or --stages
  std::vector<int> split;  // --split: layers per stage (empty: balanced by multiply-adds)
  Schedule schedule = Schedule::kOneFOneB;
  bool schedule_set = false;
  int micro_batches = 1;     // per batch (gradient accumulation without stages)
  bool weight_stash = true;  // --no-weight-stash (pipedream only)
  bool simulate = false;     // --simulate: every pipeline stage in this one process
};

// True for the modes that split the model (tensor, pipeline, hybrid).
inline bool ModelParallel(Mode m) {
  return m == Mode::kTensor || m == Mode::kPipeline || m == Mode::kHybrid;
}

const char* ScheduleName(Schedule s);

// Samples per rank and update: --batch x --accumulate.
inline int StepBatch(const Options& o) {
  return o.batch * o.accumulate;
}

// Parses argv; on --help or --version sets *help_text and returns true; throws TrainError on a
// bad option.
bool ParseOptions(int argc, char** argv, Options* options, std::string* help_text);

const char* ModeName(const Options& o);
const char* OptimizerName(OptimizerKind k);
const char* LrScalingName(LrScaling s);

// The checks of option combinations (options_check.cc); throw TrainError.
void CheckModelParallelOptions(Options* o, bool mode_set);
void CheckElastic(const Options& o);
void CheckCombinations(const Options& o);

// "baton-train 0.3.0 (Baton 0.3.0, built with|without CUDA)".
std::string VersionText();

}  // namespace trainer
