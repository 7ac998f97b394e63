// --mode sync (the default): synchronous data parallelism as PyTorch DDP and Horovod do it. Every
// rank holds the whole model, computes the gradient of its shard of the data, and the gradients
// are averaged with allreduce in buckets overlapped with backward (buckets.h).
#include <baton.h>

#include <cstdio>
#include <string>

#include "buckets.h"
#include "trainer.h"
#include "util.h"

namespace trainer {

void TrainSync(TrainingRun& run) {
  GradientAverager averager(run.comm, run.backend, run.model.layers(), run.model.grads(),
                            run.model.parameter_count(),
                            static_cast<size_t>(run.opt.first_bucket_mb * 1024 * 1024),
                            static_cast<size_t>(run.opt.bucket_cap_mb * 1024 * 1024),
                            run.opt.overlap, run.opt.fp16_allreduce, run.timeline);
  if (run.rank == 0 && run.opt.overlap) {
    std::printf("gradient buckets (reverse layer order):");
    for (const GradientBucket& b : averager.buckets()) {
      std::printf(" [layers %d-%d, %.2f MiB]", b.first_layer + 1, b.last_layer + 1,
                  static_cast<double>(b.end - b.begin) * 4 / (1024.0 * 1024.0));
    }
    std::printf("\n");
  }
  float lr = 0;
  run.total_steps = run.ShardOf(run.rank, run.world).steps * run.opt.epochs;
  for (int epoch = run.start_epoch; epoch < run.LastEpoch(); ++epoch) {
    std::vector<uint32_t> order = run.EpochOrder(epoch);
    Shard part = run.ShardOf(run.rank, run.world);
    if (part.steps == 0) {
      throw TrainError("too few samples: " + std::to_string(run.data.train.count) + " over " +
                       std::to_string(run.world) + " ranks gives no batch of " +
                       std::to_string(run.opt.batch));
    }
    EpochStats stats;
    double epoch_start = NowSeconds();
    for (long step = 0; step < part.steps; ++step) {
      double t0 = NowSeconds();
      Timeline::Scope step_span(run.timeline, "step",
                                "\"step\":" + std::to_string(run.global_step));
      BatchStats b;
      {
        Timeline::Scope span(run.timeline, "forward");
        b = run.ForwardBatch(order, part, step, true);
      }
      {
        Timeline::Scope span(run.timeline, "backward");
        run.model.Backward([&](int layer) { averager.LayerDone(layer); });
      }
      {
        Timeline::Scope span(run.timeline, "finish allreduces");
        stats.comm_wait_s += averager.Finish();
      }
      {
        Timeline::Scope span(run.timeline, "optimizer");
        lr = run.LearningRate(run.global_step, run.world);
        run.optimizer.Step(run.model.params(), run.model.grads(), lr);
        if (run.ema) run.ema->Update(run.model.params());
      }
      ++run.global_step;
      stats.step_s += NowSeconds() - t0;
      stats.loss_sum += b.loss_sum;
      stats.correct += b.correct;
      stats.samples += b.samples;
      if (run.opt.check_replicas) {
        run.CheckReplicas(("after step " + std::to_string(run.global_step)).c_str());
      }
      run.Progress(epoch, step, part.steps, stats);
    }
    // A device run.backend's last allreduces may still be timing on its stream.
    stats.comm_wait_s += averager.CollectWait();
    double wall = NowSeconds() - epoch_start;
    run.FinishEpoch(epoch, stats, wall, lr, part.steps * run.opt.batch * run.world);
  }
}

}  // namespace trainer
