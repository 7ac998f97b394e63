// Runs a pipeline stage's operations (pipeline_schedule.h) on this rank: a forward receives its
// micro-batch's activation from the stage before and sends its output to the stage after; a
// backward receives the gradient of the output from the stage after and sends the gradient of
// the input to the stage before, all with batonSend/batonRecv on the pipeline group.
//
// Baton's send and receive block until the peer takes part, so a stage that sent and then
// received while its neighbour did the opposite would deadlock (1f1b's steady state does exactly
// that). As Megatron-LM does (send_forward_recv_backward and friends), each send waits for the
// next operation's receive and both go in one batonGroupStart/End, which completes whatever the
// neighbour's order; a send with no receive after it goes alone at once.
#pragma once

#include <baton.h>

#include <cstdint>
#include <functional>

#include "options.h"
#include "pipeline_schedule.h"
#include "tensor_parallel.h"
#include "timeline.h"

namespace trainer {

// The micro-batches of one run of a schedule: a flushed step's M, or a whole epoch's with
// pipedream.
struct MicroBatches {
  int count = 0;
  std::function<int(int mb)> rows;
  // First stage: writes micro-batch mb's input (rows x features, backend memory) to x.
  std::function<void(int mb, float* x)> load;
  // Last stage: the micro-batch's labels (host memory, valid until the next call).
  std::function<const uint8_t*(int mb)> labels;
  // Last stage: the factor on the micro-batch's mean-loss gradient (its share of the batch).
  std::function<float(int mb)> grad_scale;
};

// What one run of a schedule did on this rank.
struct PipelineRun {
  BatchStats train;      // the last stage's loss and accuracy (zero elsewhere)
  double busy_s = 0;     // in forward and backward math
  int64_t begin_ns = 0;  // Timeline::NowNs() at the start and the end
  int64_t end_ns = 0;
};

class PipelineExecutor {
 public:
  // stage: this rank's Stage, number `stage_index` of `stages`; pipeline: the pipeline group
  // (rank = stage; null with one stage).
  PipelineExecutor(Backend& backend, Stage& stage, batonComm_t pipeline, int stage_index,
                   int stages, Timeline* timeline, CommCounters* counters);

  // Runs the schedule's operations for these micro-batches. With update (pipedream) every
  // backward overwrites the gradients, is followed by update(), and uses the weights its forward
  // stashed when stash; otherwise the backwards add up and the caller updates after. layer_done
  // (null: none) is handed to the backwards that finish the gradients (the data-parallel hook).
  PipelineRun Run(Schedule schedule, const MicroBatches& mbs, bool stash,
                  const std::function<void(int)>& layer_done, const std::function<void()>& update);

  // Forward only, micro-batch after micro-batch (evaluation): the last stage's loss and accuracy.
  BatchStats Evaluate(const MicroBatches& mbs);

 private:
  struct Send {
    const float* data = nullptr;
    size_t count = 0;
    int peer = 0;
    const char* what = "";
    int micro_batch = 0;
    bool pending = false;
  };
  bool Receives(const PipeOp& op) const;
  // The pending send (if any) and a receive (recv null: none) in one group.
  void Exchange(Send* send, float* recv, size_t count, int peer, const char* what, int mb);

  Backend& backend_;
  Stage& stage_;
  batonComm_t pipeline_;
  int stage_index_;
  int stages_;
  Timeline* timeline_;
  CommCounters* counters_;
};

}  // namespace trainer
