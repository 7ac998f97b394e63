// --mode sync (the default): synchronous data parallelism as PyTorch DDP and Horovod do it. Every
// rank holds the whole model, computes the gradient of its shard of the data, and the gradients
// are averaged with allreduce in buckets overlapped with backward (buckets.h).
//
// With --elastic (elastic.h) the loop also survives a lost rank and takes replacements in: its
// state (epoch, plan of the epoch's samples, step) is what the ranks agree on and hand to each
// other after a change, and the averager is remade for each new communicator.
#include <baton.h>

#include <cstdio>
#include <memory>
#include <string>

#include "buckets.h"
#include "elastic.h"
#include "trainer.h"
#include "util.h"

namespace trainer {
namespace {

class SyncTrainer {
 public:
  explicit SyncTrainer(TrainingRun& run) : run_(run), elastic_(run) {}

  void Train();

 private:
  void MakeAverager();
  // Starts the next epoch (plan over the current ranks); false when training is over.
  bool NextEpoch();
  void Step();
  // After a loss or a grow: every rank takes the agreed state from `root` and the rest of the
  // epoch is cut over the ranks there are now.
  void Resync(int root);
  void AfterLoss(const TrainError& error);
  void AfterGrow(int joined);

  TrainingRun& run_;
  Elastic elastic_;
  std::unique_ptr<GradientAverager> averager_;
  EpochPlan plan_;
  EpochStats stats_;
  double epoch_start_ = 0;
  float lr_ = 0;
};

void SyncTrainer::MakeAverager() {
  averager_.reset();  // its stream first: it may hold the old communicator's failed calls
  averager_ = std::make_unique<GradientAverager>(
      run_.comm, run_.backend, run_.model.layers(), run_.model.grads(),
      run_.model.parameter_count(), static_cast<size_t>(run_.opt.first_bucket_mb * 1024 * 1024),
      static_cast<size_t>(run_.opt.bucket_cap_mb * 1024 * 1024), run_.opt.overlap,
      run_.opt.fp16_allreduce, run_.timeline);
}

bool SyncTrainer::NextEpoch() {
  const int epoch = plan_.epoch + 1;
  if (epoch >= run_.LastEpoch()) return false;
  plan_ =
      FirstPlan(epoch, run_.EpochOrder(epoch), run_.world, StepBatch(run_.opt), run_.opt.max_steps);
  if (plan_.steps == 0) {
    throw TrainError("too few samples: " + std::to_string(run_.data.train.count) + " over " +
                     std::to_string(run_.world) + " ranks gives no batch of " +
                     std::to_string(StepBatch(run_.opt)));
  }
  stats_ = EpochStats{};
  epoch_start_ = NowSeconds();
  return true;
}

void SyncTrainer::Step() {
  double t0 = NowSeconds();
  Timeline::Scope step_span(run_.timeline, "step", "\"step\":" + std::to_string(run_.global_step));
  BatchStats b;
  if (run_.opt.accumulate > 1 || run_.straggler.active()) {
    Timeline::Scope span(run_.timeline, "forward and backward");
    b = run_.ComputeGradient(plan_.pending, plan_.PartShard(run_.rank), plan_.step,
                             [&](int layer) { averager_->LayerDone(layer); });
  } else {
    {
      Timeline::Scope span(run_.timeline, "forward");
      b = run_.ForwardBatch(plan_.pending, plan_.PartShard(run_.rank), plan_.step, true);
    }
    Timeline::Scope span(run_.timeline, "backward");
    run_.model.Backward([&](int layer) { averager_->LayerDone(layer); });
  }
  {
    Timeline::Scope span(run_.timeline, "finish allreduces");
    stats_.comm_wait_s += averager_->Finish();
  }
  {
    Timeline::Scope span(run_.timeline, "optimizer");
    lr_ = run_.LearningRate(run_.global_step, run_.world);
    run_.optimizer.Step(run_.model.params(), run_.model.grads(), lr_);
    if (run_.ema) run_.ema->Update(run_.model.params());
  }
  ++plan_.step;
  ++run_.global_step;
  stats_.step_s += NowSeconds() - t0;
  stats_.loss_sum += b.loss_sum;
  stats_.correct += b.correct;
  stats_.samples += b.samples;
  if (run_.opt.check_replicas) {
    run_.CheckReplicas(("after step " + std::to_string(run_.global_step)).c_str());
  }
  run_.Progress(plan_.epoch, plan_.steps_before + plan_.step - 1, plan_.steps_before + plan_.steps,
                stats_);
}

void SyncTrainer::Resync(int root) {
  SharePlan(run_, root, &plan_);
  run_.ShareState(root);
  plan_ = Replan(plan_, run_.world, StepBatch(run_.opt), run_.opt.max_steps);
  run_.total_steps = TotalSteps(run_, plan_, run_.global_step, run_.world);
  MakeAverager();
}

void SyncTrainer::AfterLoss(const TrainError& error) {
  const double t0 = NowSeconds();
  int world_before = 0;
  const std::vector<int> lost = elastic_.Shrink(error, &world_before);
  const long during = run_.global_step + 1;
  long agreed = 0;
  // A step some survivors completed had every rank's gradient (an allreduce returns only once
  // all have given theirs): its result is as good as any, so the most advanced rank leads.
  const int root = elastic_.AgreeOnRoot(run_.global_step,
                                        2L * plan_.epoch + (plan_.finished ? 1 : 0), true, &agreed);
  Resync(root);
  if (run_.rank == 0) {
    std::printf(
        "elastic: lost %s of %d during step %ld (epoch %d): %s\n"
        "elastic: %d ranks go on after step %ld: %ld steps left in epoch %d, lr %.4g for a "
        "global batch of %d; recovered in %.1f ms (shrink %.1f ms)\n",
        RanksWords(lost).c_str(), world_before, during, plan_.epoch + 1, error.what(), run_.world,
        run_.global_step, plan_.steps, plan_.epoch + 1,
        run_.LearningRate(run_.global_step, run_.world), run_.world * StepBatch(run_.opt),
        1e3 * (NowSeconds() - t0), 1e3 * elastic_.change_s());
    std::fflush(stdout);
  }
}

void SyncTrainer::AfterGrow(int joined) {
  const double t0 = NowSeconds();
  Resync(0);
  if (run_.rank == 0) {
    std::printf(
        "elastic: %d rank(s) joined after step %ld (epoch %d): %d ranks, %ld steps left in the "
        "epoch, lr %.4g for a global batch of %d; grow %.1f ms, state %.1f ms\n",
        joined, run_.global_step, plan_.epoch + 1, run_.world, plan_.steps,
        run_.LearningRate(run_.global_step, run_.world), run_.world * StepBatch(run_.opt),
        1e3 * elastic_.change_s(), 1e3 * (NowSeconds() - t0));
    std::fflush(stdout);
  }
}

void SyncTrainer::Train() {
  MakeAverager();
  if (run_.rank == 0 && run_.opt.overlap && !run_.joined) {
    std::printf("gradient buckets (reverse layer order):");
    for (const GradientBucket& b : averager_->buckets()) {
      std::printf(" [layers %d-%d, %.2f MiB]", b.first_layer + 1, b.last_layer + 1,
                  static_cast<double>(b.end - b.begin) * 4 / (1024.0 * 1024.0));
    }
    std::printf("\n");
  }
  run_.total_steps =
      StepsPerEpoch(run_.data.train.count, run_.world, StepBatch(run_.opt), run_.opt.max_steps) *
      run_.opt.epochs;
  // Before the first epoch: "the previous one" is finished.
  plan_.epoch = run_.start_epoch - 1;
  plan_.finished = true;
  if (run_.joined) {
    // Grown into a running job: the others are in AfterGrow now.
    epoch_start_ = NowSeconds();
    Resync(0);
  }
  for (;;) {
    try {
      if (plan_.finished && !NextEpoch()) break;
      while (plan_.step < plan_.steps) {
        if (const int joined = elastic_.MaybeGrow(); joined > 0) {
          AfterGrow(joined);
          continue;
        }
        Step();
      }
      // A device backend's last allreduces may still be timing on its stream.
      stats_.comm_wait_s += averager_->CollectWait();
      const double wall = NowSeconds() - epoch_start_;
      run_.FinishEpoch(plan_.epoch, stats_, wall, lr_, plan_.SamplesDone(StepBatch(run_.opt)));
      plan_.finished = true;
    } catch (const TrainError& e) {
      AfterLoss(e);
    }
  }
  elastic_.CloseDesk();
}

}  // namespace

void TrainSync(TrainingRun& run) {
  SyncTrainer(run).Train();
}

}  // namespace trainer
