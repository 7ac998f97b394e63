// --mode pipeline --simulate: the stages of a pipeline in one process, as the reference the
// distributed pipeline is checked against (pipedream above all: its result depends on the order
// of each stage's updates, which no single-process training reproduces). Each stage is the same
// Stage object the distributed run uses, runs the same operations in the same order
// (pipeline_schedule.h), updates with the same rate at its k-th update, and receives its inputs
// through first-in first-out queues instead of batonRecv (each link carries micro-batches in
// order, both ways). Stages take turns: any stage whose next operation has its input runs it,
// which is one of the interleavings the distributed run could have had; a stage's result does
// not depend on which.
#include <algorithm>
#include <cstdio>
#include <deque>
#include <memory>
#include <vector>

#include "model_parallel.h"
#include "pipeline_schedule.h"
#include "tensor_parallel.h"
#include "util.h"

namespace trainer {
namespace {

class PipelineSimulator {
 public:
  PipelineSimulator(RunContext& run, Layout layout);
  void Train();

 private:
  struct SimStage {
    std::unique_ptr<Stage> stage;
    std::unique_ptr<SgdOptimizer> optimizer;
    long updates = 0;
  };
  int Rows(int k) const { return (k + 1) * batch_ / micro_ - k * batch_ / micro_; }
  // Runs micro-batches first_step * M .. of the epoch through every stage's schedule.
  BatchStats RunSchedule(const std::vector<uint32_t>& order, long first_step, int count);
  void Update(SimStage& s);
  const uint8_t* Load(const Dataset& set, const uint32_t* indices, int rows, Stage& stage,
                      int slot);
  BatchStats Evaluate();

  RunContext& run_;
  const Options& opt_;
  Layout layout_;
  std::vector<int> sizes_;
  int batch_;
  int micro_;
  bool pipedream_;
  CommCounters counters_;  // nothing is sent; the stages want somewhere to count
  std::vector<SimStage> stages_;
  std::vector<float> host_x_;
  std::vector<uint8_t> labels_;
  float lr_ = 0;
};

PipelineSimulator::PipelineSimulator(RunContext& run, Layout layout)
    : run_(run),
      opt_(run.opt),
      layout_(std::move(layout)),
      sizes_(ModelSizes(run.opt, run.data)),
      batch_(run.opt.batch),
      micro_(run.opt.micro_batches),
      pipedream_(run.opt.schedule == Schedule::kPipeDream) {
  AssignStages(&layout_, sizes_);
  const int rows = (batch_ + micro_ - 1) / micro_;
  const std::vector<float> initial = InitialParameters(sizes_, opt_.seed);
  for (int s = 0; s < layout_.pp; ++s) {
    SimStage sim;
    const int slots = InFlight(opt_.schedule, s, layout_.pp, pipedream_ ? 1 << 30 : micro_);
    sim.stage =
        std::make_unique<Stage>(run_.backend, layout_, sizes_, s, nullptr, slots, rows, &counters_);
    if (pipedream_ && opt_.weight_stash) sim.stage->EnableStash();
    sim.stage->SetParameters(initial);
    sim.optimizer = std::make_unique<SgdOptimizer>(run_.backend, sim.stage->parameter_count(),
                                                   static_cast<float>(opt_.momentum),
                                                   static_cast<float>(opt_.weight_decay));
    stages_.push_back(std::move(sim));
  }
  host_x_.resize(static_cast<size_t>(rows) * run_.data.train.features);
  labels_.resize(static_cast<size_t>(rows));
}

const uint8_t* PipelineSimulator::Load(const Dataset& set, const uint32_t* indices, int rows,
                                       Stage& stage, int slot) {
  run_.LoadRows(set, indices, rows, host_x_.data(), labels_.data());
  run_.backend.Upload(stage.input(slot), host_x_.data(), static_cast<size_t>(rows) * set.features);
  return labels_.data();
}

void PipelineSimulator::Update(SimStage& s) {
  lr_ = run_.LearningRate(s.updates++, 1) / (pipedream_ ? micro_ : 1);
  s.optimizer->Step(s.stage->params(), s.stage->grads(), lr_);
}

BatchStats PipelineSimulator::RunSchedule(const std::vector<uint32_t>& order, long first_step,
                                          int count) {
  const int stages = layout_.pp;
  std::vector<std::vector<PipeOp>> ops;
  for (int s = 0; s < stages; ++s) ops.push_back(StageOps(opt_.schedule, s, stages, count));
  // forward[s]: activations from stage s to s + 1; backward[s]: gradients from s + 1 to s.
  std::vector<std::deque<Buffer>> forward(stages);
  std::vector<std::deque<Buffer>> backward(stages);
  std::vector<size_t> next(stages, 0);
  std::vector<int> backwards(stages, 0);
  std::vector<uint8_t> labels(static_cast<size_t>(batch_));
  BatchStats stats;
  auto copy_of = [this](const float* src, size_t n) {
    Buffer b = run_.backend.Allocate(n);
    run_.backend.Copy(b.data(), src, n);
    return b;
  };
  for (;;) {
    bool ran = false;
    bool done = true;
    for (int s = 0; s < stages; ++s) {
      if (next[s] == ops[s].size()) continue;
      done = false;
      const PipeOp op = ops[s][next[s]];
      if (op.forward ? s > 0 && forward[s - 1].empty() : s + 1 < stages && backward[s].empty()) {
        continue;  // its input has not been produced yet
      }
      Stage& st = *stages_[s].stage;
      const int mb = op.micro_batch;
      const int slot = mb % st.slots();
      const int k = mb % micro_;
      const int rows = Rows(k);
      const size_t first = static_cast<size_t>(first_step + mb / micro_) * batch_ +
                           static_cast<size_t>(k * batch_ / micro_);
      if (op.forward) {
        if (s == 0) {
          Load(run_.data.train, order.data() + first, rows, st, slot);
        } else {
          run_.backend.Copy(st.input(slot), forward[s - 1].front().data(),
                            static_cast<size_t>(rows) * st.input_width());
          forward[s - 1].pop_front();
        }
        st.Forward(slot, rows, pipedream_ && opt_.weight_stash ? st.Stash(slot) : st.params());
        if (st.last()) {
          run_.LoadRows(run_.data.train, order.data() + first, rows, nullptr, labels.data());
          const float scale = pipedream_ || micro_ == 1
                                  ? 1.0f
                                  : static_cast<float>(rows) / static_cast<float>(batch_);
          BatchStats b = st.Loss(slot, labels.data(), rows, true, scale);
          stats.loss_sum += b.loss_sum;
          stats.correct += b.correct;
          stats.samples += b.samples;
        } else {
          forward[s].push_back(
              copy_of(st.output(slot), static_cast<size_t>(rows) * st.output_width()));
        }
      } else {
        if (s + 1 < stages) {
          run_.backend.Copy(st.output_grad(), backward[s].front().data(),
                            static_cast<size_t>(rows) * st.output_width());
          backward[s].pop_front();
        }
        st.Backward(slot, rows, pipedream_ && opt_.weight_stash ? st.stashed(slot) : st.params(),
                    !pipedream_ && backwards[s] > 0, nullptr);
        ++backwards[s];
        if (s > 0) {
          backward[s - 1].push_back(
              copy_of(st.input_grad(), static_cast<size_t>(rows) * st.input_width()));
        }
        if (pipedream_) Update(stages_[s]);
      }
      ++next[s];
      ran = true;
    }
    if (done) break;
    if (!ran) throw TrainError("internal: the simulated pipeline schedule cannot go on");
  }
  return stats;
}

BatchStats PipelineSimulator::Evaluate() {
  const Dataset& d = run_.data.test;
  std::vector<uint32_t> all(d.count);
  for (size_t i = 0; i < d.count; ++i) all[i] = static_cast<uint32_t>(i);
  const int per = stages_.front().stage->max_rows();
  BatchStats total;
  for (size_t begin = 0; begin < d.count; begin += static_cast<size_t>(per)) {
    const int rows = static_cast<int>(std::min<size_t>(static_cast<size_t>(per), d.count - begin));
    const uint8_t* labels = Load(d, all.data() + begin, rows, *stages_.front().stage, 0);
    for (size_t s = 0; s < stages_.size(); ++s) {
      Stage& st = *stages_[s].stage;
      if (s > 0) {
        run_.backend.Copy(st.input(0), stages_[s - 1].stage->output(0),
                          static_cast<size_t>(rows) * st.input_width());
      }
      st.Forward(0, rows, st.params());
    }
    BatchStats b = stages_.back().stage->Loss(0, labels, rows, false, 1.0f);
    total.loss_sum += b.loss_sum;
    total.correct += b.correct;
    total.samples += b.samples;
  }
  return total;
}

void PipelineSimulator::Train() {
  long steps = static_cast<long>(run_.data.train.count / static_cast<size_t>(batch_));
  if (opt_.max_steps > 0) steps = std::min(steps, opt_.max_steps);
  if (steps == 0) throw TrainError("too few samples for one batch of " + std::to_string(batch_));
  run_.total_steps = steps * opt_.epochs * (pipedream_ ? micro_ : 1);
  run_.Start("model " + SizesText(sizes_) + ", " + std::to_string(layout_.pp) +
             " simulated stages, schedule " + ScheduleName(opt_.schedule) + ", batch " +
             std::to_string(batch_) + " in " + std::to_string(micro_) + " micro-batch(es)");
  for (int epoch = run_.start_epoch; epoch < run_.LastEpoch(); ++epoch) {
    std::vector<uint32_t> order = run_.EpochOrder(epoch);
    EpochStats stats;
    const double start = NowSeconds();
    if (pipedream_) {
      BatchStats b = RunSchedule(order, 0, static_cast<int>(steps * micro_));
      stats.loss_sum = b.loss_sum;
      stats.correct = b.correct;
      stats.samples = b.samples;
    } else {
      for (long step = 0; step < steps; ++step) {
        BatchStats b = RunSchedule(order, step, micro_);
        for (SimStage& s : stages_) Update(s);
        stats.loss_sum += b.loss_sum;
        stats.correct += b.correct;
        stats.samples += b.samples;
        run_.Progress(epoch, step, steps, stats);
      }
    }
    run_.global_step = stages_.front().updates;
    const double wall = NowSeconds() - start;
    stats.step_s = wall;
    run_.ReportEpoch(epoch, stats, Evaluate(), nullptr, wall, lr_, steps * batch_);
  }
  if (opt_.print_hash || !opt_.save_params.empty()) {
    size_t n = 0;
    for (size_t i = 0; i + 1 < sizes_.size(); ++i) {
      n += static_cast<size_t>(sizes_[i]) * sizes_[i + 1] + static_cast<size_t>(sizes_[i + 1]);
    }
    std::vector<float> whole(n, 0.0f);
    for (SimStage& s : stages_) s.stage->AddTo(&whole);
    if (opt_.print_hash) {
      std::printf("final parameter hash: %016llx\n",
                  static_cast<unsigned long long>(HashBytes(whole.data(), whole.size() * 4)));
    }
    if (!opt_.save_params.empty()) WriteParameters(opt_.save_params, whole);
  }
}

}  // namespace

void SimulatePipeline(RunContext& run, Layout layout) {
  PipelineSimulator sim(run, std::move(layout));
  sim.Train();
}

}  // namespace trainer
