// baton-train: data-parallel SGD on Fashion-MNIST with Baton (docs/trainer.md).
//
//   batonrun -n 4 baton-train --epochs 5
#include <baton.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>
#include <thread>
#include <utility>

#include "backend.h"
#include "data.h"
#include "elastic.h"
#include "layout.h"
#include "model_parallel.h"
#include "options.h"
#include "timeline.h"
#include "trainer.h"
#include "util.h"

namespace {

using trainer::TrainError;

// The launcher's rank, for messages printed before the communicator exists.
std::string LauncherRank() {
  for (const char* name :
       {"BATON_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID", "RANK"}) {
    const char* v = std::getenv(name);
    if (v != nullptr && v[0] != '\0') return v;
  }
  return "?";
}

// The first of these launcher variables (one per launcher: batonrun, Open MPI, MPICH, Slurm,
// torchrun) that holds a whole number of at least min, or -1.
int LauncherNumber(std::initializer_list<const char*> names, long min) {
  for (const char* name : names) {
    const char* v = std::getenv(name);
    if (v == nullptr || v[0] == '\0') continue;
    char* end = nullptr;
    long x = std::strtol(v, &end, 10);
    if (*end == '\0' && x >= min && x < (1L << 30)) return static_cast<int>(x);
  }
  return -1;
}

// This rank's index among the ranks on its host; the global rank when no launcher says (one
// host, or one rank per host).
int LocalRank(int rank) {
  int local = LauncherNumber({"BATON_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                              "SLURM_LOCALID", "LOCAL_RANK"},
                             0);
  return local >= 0 ? local : rank;
}

// Ranks sharing this host (0 when unknown).
int LocalRanks() {
  return std::max(LauncherNumber({"BATON_LOCAL_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE",
                                  "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE", "LOCAL_WORLD_SIZE"},
                                 1),
                  0);
}

// OpenBLAS starts one busy-waiting thread per core in every process. With several ranks on a
// host that oversubscribes the cores (4 ranks x 2 threads on 2 cores) and starves Baton's own
// progress, so unless told otherwise (--blas-threads or OPENBLAS_NUM_THREADS) each rank gets
// cores / local ranks threads, at least one.
int BlasThreads(const trainer::Options& o, int world) {
  if (o.blas_threads > 0) return o.blas_threads;
  if (std::getenv("OPENBLAS_NUM_THREADS") != nullptr) return -1;
  int local = LocalRanks();
  if (local <= 0) local = world;
  int cores = static_cast<int>(std::thread::hardware_concurrency());
  return std::max(1, cores / std::max(local, 1));
}

// An error this rank has already printed.
class ReportedError : public TrainError {
 public:
  using TrainError::TrainError;
};

// The ranks that each take their own samples of every step (the parts the training set is cut
// into), and what they are called.
std::pair<int, const char*> DataParts(const trainer::Options& o, int world,
                                      const trainer::Layout& layout) {
  if (trainer::ModelParallel(o.mode)) return {layout.dp, "replica(s)"};
  if (o.mode == trainer::Mode::kPs) return {world - o.ps_shards, "worker(s)"};
  return {world, "rank(s)"};
}

// "" when a step has samples; else why not. Every rank knows the options, the rank count and
// the data (the same files, or the same synthetic set), so every rank finds it alike.
std::string TooFewSamples(const trainer::Options& o, int world, const trainer::Layout& layout,
                          size_t samples) {
  const auto [parts, who] = DataParts(o, world, layout);
  const size_t step = static_cast<size_t>(parts) * static_cast<size_t>(trainer::StepBatch(o));
  if (samples >= step) return "";
  std::string text = "too few samples: one step takes " + std::to_string(step) + " (" +
                     std::to_string(parts) + " " + who + " x --batch " + std::to_string(o.batch);
  if (o.accumulate > 1) text += " x --accumulate " + std::to_string(o.accumulate);
  text += ") but the training set has " + std::to_string(samples);
  if (o.val_fraction > 0 || o.train_subset > 0) {
    text += std::string(" (after ") + (o.val_fraction > 0 ? "--val-fraction" : "") +
            (o.val_fraction > 0 && o.train_subset > 0 ? " and " : "") +
            (o.train_subset > 0 ? "--train-subset" : "") + ")";
  }
  return text + ": give fewer ranks, a smaller --batch or more samples";
}

// Loads the data on every rank and agrees on the outcome, so a rank that cannot read its files
// makes every rank stop with a message instead of leaving the others in a collective.
trainer::DataSplit LoadData(const trainer::Options& o, batonComm_t comm, int rank,
                            const trainer::Layout& layout) {
  trainer::DataSplit data;
  std::string problem;
  try {
    data = o.synthetic > 0 ? trainer::MakeSynthetic(o.synthetic, o.seed)
                           : trainer::LoadFashionMnist(o.data_dir);
  } catch (const TrainError& e) {
    problem = e.what();
  }
  // Before any collective: a split that cannot work is a usage error every rank finds alike,
  // and a rank that left after a collective could break a peer still finishing it.
  if (problem.empty()) {
    trainer::SplitValidation(&data, o.val_fraction, o.seed);
    trainer::TakeTrainSubset(&data, o.train_subset);
    int world = 1;
    batonCommCount(comm, &world);
    std::string few = TooFewSamples(o, world, layout, data.train.count);
    if (!few.empty()) throw trainer::UsageError(few);
  }
  // Said before the check's collectives: once they complete, the first rank to exit makes
  // batonrun stop the others, and a message printed after it could be lost.
  if (!problem.empty())
    std::fprintf(stderr, "baton-train: rank %d: error: %s\n", rank, problem.c_str());
  const std::string first = trainer::FirstRankProblem(problem, comm, "data check");
  if (!problem.empty()) throw ReportedError(problem);
  if (!first.empty()) throw TrainError("another rank could not load the data: " + first);
  return data;
}

// Why this rank could not write one of the files it will write, or "": checked before training,
// so that a wrong path stops the job at once rather than after an epoch (--checkpoint) or at the
// end (--save-params, --trace). Rank 0 writes the checkpoints and the parameters, every rank its
// own timeline file.
std::string OutputProblem(const trainer::Options& o, int rank) {
  auto problem = [](const char* flag, const std::string& path, const std::string& file) {
    const std::string why = trainer::CannotWrite(file);
    if (why.empty()) return std::string();
    return std::string(flag) + " " + path + ": cannot write " + file + ": " + why;
  };
  std::string p;
  if (!o.trace.empty()) p = problem("--trace", o.trace, trainer::Timeline::PathFor(o.trace, rank));
  if (rank != 0 || !p.empty()) return p;
  if (!o.save_params.empty()) p = problem("--save-params", o.save_params, o.save_params);
  // A checkpoint goes to FILE.tmp, then is renamed over FILE (checkpoint.cc).
  for (const std::string& path : {o.checkpoint, o.keep_best ? o.checkpoint + ".best" : ""}) {
    if (!p.empty() || path.empty()) continue;
    p = problem("--checkpoint", path, path + ".tmp");
    struct stat st {};
    if (p.empty() && stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
      p = "--checkpoint " + path + ": cannot replace " + path + ": " + std::strerror(EISDIR);
  }
  return p;
}

// A replacement that batonrun --elastic --replace started for a lost rank: it loads the data,
// asks to join (elastic_join.h), grows into the running job (batonCommGrow) and trains on from
// the state the others hand it.
int RunReplacement(const trainer::Options& options) {
  const std::string label = LauncherRank();
  if (!options.elastic) {
    std::fprintf(stderr,
                 "baton-train: rank %s: error: started to replace a lost rank (batonrun "
                 "--replace) but without --elastic\n",
                 label.c_str());
    return 2;
  }
  const double started = trainer::NowSeconds();
  batonComm_t comm = nullptr;
  std::string who = label + " (replacement)";
  std::unique_ptr<trainer::Backend> backend;
  try {
    backend = trainer::MakeCpuBackend(BlasThreads(options, std::max(LocalRanks(), 1)));
    trainer::DataSplit data = options.synthetic > 0
                                  ? trainer::MakeSynthetic(options.synthetic, options.seed)
                                  : trainer::LoadFashionMnist(options.data_dir);
    trainer::SplitValidation(&data, options.val_fraction, options.seed);
    trainer::TakeTrainSubset(&data, options.train_subset);
    const double ready = trainer::NowSeconds();
    comm = trainer::JoinRunningJob();
    if (comm == nullptr) {
      std::printf("baton-train: rank %s: the job finished before this replacement could join\n",
                  label.c_str());
      return 0;
    }
    int rank = 0, world = 0;
    batonCommUserRank(comm, &rank);
    batonCommCount(comm, &world);
    who = std::to_string(rank);
    std::fprintf(stderr,
                 "baton-train: rank %s (replacement) joined as rank %d of %d: %.2f s to start "
                 "(data, model), %.2f s to join\n",
                 label.c_str(), rank, world, ready - started, trainer::NowSeconds() - ready);
    trainer::Timeline timeline(options.trace, rank);
    trainer::TrainingRun run(comm, options, *backend, data);
    run.joined = true;
    run.timeline = &timeline;
    run.Run();
    timeline.Write();
    batonResult_t r = batonCommDestroy(comm);
    if (r != batonSuccess) {
      std::fprintf(stderr, "baton-train: rank %s: batonCommDestroy: %s\n", who.c_str(),
                   batonGetErrorString(r));
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "baton-train: rank %s: error: %s\n", who.c_str(), e.what());
    if (comm != nullptr) batonCommAbort(comm);
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  trainer::Options options;
  try {
    std::string help;
    if (trainer::ParseOptions(argc, argv, &options, &help)) {
      std::fputs(help.c_str(), stdout);
      return 0;
    }
  } catch (const TrainError& e) {
    std::fprintf(stderr, "baton-train: rank %s: error: %s\n", LauncherRank().c_str(), e.what());
    return 2;
  }

  if (options.eval) return trainer::RunEvaluation(options);
  // Baton's algorithm choice is BATON_ALGO, read once when the first communicator is made; the
  // API has no per-communicator setting, so --algo sets it for this process before that.
  if (!options.algo.empty() && options.algo != "auto") {
    setenv("BATON_ALGO", ("allreduce:" + options.algo).c_str(), 1);
  }
  // Baton records its calls on the same timeline (FILE.rankN.json beside ours).
  if (!options.trace.empty()) setenv("BATON_TRACE_FILE", options.trace.c_str(), 1);
  if (const char* join = std::getenv("BATON_ELASTIC_JOIN"); join != nullptr && join[0] == '1') {
    return RunReplacement(options);
  }
  batonComm_t comm = nullptr;
  batonResult_t joined;
  if (LauncherRank() == "?" && std::getenv("BATON_ROOT") == nullptr) {
    // Started without a launcher: train alone in a one-rank communicator.
    batonUniqueId id;
    joined = batonGetUniqueId(&id);
    if (joined == batonSuccess) joined = batonCommInitRank(&comm, 1, id, 0);
  } else {
    joined = batonCommInitFromEnv(&comm);
  }
  if (joined != batonSuccess) {
    std::fprintf(stderr, "baton-train: rank %s: cannot join the job: %s\n", LauncherRank().c_str(),
                 batonGetLastError(nullptr));
    return 1;
  }
  int rank = 0;
  int world = 1;
  batonCommUserRank(comm, &rank);
  batonCommCount(comm, &world);
  // A model-parallel layout that cannot work on this many ranks is a usage error that every rank
  // finds on its own, before any collective: nobody is left waiting.
  trainer::Layout layout;
  if (trainer::ModelParallel(options.mode)) {
    try {
      layout = trainer::MakeLayout(options, world, rank);
    } catch (const TrainError& e) {
      std::fprintf(stderr, "baton-train: rank %d: error: %s\n", rank, e.what());
      batonCommDestroy(comm);
      return 2;
    }
  }
  // So is a parameter server without a worker.
  if (options.mode == trainer::Mode::kPs && world <= options.ps_shards) {
    if (options.ps_shards == 1) {
      std::fprintf(stderr,
                   "baton-train: rank %d: error: --mode ps needs at least 2 ranks (rank 0 is the "
                   "server, the others work)\n",
                   rank);
    } else {
      std::fprintf(stderr,
                   "baton-train: rank %d: error: --mode ps with %d server(s) needs at least %d "
                   "ranks (ranks 0..%d serve, the others work); this job has %d\n",
                   rank, options.ps_shards, options.ps_shards + 1, options.ps_shards - 1, world);
    }
    batonCommDestroy(comm);
    return 2;
  }
  if (options.backup_workers > 0 && options.backup_workers >= world - options.ps_shards) {
    std::fprintf(stderr,
                 "baton-train: rank %d: error: --backup-workers %d leaves no gradient to apply: "
                 "it must be below the %d worker(s)\n",
                 rank, options.backup_workers, world - options.ps_shards);
    batonCommDestroy(comm);
    return 2;
  }
  // Outside the try block, so that after an error the communicator is aborted before the backend
  // is destroyed: a device backend's destructor waits for its stream, which may still hold a
  // collective that only the abort ends.
  std::unique_ptr<trainer::Backend> backend;
  try {
    // Asynchrony itself acts as momentum, about 1 - 1/W for W workers (Mitliagkas et al. 2016,
    // "Asynchrony begets momentum"); on top of 0.9 it diverges, so --async compensates unless
    // --momentum is given.
    const int workers = world - options.ps_shards;
    const bool adam_like = options.optimizer == trainer::OptimizerKind::kAdam ||
                           options.optimizer == trainer::OptimizerKind::kLamb;
    if (options.async && !options.momentum_set && workers > 1 && !adam_like) {
      options.momentum = std::max(0.0, options.momentum - (1.0 - 1.0 / workers));
      if (rank == 0) {
        std::printf(
            "async: explicit momentum lowered to %.3f for %d workers (--momentum sets it)\n",
            options.momentum, workers);
      }
    }
    // PipeDream's stage s applies gradients computed S - s - 1 updates earlier: the same implicit
    // momentum, about 1 - 1/S at the first stage; 0.9 on top diverged with 4 stages.
    if (options.schedule == trainer::Schedule::kPipeDream && layout.pp > 1 &&
        !options.momentum_set) {
      options.momentum = std::max(0.0, options.momentum - (1.0 - 1.0 / layout.pp));
      if (rank == 0) {
        std::printf(
            "pipedream: explicit momentum lowered to %.3f for %d stages (--momentum sets it)\n",
            options.momentum, layout.pp);
      }
    }
    backend = options.device == trainer::Device::kCuda
                  ? trainer::MakeCudaBackend(LocalRank(rank))
                  : trainer::MakeCpuBackend(BlasThreads(options, world));
    trainer::DataSplit data = LoadData(options, comm, rank, layout);
    if (std::string p =
            trainer::FirstRankProblem(OutputProblem(options, rank), comm, "output check");
        !p.empty())
      throw trainer::UsageError(p);
    trainer::Timeline timeline(options.trace, rank);
    if (trainer::ModelParallel(options.mode)) {
      trainer::RunContext run(comm, options, *backend, data);
      run.timeline = &timeline;
      if (options.simulate) {
        trainer::SimulatePipeline(run, layout);
      } else {
        trainer::TrainModelParallel(run, layout);
      }
    } else {
      trainer::TrainingRun run(comm, options, *backend, data);
      run.timeline = &timeline;
      run.Run();
    }
    timeline.Write();
    batonResult_t r = batonCommDestroy(comm);
    if (r != batonSuccess) {
      std::fprintf(stderr, "baton-train: rank %d: batonCommDestroy: %s\n", rank,
                   batonGetErrorString(r));
      return 1;
    }
    return 0;
  } catch (const ReportedError&) {
    batonCommAbort(comm);
    return 1;
  } catch (const trainer::UsageError& e) {
    // Found by every rank alike (layout.cc): a usage error, as for a bad option.
    std::fprintf(stderr, "baton-train: rank %d: error: %s\n", rank, e.what());
    batonCommAbort(comm);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "baton-train: rank %d: error: %s\n", rank, e.what());
    // Abort rather than destroy: peers blocked in a collective with us see an error at once.
    batonCommAbort(comm);
    return 1;
  }
}
