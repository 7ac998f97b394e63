#include "options.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <initializer_list>
#include <tuple>
#include <utility>

#include "backend.h"
#include "straggle.h"
#include "util.h"

namespace trainer {
namespace {

constexpr const char* kUsage =
    R"(usage: baton-train [options]   (launch with batonrun -n N, mpirun or srun)
       baton-train eval --checkpoint FILE [--data DIR | --synthetic N]   (evaluate, no training)
       baton-train --version

Data
  --data DIR              Fashion-MNIST IDX files (default /usr/share/datasets/fashion-mnist)
  --synthetic N           a deterministic synthetic set of N samples instead (tests)
Model and optimizer
  --model mlp|cnn         the MLP (--hidden) or a LeNet-5-size CNN (conv 5x5 6, pool, conv
                          5x5 16, pool, fc 120, 84, 10; im2col + OpenBLAS, --device cpu only)
  --hidden 512,256        hidden layer sizes (784-512-256-10 by default)
  --batch-norm            --model cnn: batch norm after each convolution (torch's BatchNorm2d)
  --sync-bn               --batch-norm statistics over all ranks' batches every step, as torch's
                          SyncBatchNorm (--mode sync)
  --epochs N              epochs to train (5)
  --batch N               samples per rank and step (64)
  --optimizer sgd|nesterov|adam|lars|lamb   the update rule (sgd: with momentum)
  --lr X                  learning rate for --base-batch samples (0.05)
  --lr-scaling linear|sqrt|none   scale the rate by global batch / --base-batch (linear)
  --base-batch N          the batch --lr is meant for (default: --batch, i.e. one rank's)
  --no-lr-scaling         the same as --lr-scaling none
  --warmup N | Xep        linear warm-up to the scaled rate over N steps or X epochs (200)
  --lr-schedule cosine|constant   after the warm-up (cosine to 0 over all epochs)
  --momentum X            (0.9; adam, lamb: beta1)  --beta2 X (0.999)  --eps X (1e-8)
  --weight-decay X        (1e-4; lars, lamb: not on biases)
  --trust-coef X          lars: the trust coefficient eta (0.001)
  --accumulate N          sum gradients over N micro-batches of --batch before one
                          allreduce/update (sync, ps, local)
  --ema DECAY             also evaluate an exponential moving average of the parameters
  --seed N                seed of the initial weights, shuffles and synthetic data (1)
Communication
  --mode sync|ps|local    allreduce (default), parameter server, or local SGD
  --ps-shards K           with --mode ps: K server ranks (0..K-1), each owning 1/K of the
                          parameters; the other ranks are workers (1)
  --async                 with --mode ps: workers do not wait for each other
  --staleness S           with --async: no worker more than S steps ahead of the slowest
                          (stale synchronous parallel; 0: lockstep; default unbounded)
  --backup-workers B      synchronous --mode ps: each step applies the first W-B gradients
                          to arrive and drops the rest (Chen et al. 2016)
  --elastic               survive a lost rank: the others shrink the communicator and go on,
                          and replacements (batonrun --elastic --replace) join; --mode sync
                          and synchronous --mode ps (a lost worker)
  --average-every K       with --mode local: average the parameters every K steps (8)
  --post-local E          with --mode local: average gradients every step (synchronous) for
                          the first E epochs, then local SGD (Lin et al. 2020)
  --adaptive-k            with --mode local: double K after an epoch whose training loss fell
                          by less than 10% (up to 64 K)
  --algo ring|rhd|tree|hier|auto   the allreduce's algorithm (sets BATON_ALGO=allreduce:X for
                          this process; auto: Baton's cost model, or BATON_ALGO as set)
  --no-overlap            one allreduce after backward instead of overlapped buckets
  --bucket-cap-mb X       bucket size (25)     --first-bucket-mb X   first bucket (1)
  --fp16-allreduce        send gradients as fp16
Model parallelism (docs/trainer.md)
  --mode tensor           Megatron-style: each layer's weights split over a tensor group
  --mode pipeline         the layers cut into stages over the ranks, micro-batches sent along
  --mode hybrid           --dp x --tp x --pp ranks (implied by --tp or --pp without --mode)
  --dp D  --tp T  --pp S  data-parallel replicas, tensor group size, pipeline stages
  --stages S              the same as --pp
  --split 1,2             layers per stage (default: balanced by multiply-adds)
  --schedule gpipe|1f1b|pipedream   the pipeline's order (1f1b)
  --micro-batches M       micro-batches per batch (1); without stages: gradient accumulation
  --no-weight-stash       pipedream: backward with the newest weights (shows why stashing matters)
  --simulate              run every stage of --mode pipeline in this one process (one rank)
  --save-params FILE      rank 0 writes the whole model's final parameters (float32, W1 b1 W2 ...)
Experiments
  --straggle RANK:F,...   these ranks take F times as long per step (by sleeping)
  --straggle-random P:F   each rank's step takes F times as long with probability P
Evaluation and output
  --val-fraction F        hold out F of the training set as a validation set (0)
  --train-subset N        train on the first N samples of the training set (after
                          --val-fraction; the test set stays whole)
  --target-acc X          report time and steps to reach accuracy X (validation if any)
  --stop-at-target        and stop training there
  --log-every N           a loss line every N steps
  --keep-best             with --checkpoint FILE: FILE.best holds the best epoch's state
  --json FILE             the configuration, then one JSON object per epoch and line (rank 0)
  --version               print the version and exit
  --checkpoint FILE       write the training state after every epoch (rank 0)
  --resume FILE           continue from a checkpoint
  --no-progress           no progress bar (it is only drawn on a terminal anyway)
  --check-replicas        compare a parameter hash across ranks after every step
  --print-hash            print a hash of the final parameters
  --max-steps N           at most N steps per epoch
  --trace FILE            write a timeline of this job (Baton's calls and the trainer's steps,
                          forward, backward, buckets) to FILE as Chrome trace JSON (Perfetto)
  --stop-after N          stop after epoch N as if interrupted (the schedule still spans --epochs)
  --blas-threads N        OpenBLAS threads per rank (default: cores / ranks on this host)
Device
  --device cpu|cuda       where the math runs (cpu); cuda: each rank uses GPU
                          (local rank) % (visible GPUs), gradients allreduced on the device
)";

// Option values with full-string checks: "12abc", "", out-of-range values are errors.
class ArgReader {
 public:
  ArgReader(int argc, char** argv) : argc_(argc), argv_(argv) {}
  bool done() const { return i_ >= argc_; }
  int index() const { return i_; }  // of the next argument
  std::string Next() { return argv_[i_++]; }
  std::string Value(const std::string& flag) {
    if (i_ >= argc_) throw TrainError(flag + " needs a value (see --help)");
    return argv_[i_++];
  }
  long Integer(const std::string& flag, long lo, long hi) {
    std::string v = Value(flag);
    errno = 0;
    char* end = nullptr;
    long x = std::strtol(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || errno != 0 || x < lo || x > hi) {
      throw TrainError(flag + ": '" + v + "' is not an integer in [" + std::to_string(lo) + ", " +
                       std::to_string(hi) + "]");
    }
    return x;
  }
  double Real(const std::string& flag, double lo, double hi) {
    std::string v = Value(flag);
    errno = 0;
    char* end = nullptr;
    double x = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0' || errno != 0 || !std::isfinite(x) || x < lo || x > hi) {
      throw TrainError(flag + ": '" + v + "' is not a number in [" + std::to_string(lo) + ", " +
                       std::to_string(hi) + "]");
    }
    return x;
  }
  // One of a fixed set of names, each standing for a value.
  template <typename T>
  T Choice(const std::string& flag, std::initializer_list<std::pair<const char*, T>> names) {
    std::string v = Value(flag);
    std::string listed;
    for (const auto& [name, x] : names) {
      if (v == name) return x;
      listed += (listed.empty() ? "" : ", ") + std::string(name);
    }
    throw TrainError(flag + ": '" + v + "' is not one of " + listed);
  }

 private:
  int argc_;
  char** argv_;
  int i_ = 1;
};

// --warmup N (steps) or --warmup Xep (epochs, fractions allowed).
void ParseWarmup(const std::string& v, Options* o) {
  const bool epochs = v.size() > 2 && v.compare(v.size() - 2, 2, "ep") == 0;
  const std::string number = epochs ? v.substr(0, v.size() - 2) : v;
  char* end = nullptr;
  errno = 0;
  if (epochs) {
    double x = std::strtod(number.c_str(), &end);
    if (number.empty() || *end != '\0' || errno != 0 || !std::isfinite(x) || x < 0 || x > 1e5) {
      throw TrainError("--warmup: '" + v + "' is not a number of epochs in [0, 100000] (e.g. 2ep)");
    }
    o->warmup_epochs = x;
  } else {
    long x = std::strtol(number.c_str(), &end, 10);
    if (number.empty() || *end != '\0' || errno != 0 || x < 0 || x > 100'000'000) {
      throw TrainError("--warmup: '" + v +
                       "' is neither a number of steps in [0, 100000000] nor of epochs (e.g. 2ep)");
    }
    o->warmup_steps = static_cast<int>(x);
    o->warmup_epochs = -1;
  }
}

std::vector<int> ParseSizes(const std::string& flag, const std::string& v) {
  std::vector<int> sizes;
  size_t start = 0;
  while (start <= v.size()) {
    size_t comma = v.find(',', start);
    std::string part =
        v.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    char* end = nullptr;
    long x = std::strtol(part.c_str(), &end, 10);
    if (part.empty() || *end != '\0' || x < 1 || x > 65536) {
      throw TrainError(flag + ": '" + v + "' is not a comma-separated list of sizes in [1, 65536]");
    }
    sizes.push_back(static_cast<int>(x));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return sizes;
}

}  // namespace

bool ParseOptions(int argc, char** argv, Options* o, std::string* help_text) {
  ArgReader args(argc, argv);
  bool average_every_set = false;
  bool ps_shards_set = false;
  bool mode_set = false;
  while (!args.done()) {
    std::string flag = args.Next();
    if (flag == "eval" && args.index() == 2) {
      o->eval = true;
      continue;
    }
    if (o->eval && flag != "--checkpoint" && flag != "--data" && flag != "--synthetic" &&
        flag != "--blas-threads" && flag != "-h" && flag != "--help") {
      throw TrainError("eval takes --checkpoint, --data, --synthetic and --blas-threads (not " +
                       flag + "): the model and seed come from the checkpoint");
    }
    if (flag == "--version") {
      *help_text = VersionText() + "\n";
      return true;
    } else if (flag == "-h" || flag == "--help") {
      *help_text = std::string(kUsage) + "                          (this build: " +
                   (cudaBackendBuilt() ? "with" : "without") + " the CUDA backend)\n";
      return true;
    } else if (flag == "--data") {
      o->data_dir = args.Value(flag);
    } else if (flag == "--synthetic") {
      o->synthetic = static_cast<size_t>(args.Integer(flag, 1, 10'000'000));
    } else if (flag == "--hidden") {
      o->hidden = ParseSizes(flag, args.Value(flag));
      o->hidden_set = true;
    } else if (flag == "--model") {
      o->model = args.Choice<ModelKind>(flag, {{"mlp", ModelKind::kMlp}, {"cnn", ModelKind::kCnn}});
    } else if (flag == "--batch-norm") {
      o->batch_norm = true;
    } else if (flag == "--sync-bn") {
      o->sync_bn = true;
    } else if (flag == "--epochs") {
      o->epochs = static_cast<int>(args.Integer(flag, 1, 100000));
    } else if (flag == "--batch") {
      o->batch = static_cast<int>(args.Integer(flag, 1, 65536));
    } else if (flag == "--lr") {
      o->lr = args.Real(flag, 0, 100);
    } else if (flag == "--no-lr-scaling") {
      o->lr_scaling = LrScaling::kNone;
    } else if (flag == "--lr-scaling") {
      o->lr_scaling = args.Choice<LrScaling>(
          flag,
          {{"linear", LrScaling::kLinear}, {"sqrt", LrScaling::kSqrt}, {"none", LrScaling::kNone}});
    } else if (flag == "--base-batch") {
      o->base_batch = static_cast<int>(args.Integer(flag, 1, 1 << 30));
    } else if (flag == "--warmup") {
      ParseWarmup(args.Value(flag), o);
    } else if (flag == "--optimizer") {
      o->optimizer = args.Choice<OptimizerKind>(flag, {{"sgd", OptimizerKind::kSgd},
                                                       {"nesterov", OptimizerKind::kNesterov},
                                                       {"adam", OptimizerKind::kAdam},
                                                       {"lars", OptimizerKind::kLars},
                                                       {"lamb", OptimizerKind::kLamb}});
    } else if (flag == "--beta2") {
      o->beta2 = args.Real(flag, 0, 0.999999999);
    } else if (flag == "--eps") {
      o->adam_eps = args.Real(flag, 1e-30, 1);
    } else if (flag == "--trust-coef") {
      o->trust = args.Real(flag, 1e-9, 1000);
    } else if (flag == "--accumulate") {
      o->accumulate = static_cast<int>(args.Integer(flag, 1, 65536));
    } else if (flag == "--train-subset") {
      o->train_subset = args.Integer(flag, 1, 1L << 40);
    } else if (flag == "--val-fraction") {
      o->val_fraction = args.Real(flag, 0, 0.9);
    } else if (flag == "--log-every") {
      o->log_every = args.Integer(flag, 1, 1L << 40);
    } else if (flag == "--target-acc") {
      o->target_acc = args.Real(flag, 0, 1);
      if (o->target_acc == 0) throw TrainError("--target-acc: the accuracy must be in (0, 1]");
    } else if (flag == "--stop-at-target") {
      o->stop_at_target = true;
    } else if (flag == "--straggle") {
      o->straggle = ParseStraggle(flag, args.Value(flag));
    } else if (flag == "--straggle-random") {
      std::tie(o->straggle_random_p, o->straggle_random_factor) =
          ParseStraggleRandom(flag, args.Value(flag));
    } else if (flag == "--staleness") {
      o->staleness = static_cast<int>(args.Integer(flag, 0, 1 << 30));
    } else if (flag == "--backup-workers") {
      o->backup_workers = static_cast<int>(args.Integer(flag, 1, 1 << 20));
    } else if (flag == "--post-local") {
      o->post_local = static_cast<int>(args.Integer(flag, 1, 100000));
    } else if (flag == "--adaptive-k") {
      o->adaptive_k = true;
    } else if (flag == "--algo") {
      o->algo = args.Choice<std::string>(
          flag,
          {{"ring", "ring"}, {"rhd", "rhd"}, {"tree", "tree"}, {"hier", "hier"}, {"auto", "auto"}});
    } else if (flag == "--keep-best") {
      o->keep_best = true;
    } else if (flag == "--lr-schedule") {
      o->cosine = args.Choice<bool>(flag, {{"cosine", true}, {"constant", false}});
    } else if (flag == "--stop-after") {
      o->stop_after = static_cast<int>(args.Integer(flag, 1, 100000));
    } else if (flag == "--momentum" || flag == "--beta1") {
      o->momentum = args.Real(flag, 0, 0.999999);
      o->momentum_set = true;
    } else if (flag == "--weight-decay") {
      o->weight_decay = args.Real(flag, 0, 1);
    } else if (flag == "--ema") {
      o->ema = args.Real(flag, 0, 0.999999999);
      if (o->ema == 0) throw TrainError("--ema: the decay must be in (0, 1), e.g. 0.999");
    } else if (flag == "--seed") {
      o->seed = static_cast<uint64_t>(args.Integer(flag, 0, 0x7fffffffffffffffL));
    } else if (flag == "--mode") {
      o->mode = args.Choice<Mode>(flag, {{"sync", Mode::kSync},
                                         {"ps", Mode::kPs},
                                         {"local", Mode::kLocal},
                                         {"tensor", Mode::kTensor},
                                         {"pipeline", Mode::kPipeline},
                                         {"hybrid", Mode::kHybrid}});
      mode_set = true;
    } else if (flag == "--dp") {
      o->dp = static_cast<int>(args.Integer(flag, 1, 65536));
    } else if (flag == "--tp") {
      o->tp = static_cast<int>(args.Integer(flag, 1, 65536));
    } else if (flag == "--pp" || flag == "--stages") {
      int s = static_cast<int>(args.Integer(flag, 1, 65536));
      if (o->pp != 0 && o->pp != s) throw TrainError("--pp and --stages disagree");
      o->pp = s;
    } else if (flag == "--split") {
      o->split = ParseSizes(flag, args.Value(flag));
    } else if (flag == "--schedule") {
      o->schedule = args.Choice<Schedule>(flag, {{"gpipe", Schedule::kGpipe},
                                                 {"1f1b", Schedule::kOneFOneB},
                                                 {"pipedream", Schedule::kPipeDream}});
      o->schedule_set = true;
    } else if (flag == "--micro-batches") {
      o->micro_batches = static_cast<int>(args.Integer(flag, 1, 65536));
    } else if (flag == "--no-weight-stash") {
      o->weight_stash = false;
    } else if (flag == "--simulate") {
      o->simulate = true;
    } else if (flag == "--save-params") {
      o->save_params = args.Value(flag);
    } else if (flag == "--async") {
      o->async = true;
    } else if (flag == "--ps-shards") {
      o->ps_shards = static_cast<int>(args.Integer(flag, 1, 65536));
      ps_shards_set = true;
    } else if (flag == "--elastic") {
      o->elastic = true;
    } else if (flag == "--average-every") {
      o->average_every = static_cast<int>(args.Integer(flag, 1, 1'000'000));
      average_every_set = true;
    } else if (flag == "--no-overlap") {
      o->overlap = false;
    } else if (flag == "--bucket-cap-mb") {
      o->bucket_cap_mb = args.Real(flag, 0, 1 << 20);
    } else if (flag == "--first-bucket-mb") {
      o->first_bucket_mb = args.Real(flag, 0, 1 << 20);
    } else if (flag == "--fp16-allreduce") {
      o->fp16_allreduce = true;
    } else if (flag == "--json") {
      o->json = args.Value(flag);
    } else if (flag == "--checkpoint") {
      if (o->eval) {
        o->eval_checkpoint = args.Value(flag);
        continue;
      }
      o->checkpoint = args.Value(flag);
    } else if (flag == "--resume") {
      o->resume = args.Value(flag);
    } else if (flag == "--no-progress") {
      o->progress = false;
    } else if (flag == "--check-replicas") {
      o->check_replicas = true;
    } else if (flag == "--print-hash") {
      o->print_hash = true;
    } else if (flag == "--trace") {
      o->trace = args.Value(flag);
    } else if (flag == "--max-steps") {
      o->max_steps = args.Integer(flag, 1, 1L << 40);
    } else if (flag == "--device") {
      o->device = args.Choice<Device>(flag, {{"cpu", Device::kCpu}, {"cuda", Device::kCuda}});
    } else if (flag == "--blas-threads") {
      o->blas_threads = static_cast<int>(args.Integer(flag, 1, 1024));
    } else {
      throw TrainError("unknown option '" + flag + "' (see --help)");
    }
  }
  CheckModelParallelOptions(o, mode_set);
  if (o->async && o->mode != Mode::kPs) throw TrainError("--async needs --mode ps");
  if (ps_shards_set && o->mode != Mode::kPs) throw TrainError("--ps-shards needs --mode ps");
  if (o->elastic) CheckElastic(*o);
  if (average_every_set && o->mode != Mode::kLocal) {
    throw TrainError("--average-every needs --mode local");
  }
  CheckCombinations(*o);
  return false;
}

const char* ModeName(const Options& o) {
  switch (o.mode) {
    case Mode::kSync:
      return "sync";
    case Mode::kPs:
      return o.async ? "ps-async" : "ps";
    case Mode::kLocal:
      return "local";
    case Mode::kTensor:
      return "tensor";
    case Mode::kPipeline:
      return "pipeline";
    case Mode::kHybrid:
      return "hybrid";
  }
  return "?";
}

const char* LrScalingName(LrScaling s) {
  switch (s) {
    case LrScaling::kLinear:
      return "linear";
    case LrScaling::kSqrt:
      return "sqrt";
    case LrScaling::kNone:
      return "none";
  }
  return "?";
}

const char* ScheduleName(Schedule s) {
  switch (s) {
    case Schedule::kGpipe:
      return "gpipe";
    case Schedule::kOneFOneB:
      return "1f1b";
    case Schedule::kPipeDream:
      return "pipedream";
  }
  return "?";
}

}  // namespace trainer
