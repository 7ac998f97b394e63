#include "pipeline.h"

#include <string>
#include <vector>

#include "pipeline_schedule.h"
#include "util.h"

namespace trainer {
namespace {

size_t Count(int rows, int cols) {
  return static_cast<size_t>(rows) * static_cast<size_t>(cols);
}

std::string MicroBatchArgs(int stage, int mb) {
  return "\"stage\":" + std::to_string(stage) + ",\"mb\":" + std::to_string(mb);
}

}  // namespace

PipelineExecutor::PipelineExecutor(Backend& backend, Stage& stage, batonComm_t pipeline,
                                   int stage_index, int stages, Timeline* timeline,
                                   CommCounters* counters)
    : backend_(backend),
      stage_(stage),
      pipeline_(pipeline),
      stage_index_(stage_index),
      stages_(stages),
      timeline_(timeline),
      counters_(counters) {}

bool PipelineExecutor::Receives(const PipeOp& op) const {
  return op.forward ? !stage_.first() : !stage_.last();
}

void PipelineExecutor::Exchange(Send* send, float* recv, size_t count, int peer, const char* what,
                                int mb) {
  const bool sending = send->pending;
  std::string args;
  if (timeline_ != nullptr && timeline_->on()) {
    args = "\"stage\":" + std::to_string(stage_index_);
    if (sending) {
      args += ",\"send\":\"" + std::string(send->what) +
              "\",\"send_mb\":" + std::to_string(send->micro_batch) +
              ",\"to\":" + std::to_string(send->peer);
    }
    if (recv != nullptr) {
      args += ",\"recv\":\"" + std::string(what) + "\",\"recv_mb\":" + std::to_string(mb) +
              ",\"from\":" + std::to_string(peer);
    }
  }
  Timeline::Scope span(timeline_, sending ? (recv != nullptr ? "send+recv" : "send") : "recv",
                       std::move(args));
  // Baton reads the send buffer when the group runs: the math that wrote it must be done.
  if (sending) backend_.Synchronize();
  const double t0 = NowSeconds();
  std::string call = "pipeline";
  if (sending) {
    call += " send of the " + std::string(send->what) + " of micro-batch " +
            std::to_string(send->micro_batch) + " to stage " + std::to_string(send->peer);
  }
  if (recv != nullptr) {
    call += std::string(sending ? " and" : "") + " receive of the " + what + " of micro-batch " +
            std::to_string(mb) + " from stage " + std::to_string(peer);
  }
  CheckBaton(batonGroupStart(), pipeline_, call);
  if (sending) {
    CheckBaton(batonSend(send->data, send->count, batonFloat, send->peer, pipeline_, nullptr),
               pipeline_, call);
  }
  if (recv != nullptr) {
    CheckBaton(batonRecv(recv, count, batonFloat, peer, pipeline_, nullptr), pipeline_, call);
  }
  CheckBaton(batonGroupEnd(), pipeline_, call + " (stage " + std::to_string(stage_index_) + ")");
  counters_->wait_s += NowSeconds() - t0;
  if (sending) counters_->bytes_sent += static_cast<double>(send->count) * sizeof(float);
  send->pending = false;
}

PipelineRun PipelineExecutor::Run(Schedule schedule, const MicroBatches& mbs, bool stash,
                                  const std::function<void(int)>& layer_done,
                                  const std::function<void()>& update) {
  PipelineRun result;
  const bool per_micro_batch = static_cast<bool>(update);
  const std::vector<PipeOp> ops = StageOps(schedule, stage_index_, stages_, mbs.count);
  const int slots = stage_.slots();
  Send send;
  int backwards = 0;
  result.begin_ns = Timeline::NowNs();
  for (size_t i = 0; i < ops.size(); ++i) {
    const PipeOp& op = ops[i];
    const int mb = op.micro_batch;
    const int slot = mb % slots;
    const int rows = mbs.rows(mb);
    if (Receives(op)) {
      if (op.forward) {
        Exchange(&send, stage_.input(slot), Count(rows, stage_.input_width()), stage_index_ - 1,
                 "activation", mb);
      } else {
        Exchange(&send, stage_.output_grad(), Count(rows, stage_.output_width()), stage_index_ + 1,
                 "gradient", mb);
      }
    }
    if (op.forward) {
      if (stage_.first()) mbs.load(mb, stage_.input(slot));
      const float* weights = per_micro_batch && stash ? stage_.Stash(slot) : stage_.params();
      const double t0 = NowSeconds();
      {
        Timeline::Scope span(timeline_, "forward", MicroBatchArgs(stage_index_, mb));
        stage_.Forward(slot, rows, weights);
        if (stage_.last()) {
          BatchStats b = stage_.Loss(slot, mbs.labels(mb), rows, true, mbs.grad_scale(mb));
          result.train.loss_sum += b.loss_sum;
          result.train.correct += b.correct;
          result.train.samples += b.samples;
        }
      }
      result.busy_s += NowSeconds() - t0;
      if (!stage_.last()) {
        send = {stage_.output(slot),
                Count(rows, stage_.output_width()),
                stage_index_ + 1,
                "activation",
                mb,
                true};
      }
    } else {
      // Without stashing, pipedream's backward takes the weights as they are now: updated by the
      // backwards of the micro-batches that entered after this one.
      const float* weights = per_micro_batch && stash ? stage_.stashed(slot) : stage_.params();
      const bool accumulate = !per_micro_batch && backwards > 0;
      const bool finishing = per_micro_batch || backwards + 1 == mbs.count;
      const double t0 = NowSeconds();
      {
        Timeline::Scope span(timeline_, "backward", MicroBatchArgs(stage_index_, mb));
        stage_.Backward(slot, rows, weights, accumulate,
                        finishing ? layer_done : std::function<void(int)>());
      }
      result.busy_s += NowSeconds() - t0;
      ++backwards;
      if (!stage_.first()) {
        send = {stage_.input_grad(),
                Count(rows, stage_.input_width()),
                stage_index_ - 1,
                "gradient",
                mb,
                true};
      }
    }
    if (send.pending && !(i + 1 < ops.size() && Receives(ops[i + 1]))) {
      Exchange(&send, nullptr, 0, 0, "", 0);
    }
    if (!op.forward && per_micro_batch) update();
  }
  result.end_ns = Timeline::NowNs();
  return result;
}

BatchStats PipelineExecutor::Evaluate(const MicroBatches& mbs) {
  BatchStats total;
  Send send;
  for (int mb = 0; mb < mbs.count; ++mb) {
    const int rows = mbs.rows(mb);
    if (stage_.first()) {
      mbs.load(mb, stage_.input(0));
    } else {
      Exchange(&send, stage_.input(0), Count(rows, stage_.input_width()), stage_index_ - 1,
               "activation", mb);
    }
    stage_.Forward(0, rows, stage_.params());
    if (stage_.last()) {
      BatchStats b = stage_.Loss(0, mbs.labels(mb), rows, false, 1.0f);
      total.loss_sum += b.loss_sum;
      total.correct += b.correct;
      total.samples += b.samples;
    } else {
      send = {stage_.output(0),
              Count(rows, stage_.output_width()),
              stage_index_ + 1,
              "activation",
              mb,
              true};
      Exchange(&send, nullptr, 0, 0, "", 0);
    }
  }
  return total;
}

}  // namespace trainer
