// The checks of option combinations, after parsing: what cannot work together is a usage error
// (exit 2 on every rank, main.cc), never silently ignored.
#include <string>

#include "options.h"
#include "util.h"

namespace trainer {

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

// --model cnn, --batch-norm and --sync-bn.
void CheckModel(const Options& o) {
  if (o.model != ModelKind::kCnn) {
    if (o.batch_norm || o.sync_bn) {
      throw TrainError("--batch-norm and --sync-bn need --model cnn (the MLP has no batch norm)");
    }
    return;
  }
  if (ModelParallel(o.mode)) {
    throw TrainError(std::string("--model cnn is not supported with --mode ") + ModeName(o) +
                     " (it splits the MLP's fully connected layers); use --mode sync, ps or local");
  }
  if (o.device == Device::kCuda) {
    throw TrainError(
        "--model cnn is not supported with --device cuda (its convolutions run on "
        "the CPU backend only); use --device cpu");
  }
  if (o.hidden_set) throw TrainError("--hidden sets the MLP's layers; --model cnn has its own");
  if (o.sync_bn) {
    if (!o.batch_norm) throw TrainError("--sync-bn needs --batch-norm");
    if (o.mode != Mode::kSync) {
      throw TrainError(std::string("--sync-bn needs --mode sync (ranks that step together); not "
                                   "--mode ") +
                       ModeName(o));
    }
    if (o.elastic) throw TrainError("--sync-bn is not supported with --elastic");
  }
}

void CheckCombinations(const Options& o) {
  if (o.eval) {
    if (o.eval_checkpoint.empty()) throw TrainError("eval needs --checkpoint FILE");
    return;
  }
  CheckModel(o);
  if (o.fp16_allreduce && o.mode != Mode::kSync) {
    throw TrainError("--fp16-allreduce applies to --mode sync only");
  }
  if (o.stop_at_target && o.target_acc <= 0)
    throw TrainError("--stop-at-target needs --target-acc X");
  if (o.keep_best && o.checkpoint.empty()) {
    throw TrainError("--keep-best needs --checkpoint FILE (the best epoch goes to FILE.best)");
  }
  const bool adam_like = o.optimizer == OptimizerKind::kAdam || o.optimizer == OptimizerKind::kLamb;
  if (!adam_like && (o.beta2 != 0.999 || o.adam_eps != 1e-8)) {
    throw TrainError("--beta2 and --eps apply to --optimizer adam and lamb");
  }
  if (o.optimizer != OptimizerKind::kLars && o.trust != 0.001) {
    throw TrainError("--trust-coef applies to --optimizer lars");
  }
  const std::string optimizer = std::string("--optimizer ") + OptimizerName(o.optimizer);
  if (o.optimizer != OptimizerKind::kSgd) {
    if (o.device == Device::kCuda) {
      throw TrainError(optimizer + " runs on the CPU backend only (--device cuda has sgd)");
    }
    if (ModelParallel(o.mode)) {
      throw TrainError(optimizer + " is not supported with --mode " + ModeName(o) +
                       " (each rank holds a part of the layers; sgd only)");
    }
  }
  if ((o.optimizer == OptimizerKind::kLars || o.optimizer == OptimizerKind::kLamb) &&
      o.ps_shards > 1) {
    throw TrainError(optimizer +
                     " needs each layer's whole norm: with --ps-shards > 1 a server's range cuts "
                     "layers; use one server");
  }
  if (ModelParallel(o.mode)) {
    auto refuse = [&](bool given, const char* flag) {
      if (given) {
        throw TrainError(std::string(flag) + " is not supported with --mode " + ModeName(o) +
                         " (the data-parallel modes sync, ps and local have it)");
      }
    };
    refuse(o.accumulate > 1, "--accumulate (use --micro-batches)");
    refuse(o.val_fraction > 0, "--val-fraction");
    refuse(o.keep_best, "--keep-best");
    refuse(o.target_acc > 0, "--target-acc");
    refuse(o.log_every > 0, "--log-every");
  }
  if (o.elastic && (o.optimizer == OptimizerKind::kAdam || o.optimizer == OptimizerKind::kLamb)) {
    throw TrainError(optimizer + " is not supported with --elastic (sgd, nesterov and lars are)");
  }
  if ((o.post_local > 0 || o.adaptive_k) && o.mode != Mode::kLocal) {
    throw TrainError("--post-local and --adaptive-k need --mode local");
  }
  if (o.post_local > 0 && o.post_local >= o.epochs) {
    throw TrainError("--post-local " + std::to_string(o.post_local) + " leaves no local SGD in " +
                     std::to_string(o.epochs) + " epoch(s): use --mode sync, or fewer epochs");
  }
  if (o.staleness >= 0 && !(o.mode == Mode::kPs && o.async)) {
    throw TrainError("--staleness needs --mode ps --async (synchronous modes have none)");
  }
  if (o.backup_workers > 0) {
    if (o.mode != Mode::kPs || o.async) {
      throw TrainError("--backup-workers needs synchronous --mode ps (not --async)");
    }
    if (o.ps_shards > 1) {
      throw TrainError(
          "--backup-workers needs one server (--ps-shards 1): each server would drop other "
          "gradients");
    }
    if (o.elastic) throw TrainError("--backup-workers is not supported with --elastic");
    if (o.device == Device::kCuda) {
      throw TrainError("--backup-workers runs on the CPU backend only");
    }
  }
  if (ModelParallel(o.mode) && (!o.straggle.empty() || o.straggle_random_p > 0)) {
    throw TrainError(std::string("--straggle and --straggle-random need a data-parallel mode ") +
                     "(sync, ps, local), not --mode " + ModeName(o));
  }
  if (o.elastic && o.accumulate > 1) {
    throw TrainError("--accumulate is not supported with --elastic");
  }
}

}  // namespace trainer
