#include "options.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <initializer_list>
#include <utility>

#include "backend.h"
#include "util.h"

namespace trainer {
namespace {

constexpr const char* kUsage =
    R"(usage: baton-train [options]   (launch with batonrun -n N, mpirun or srun)

Data
  --data DIR              Fashion-MNIST IDX files (default /usr/share/datasets/fashion-mnist)
  --synthetic N           a deterministic synthetic set of N samples instead (tests)
Model and optimizer
  --hidden 512,256        hidden layer sizes (784-512-256-10 by default)
  --epochs N              epochs to train (5)
  --batch N               samples per rank and step (64)
  --lr X                  learning rate for one rank's batch (0.05)
  --no-lr-scaling         do not scale the rate by the number of ranks
  --warmup N              steps of linear warm-up to the scaled rate (200)
  --lr-schedule cosine|constant   after the warm-up (cosine to 0 over all epochs)
  --momentum X            (0.9)   --weight-decay X   (1e-4)
  --ema DECAY             also evaluate an exponential moving average of the parameters
  --seed N                seed of the initial weights, shuffles and synthetic data (1)
Communication
  --mode sync|ps|local    allreduce (default), parameter server, or local SGD
  --ps-shards K           with --mode ps: K server ranks (0..K-1), each owning 1/K of the
                          parameters; the other ranks are workers (1)
  --async                 with --mode ps: workers do not wait for each other
  --elastic               survive a lost rank: the others shrink the communicator and go on,
                          and replacements (batonrun --elastic --replace) join; --mode sync
                          and synchronous --mode ps (a lost worker)
  --average-every K       with --mode local: average the parameters every K steps (8)
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
Output and state
  --json FILE             one JSON object per epoch and line (rank 0)
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

// The checks of the model-parallel options that need no rank count (layout.cc checks the rest
// once the communicator says how many ranks there are).
void CheckModelParallelOptions(Options* o, bool mode_set) {
  const bool layout_given = o->dp != 0 || o->tp != 0 || o->pp != 0;
  // --tp, --pp or --dp alone mean the general layout, as Megatron's flags do.
  if (!mode_set && layout_given) o->mode = Mode::kHybrid;
  const char* mode = ModeName(*o);
  if (!ModelParallel(o->mode)) {
    if (layout_given) {
      throw TrainError(std::string("--dp, --tp, --pp and --stages need --mode tensor, pipeline or "
                                   "hybrid (not --mode ") +
                       mode + ")");
    }
    if (!o->split.empty() || o->schedule_set || o->micro_batches != 1 || !o->weight_stash ||
        o->simulate) {
      throw TrainError(
          std::string("--split, --schedule, --micro-batches, --no-weight-stash and "
                      "--simulate need --mode tensor, pipeline or hybrid (not --mode ") +
          mode + ")");
    }
    if (!o->save_params.empty() && o->mode != Mode::kSync) {
      throw TrainError("--save-params applies to --mode sync and the model-parallel modes");
    }
    return;
  }
  if (o->mode == Mode::kTensor && o->pp > 1) {
    throw TrainError("--mode tensor with --pp/--stages: use --mode hybrid --tp T --pp S");
  }
  if (o->mode == Mode::kPipeline && o->tp > 1) {
    throw TrainError("--mode pipeline with --tp: use --mode hybrid --tp T --pp S");
  }
  if (o->micro_batches > o->batch) {
    throw TrainError("--micro-batches " + std::to_string(o->micro_batches) +
                     " is larger than --batch " + std::to_string(o->batch) +
                     ": every micro-batch needs at least one sample");
  }
  if (!o->weight_stash && o->schedule != Schedule::kPipeDream) {
    throw TrainError("--no-weight-stash applies to --schedule pipedream only");
  }
  if (o->simulate && (o->mode != Mode::kPipeline || o->dp > 1)) {
    throw TrainError("--simulate runs the stages of --mode pipeline (without --dp) in one process");
  }
  // The model-parallel modes keep no checkpoint and no parameter average (yet): refuse rather
  // than silently ignore.
  auto refuse = [&](bool given, const char* flag) {
    if (given) throw TrainError(std::string(flag) + " is not supported with --mode " + mode);
  };
  refuse(!o->checkpoint.empty(), "--checkpoint");
  refuse(!o->resume.empty(), "--resume");
  refuse(o->ema > 0, "--ema");
  refuse(o->fp16_allreduce, "--fp16-allreduce");
  refuse(o->stop_after > 0, "--stop-after");
}

// --elastic needs ranks that each hold the whole model, so that the others can go on without
// one and a replacement can be given the state: say why a mode cannot.
void CheckElastic(const Options& o) {
  const std::string mode = std::string("--elastic with --mode ") + ModeName(o) + ": ";
  if (ModelParallel(o.mode)) {
    throw TrainError(mode +
                     "each rank holds a part of the model (layers or a slice of every layer), "
                     "which a lost rank takes with it, so the others cannot go on; --elastic "
                     "needs --mode sync or --mode ps");
  }
  if (o.mode == Mode::kPs && o.async) {
    throw TrainError(mode +
                     "asynchronous workers share no step to go on from after a loss, and the "
                     "servers' per-worker communicators (one batonCommSplit each) would all have "
                     "to be remade; --elastic needs synchronous --mode ps or --mode sync");
  }
  if (o.mode == Mode::kLocal) {
    throw TrainError(mode +
                     "the ranks' parameters differ between averages, so a lost rank's steps "
                     "since the last average are lost with it and the others have no common "
                     "state to go on from; --elastic needs --mode sync or --mode ps");
  }
  if (o.device == Device::kCuda) {
    throw TrainError(
        "--elastic runs on the CPU backend only: a device backend's streams hold "
        "collectives of the communicator the loss breaks");
  }
}

}  // namespace

bool ParseOptions(int argc, char** argv, Options* o, std::string* help_text) {
  ArgReader args(argc, argv);
  bool average_every_set = false;
  bool ps_shards_set = false;
  bool mode_set = false;
  while (!args.done()) {
    std::string flag = args.Next();
    if (flag == "-h" || flag == "--help") {
      *help_text = std::string(kUsage) + "                          (this build: " +
                   (cudaBackendBuilt() ? "with" : "without") + " the CUDA backend)\n";
      return true;
    } else if (flag == "--data") {
      o->data_dir = args.Value(flag);
    } else if (flag == "--synthetic") {
      o->synthetic = static_cast<size_t>(args.Integer(flag, 1, 10'000'000));
    } else if (flag == "--hidden") {
      o->hidden = ParseSizes(flag, args.Value(flag));
    } else if (flag == "--epochs") {
      o->epochs = static_cast<int>(args.Integer(flag, 1, 100000));
    } else if (flag == "--batch") {
      o->batch = static_cast<int>(args.Integer(flag, 1, 65536));
    } else if (flag == "--lr") {
      o->lr = args.Real(flag, 0, 100);
    } else if (flag == "--no-lr-scaling") {
      o->lr_scaling = false;
    } else if (flag == "--warmup") {
      o->warmup_steps = static_cast<int>(args.Integer(flag, 0, 100'000'000));
    } else if (flag == "--lr-schedule") {
      o->cosine = args.Choice<bool>(flag, {{"cosine", true}, {"constant", false}});
    } else if (flag == "--stop-after") {
      o->stop_after = static_cast<int>(args.Integer(flag, 1, 100000));
    } else if (flag == "--momentum") {
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
  if (o->fp16_allreduce && o->mode != Mode::kSync) {
    throw TrainError("--fp16-allreduce applies to --mode sync only");
  }
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
