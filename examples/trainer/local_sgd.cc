// --mode local: local SGD. Each rank steps on its own batches and the ranks average their
// parameters every --average-every steps (and their optimizer state at the end of each epoch).
#include <baton.h>

#include <string>

#include "trainer.h"
#include "util.h"

namespace trainer {

void TrainLocal(TrainingRun& run) {
  size_t n = run.model.parameter_count();
  float lr = 0;
  auto average = [&](float* buf) {
    run.backend.Synchronize();
    CheckBaton(batonAllReduce(buf, buf, n, batonFloat, batonAvg, run.comm, nullptr), run.comm,
               "model averaging allreduce");
  };
  run.total_steps = run.ShardOf(run.rank, run.world).steps * run.opt.epochs;
  for (int epoch = run.start_epoch; epoch < run.LastEpoch(); ++epoch) {
    std::vector<uint32_t> order = run.EpochOrder(epoch);
    Shard part = run.ShardOf(run.rank, run.world);
    if (part.steps == 0) throw TrainError("too few samples for this many ranks and --batch");
    EpochStats stats;
    double epoch_start = NowSeconds();
    for (long step = 0; step < part.steps; ++step) {
      double t0 = NowSeconds();
      BatchStats b = run.ForwardBatch(order, part, step, true);
      run.model.Backward(nullptr);
      // Each replica steps on its own batch, so the rate is one run.rank's (no linear scaling).
      lr = run.LearningRate(run.global_step, 1);
      run.optimizer.Step(run.model.params(), run.model.grads(), lr);
      ++run.global_step;
      bool last = step + 1 == part.steps;
      if (run.global_step % run.opt.average_every == 0 || last) {
        double c0 = NowSeconds();
        average(run.model.params());
        // At the epoch's end the momentum is averaged too, so that every run.rank holds the same
        // state there: the checkpoint is then the whole state and the next epoch starts equal.
        if (last) {
          average(run.optimizer.momentum_buffer());
        }
        stats.comm_wait_s += NowSeconds() - c0;
        if (run.opt.check_replicas) {
          run.CheckReplicas(("after averaging at step " + std::to_string(run.global_step)).c_str());
        }
      }
      if (run.ema) {
        run.ema->Update(run.model.params());
        if (last) average(run.ema->data());
      }
      stats.step_s += NowSeconds() - t0;
      stats.loss_sum += b.loss_sum;
      stats.correct += b.correct;
      stats.samples += b.samples;
      run.Progress(epoch, step, part.steps, stats);
    }
    double wall = NowSeconds() - epoch_start;
    run.FinishEpoch(epoch, stats, wall, lr, part.steps * run.opt.batch * run.world);
  }
}

}  // namespace trainer
