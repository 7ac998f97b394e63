// The learning-rate schedule: the peak rate by the global batch (--lr-scaling from --base-batch),
// a linear warm-up (--warmup, steps or epochs), then constant or a cosine decay.
#include <algorithm>
#include <cmath>

#include "trainer.h"

namespace trainer {

double RunContext::GlobalBatch(int contributors) const {
  const int c = contributors > 0 ? contributors : (data_ranks > 0 ? data_ranks : world);
  return static_cast<double>(c) * opt.batch * opt.accumulate;
}

double RunContext::PeakLearningRate(int contributors) const {
  const double base = opt.base_batch > 0 ? opt.base_batch : opt.batch;
  // With the default base (one rank's batch) and no accumulation the ratio is the contributor
  // count exactly, the rate of earlier versions bit for bit.
  const double ratio = static_cast<double>(contributors) * opt.batch * opt.accumulate / base;
  switch (opt.lr_scaling) {
    case LrScaling::kLinear:
      return opt.lr * ratio;
    case LrScaling::kSqrt:
      return opt.lr * std::sqrt(ratio);
    case LrScaling::kNone:
      break;
  }
  return opt.lr;
}

long RunContext::WarmupSteps() const {
  if (opt.warmup_epochs < 0) return opt.warmup_steps;
  return std::lround(opt.warmup_epochs * static_cast<double>(total_steps) / opt.epochs);
}

float RunContext::LearningRate(long step, int contributors) const {
  const double target = PeakLearningRate(contributors);
  // Goyal et al.: from the unscaled rate up to the scaled one (a rate scaled down starts there).
  const double base = std::min(opt.lr, target);
  const long warmup = WarmupSteps();
  if (warmup > 0 && step < warmup) {
    return static_cast<float>(base + (target - base) * static_cast<double>(step) / warmup);
  }
  if (opt.cosine && total_steps > warmup) {
    double progress =
        static_cast<double>(step - warmup) / static_cast<double>(total_steps - warmup);
    progress = std::min(std::max(progress, 0.0), 1.0);
    return static_cast<float>(target * 0.5 * (1.0 + std::cos(M_PI * progress)));
  }
  return static_cast<float>(target);
}

}  // namespace trainer
