// --mode local: local SGD. Each rank steps on its own batches and the ranks average their
// parameters every --average-every steps (and their optimizer state at the end of each epoch).
//
// --post-local E (Lin, Stich, Patel & Jaggi 2020, "Don't use large mini-batches, use local SGD"):
// the first E epochs average the gradients every step (synchronous SGD, one allreduce after
// backward) with the rate local SGD uses, the unscaled --lr, so the switch changes only how often
// the ranks talk. --adaptive-k: K doubles (up to 64 times --average-every) after an epoch whose
// mean training loss fell by less than 10%, so communication thins out as training settles. This
// is the direction this project's issue asks for; AdaComm (Wang & Joshi 2019) goes the other way
// for a fixed wall-clock budget, starting with a large K and shrinking it with the loss.
#include <baton.h>

#include <algorithm>
#include <string>

#include "trainer.h"
#include "util.h"

namespace trainer {

void TrainLocal(TrainingRun& run) {
  size_t n = run.model.parameter_count();
  float lr = 0;
  auto average = [&](float* buf, size_t count, const char* what) {
    run.backend.Synchronize();
    CheckBaton(batonAllReduce(buf, buf, count, batonFloat, batonAvg, run.comm, nullptr), run.comm,
               what);
  };
  run.total_steps = run.ShardOf(run.rank, run.world).steps * run.opt.epochs;
  long k = run.opt.average_every;
  const long k_max = 64L * run.opt.average_every;
  double loss_before = -1;  // the mean training loss of the epoch before the last
  for (int epoch = run.start_epoch; epoch < run.LastEpoch(); ++epoch) {
    const bool synchronous = epoch < run.opt.post_local;
    if (run.opt.adaptive_k && epoch > run.start_epoch) {
      // Every rank has the same allreduced loss (ReportEpoch), so every rank picks the same K.
      const double now = run.last_train_loss;
      if (!synchronous && loss_before > 0 && loss_before - now < 0.1 * loss_before) {
        k = std::min(2 * k, k_max);
      }
      loss_before = now;
    }
    std::vector<uint32_t> order = run.EpochOrder(epoch);
    Shard part = run.ShardOf(run.rank, run.world);
    if (part.steps == 0) throw TrainError("too few samples for this many ranks and --batch");
    EpochStats stats;
    stats.local_k = synchronous ? 0 : static_cast<double>(k);
    double epoch_start = NowSeconds();
    for (long step = 0; step < part.steps; ++step) {
      double t0 = NowSeconds();
      BatchStats b = run.ComputeGradient(order, part, step, nullptr);
      if (synchronous) {
        double c0 = NowSeconds();
        average(run.model.grads(), n, "gradient allreduce");
        stats.comm_wait_s += NowSeconds() - c0;
        stats.averages += 1;
      }
      // Each replica steps on its own batch, so the rate is one run.rank's (no linear scaling).
      lr = run.LearningRate(run.global_step, 1);
      run.optimizer.Step(run.model.params(), run.model.grads(), lr);
      ++run.global_step;
      bool last = step + 1 == part.steps;
      // (Synchronous steps keep the replicas equal: nothing to average.)
      if (!synchronous && (run.global_step % k == 0 || last)) {
        double c0 = NowSeconds();
        average(run.model.params(), n, "model averaging allreduce");
        // At the epoch's end the momentum is averaged too, so that every run.rank holds the same
        // state there: the checkpoint is then the whole state and the next epoch starts equal.
        if (last) {
          average(run.optimizer.state(), run.optimizer.state_size(), "optimizer averaging");
        }
        stats.comm_wait_s += NowSeconds() - c0;
        stats.averages += 1;
        if (run.opt.check_replicas) {
          run.CheckReplicas(("after averaging at step " + std::to_string(run.global_step)).c_str());
        }
      } else if (synchronous && run.opt.check_replicas) {
        run.CheckReplicas(("after step " + std::to_string(run.global_step)).c_str());
      }
      if (run.ema) {
        run.ema->Update(run.model.params());
        if (last && !synchronous) average(run.ema->data(), n, "EMA averaging");
      }
      stats.step_s += NowSeconds() - t0;
      stats.loss_sum += b.loss_sum;
      stats.correct += b.correct;
      stats.samples += b.samples;
      run.Progress(epoch, step, part.steps, stats);
    }
    double wall = NowSeconds() - epoch_start;
    run.FinishEpoch(epoch, stats, wall, lr, part.steps * StepBatch(run.opt) * run.world);
  }
}

}  // namespace trainer
