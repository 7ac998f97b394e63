#include "pipeline_schedule.h"

#include <algorithm>

namespace trainer {

std::vector<PipeOp> StageOps(Schedule schedule, int stage, int stages, int micro_batches) {
  std::vector<PipeOp> ops;
  ops.reserve(2 * static_cast<size_t>(micro_batches));
  if (schedule == Schedule::kGpipe) {
    for (int k = 0; k < micro_batches; ++k) ops.push_back({true, k});
    for (int k = 0; k < micro_batches; ++k) ops.push_back({false, k});
    return ops;
  }
  // 1F1B: the later stages start their backwards sooner, so fewer micro-batches wait at each.
  const int warmup = std::min(stages - stage - 1, micro_batches);
  int next_forward = 0;
  int next_backward = 0;
  while (next_forward < warmup) ops.push_back({true, next_forward++});
  while (next_forward < micro_batches) {
    ops.push_back({true, next_forward++});
    ops.push_back({false, next_backward++});
  }
  while (next_backward < micro_batches) ops.push_back({false, next_backward++});
  return ops;
}

int InFlight(Schedule schedule, int stage, int stages, int micro_batches) {
  if (schedule == Schedule::kGpipe) return micro_batches;
  return std::min(stages - stage, micro_batches);
}

}  // namespace trainer
