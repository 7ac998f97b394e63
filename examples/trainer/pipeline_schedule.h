// The order in which a pipeline stage runs the forwards and backwards of its micro-batches: pure
// functions of (schedule, stage, stages, micro-batches), the same in the distributed run
// (pipeline.cc) and in the one-process simulation (pipeline_sim.cc), so the two compute the same
// thing.
//
//   gpipe (Huang et al. 2019): every forward, then every backward (torch.distributed.pipelining's
//     ScheduleGPipe order: backwards in micro-batch order too). A stage keeps all M micro-batches'
//     activations.
//   1f1b (PipeDream-Flush, Narayanan et al. 2021; Megatron-LM's default): stage s runs
//     min(S - s - 1, M) warm-up forwards, then alternates one forward and one backward, then
//     drains the remaining backwards. Same update as gpipe (the gradients of the M micro-batches,
//     added in the same order, so the same bits), at most S - s micro-batches in flight.
//   pipedream (Narayanan et al. 2019): 1f1b over every micro-batch of the epoch with no flush;
//     each stage updates its weights after every backward, so a micro-batch's forward and
//     backward at stage s are S - s - 1 updates apart; weight stashing keeps the forward's
//     weights for the backward.
#pragma once

#include <vector>

#include "options.h"

namespace trainer {

struct PipeOp {
  bool forward = true;
  int micro_batch = 0;
};

// Stage `stage` (0-based) of `stages`: its operations over micro-batches 0..micro_batches-1.
std::vector<PipeOp> StageOps(Schedule schedule, int stage, int stages, int micro_batches);

// The most micro-batches the stage holds at once (activations kept for backward); micro-batch k
// can live in slot k % InFlight(...).
int InFlight(Schedule schedule, int stage, int stages, int micro_batches);

// The idle share of a flushed pipeline with equal stages and free communication:
// (S - 1) / (M + S - 1).
inline double PredictedBubble(int stages, long micro_batches) {
  return static_cast<double>(stages - 1) / static_cast<double>(micro_batches + stages - 1);
}

}  // namespace trainer
