#include "model_parallel.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "buckets.h"
#include "pipeline.h"
#include "pipeline_schedule.h"
#include "tensor_parallel.h"
#include "util.h"

namespace trainer {
namespace {

double MiB(double bytes) {
  return bytes / (1024.0 * 1024.0);
}

class ModelParallelTrainer {
 public:
  ModelParallelTrainer(RunContext& run, Layout layout);
  void Train();

 private:
  // `count` training micro-batches from step first_step on: micro-batch u is number u % M of
  // step first_step + u / M.
  MicroBatches TrainBatches(const std::vector<uint32_t>& order, long first_step, int count);
  MicroBatches TestBatches(size_t begin, size_t end);
  int Rows(int k) const { return (k + 1) * batch_ / micro_ - k * batch_ / micro_; }
  // Whether this rank's loss and test counts go into the report: the last stage computes them,
  // on every rank of its tensor group alike.
  bool Counts() const { return stage_->last() && layout_.tensor == 0; }
  void TrainFlushedEpoch(const std::vector<uint32_t>& order, int epoch);
  void TrainPipeDreamEpoch(const std::vector<uint32_t>& order, int epoch);
  void AverageAndStep(EpochStats* stats);
  void FinishEpoch(int epoch, EpochStats stats, double wall_s);
  EpochExtras Extras();
  void PrintLayout();
  void CheckReplicas(const std::string& when);
  // The whole model's parameters on rank 0 (the parts of replica 0's ranks, summed).
  std::vector<float> WholeParameters();

  RunContext& run_;
  const Options& opt_;
  Layout layout_;
  std::vector<int> sizes_;
  Groups groups_;
  int batch_;  // per replica
  int micro_;  // micro-batches per batch
  bool pipedream_;
  long steps_ = 0;  // per epoch
  CommCounters counters_;
  std::unique_ptr<Stage> stage_;
  std::unique_ptr<SgdOptimizer> optimizer_;
  std::unique_ptr<GradientAverager> averager_;  // null without data parallelism
  std::unique_ptr<PipelineExecutor> executor_;
  std::function<void(int)> layer_done_;
  std::vector<float> host_x_;
  std::vector<uint8_t> labels_;
  std::vector<uint32_t> test_order_;
  float lr_ = 0;
  // The epoch's pipelined runs (a flushed step each, or the pipedream epoch): for the bubble.
  std::vector<int64_t> begins_;
  std::vector<int64_t> ends_;
  double busy_s_ = 0;
  double sent_at_epoch_start_ = 0;
};

ModelParallelTrainer::ModelParallelTrainer(RunContext& run, Layout layout)
    : run_(run),
      opt_(run.opt),
      layout_(std::move(layout)),
      sizes_(ModelSizes(run.opt, run.data)),
      batch_(run.opt.batch),
      micro_(run.opt.micro_batches),
      pipedream_(run.opt.schedule == Schedule::kPipeDream) {
  AssignStages(&layout_, sizes_);
  groups_ = MakeGroups(run_.comm, layout_);
  const int rows = (batch_ + micro_ - 1) / micro_;
  // pipedream's unit is the epoch: as many micro-batches in flight as the stage ever holds.
  const int slots =
      InFlight(opt_.schedule, layout_.stage, layout_.pp, pipedream_ ? 1 << 30 : micro_);
  stage_ = std::make_unique<Stage>(run_.backend, layout_, sizes_, layout_.stage,
                                   groups_.tensor.get(), slots, rows, &counters_);
  if (pipedream_ && opt_.weight_stash) stage_->EnableStash();
  // Every rank draws the whole model's initial values from the seed and keeps its part, so the
  // parts fit together as the single-process model.
  stage_->SetParameters(InitialParameters(sizes_, opt_.seed));
  optimizer_ = std::make_unique<SgdOptimizer>(run_.backend, stage_->parameter_count(),
                                              static_cast<float>(opt_.momentum),
                                              static_cast<float>(opt_.weight_decay));
  if (groups_.data.get() != nullptr) {
    averager_ = std::make_unique<GradientAverager>(
        groups_.data.get(), run_.backend, stage_->slices(), stage_->grads(),
        stage_->parameter_count(), static_cast<size_t>(opt_.first_bucket_mb * 1024 * 1024),
        static_cast<size_t>(opt_.bucket_cap_mb * 1024 * 1024), opt_.overlap, false, run_.timeline);
    layer_done_ = [this](int layer) { averager_->LayerDone(layer); };
  }
  executor_ =
      std::make_unique<PipelineExecutor>(run_.backend, *stage_, groups_.pipeline.get(),
                                         layout_.stage, layout_.pp, run_.timeline, &counters_);
  host_x_.resize(static_cast<size_t>(rows) * run_.data.train.features);
  labels_.resize(static_cast<size_t>(std::max(rows, 1)));
}

MicroBatches ModelParallelTrainer::TrainBatches(const std::vector<uint32_t>& order, long first_step,
                                                int count) {
  const size_t global_batch = static_cast<size_t>(layout_.dp) * static_cast<size_t>(batch_);
  // The first sample of micro-batch u in the epoch's order.
  auto first = [this, global_batch, first_step](int u) {
    const int k = u % micro_;
    return static_cast<size_t>(first_step + u / micro_) * global_batch +
           static_cast<size_t>(layout_.replica) * static_cast<size_t>(batch_) +
           static_cast<size_t>(k * batch_ / micro_);
  };
  MicroBatches m;
  m.count = count;
  m.rows = [this](int u) { return Rows(u % micro_); };
  m.load = [this, &order, first](int u, float* x) {
    const int rows = Rows(u % micro_);
    run_.LoadRows(run_.data.train, order.data() + first(u), rows, host_x_.data(), nullptr);
    run_.backend.Upload(x, host_x_.data(), static_cast<size_t>(rows) * run_.data.train.features);
  };
  m.labels = [this, &order, first](int u) {
    run_.LoadRows(run_.data.train, order.data() + first(u), Rows(u % micro_), nullptr,
                  labels_.data());
    return static_cast<const uint8_t*>(labels_.data());
  };
  // Flushed: the micro-batch's share of the batch. pipedream: every micro-batch is an update.
  m.grad_scale = [this](int u) {
    return pipedream_ || micro_ == 1
               ? 1.0f
               : static_cast<float>(Rows(u % micro_)) / static_cast<float>(batch_);
  };
  return m;
}

MicroBatches ModelParallelTrainer::TestBatches(size_t begin, size_t end) {
  const Dataset& d = run_.data.test;
  if (test_order_.empty()) {
    test_order_.resize(d.count);
    for (size_t i = 0; i < d.count; ++i) test_order_[i] = static_cast<uint32_t>(i);
  }
  // Evaluation batches as large as the training micro-batches: the buffers are there.
  const size_t per = static_cast<size_t>(stage_->max_rows());
  auto rows = [begin, end, per](int k) {
    return static_cast<int>(std::min(per, end - begin - static_cast<size_t>(k) * per));
  };
  auto first = [this, begin, per](int k) {
    return test_order_.data() + begin + static_cast<size_t>(k) * per;
  };
  MicroBatches m;
  m.count = static_cast<int>((end - begin + per - 1) / per);
  m.rows = rows;
  m.load = [this, rows, first](int k, float* x) {
    run_.LoadRows(run_.data.test, first(k), rows(k), host_x_.data(), nullptr);
    run_.backend.Upload(x, host_x_.data(), static_cast<size_t>(rows(k)) * run_.data.test.features);
  };
  m.labels = [this, rows, first](int k) {
    run_.LoadRows(run_.data.test, first(k), rows(k), nullptr, labels_.data());
    return static_cast<const uint8_t*>(labels_.data());
  };
  m.grad_scale = [](int) { return 1.0f; };
  return m;
}

void ModelParallelTrainer::AverageAndStep(EpochStats* stats) {
  if (averager_) {
    Timeline::Scope span(run_.timeline, "finish allreduces");
    stats->comm_wait_s += averager_->Finish();
    counters_.bytes_sent += RingAllReduceBytes(
        static_cast<double>(stage_->parameter_count()) * sizeof(float), layout_.dp);
  }
  Timeline::Scope span(run_.timeline, "optimizer");
  // Each update averages dp batches: the rate scales with the replicas, as in --mode sync.
  // pipedream updates after every micro-batch, 1/M of a batch: the linear scaling rule again.
  lr_ = run_.LearningRate(run_.global_step, layout_.dp) / (pipedream_ ? micro_ : 1);
  optimizer_->Step(stage_->params(), stage_->grads(), lr_);
  ++run_.global_step;
}

void ModelParallelTrainer::TrainFlushedEpoch(const std::vector<uint32_t>& order, int epoch) {
  EpochStats stats;
  const double epoch_start = NowSeconds();
  const double waited_before = counters_.wait_s;
  for (long step = 0; step < steps_; ++step) {
    const double t0 = NowSeconds();
    Timeline::Scope step_span(run_.timeline, "step",
                              "\"step\":" + std::to_string(run_.global_step));
    MicroBatches mbs = TrainBatches(order, step, micro_);
    PipelineRun r = executor_->Run(opt_.schedule, mbs, false, layer_done_, nullptr);
    begins_.push_back(r.begin_ns);
    ends_.push_back(r.end_ns);
    busy_s_ += r.busy_s;
    AverageAndStep(&stats);
    if (Counts()) {
      stats.loss_sum += r.train.loss_sum;
      stats.correct += r.train.correct;
      stats.samples += r.train.samples;
    }
    stats.step_s += NowSeconds() - t0;
    if (opt_.check_replicas) CheckReplicas("after step " + std::to_string(run_.global_step));
    run_.Progress(epoch, step, steps_, stats);
  }
  stats.comm_wait_s += counters_.wait_s - waited_before;
  FinishEpoch(epoch, stats, NowSeconds() - epoch_start);
}

void ModelParallelTrainer::TrainPipeDreamEpoch(const std::vector<uint32_t>& order, int epoch) {
  EpochStats stats;
  const double epoch_start = NowSeconds();
  const double waited_before = counters_.wait_s;
  const long first_update = run_.global_step;
  // The whole epoch is one pipeline without a flush: an update after every backward.
  auto update = [&] {
    AverageAndStep(&stats);
    const long updates = run_.global_step - first_update;
    if (updates % micro_ == 0) run_.Progress(epoch, updates / micro_ - 1, steps_, stats);
  };
  const MicroBatches mbs = TrainBatches(order, 0, static_cast<int>(steps_ * micro_));
  PipelineRun r;
  {
    Timeline::Scope span(run_.timeline, "pipeline", "\"epoch\":" + std::to_string(epoch + 1));
    r = executor_->Run(Schedule::kPipeDream, mbs, opt_.weight_stash, layer_done_, update);
  }
  begins_.push_back(r.begin_ns);
  ends_.push_back(r.end_ns);
  busy_s_ += r.busy_s;
  if (Counts()) {
    stats.loss_sum += r.train.loss_sum;
    stats.correct += r.train.correct;
    stats.samples += r.train.samples;
  }
  const double wall = NowSeconds() - epoch_start;
  stats.step_s += wall;
  stats.comm_wait_s += counters_.wait_s - waited_before;
  if (opt_.check_replicas) CheckReplicas("at the end of the epoch");
  FinishEpoch(epoch, stats, wall);
}

EpochExtras ModelParallelTrainer::Extras() {
  EpochExtras e;
  batonComm_t world = run_.comm;
  if (batonComm_t pipe = groups_.pipeline.get(); pipe != nullptr) {
    // The pipelined part of each run lasts from the first stage's start to the last stage's end
    // (one clock: CLOCK_REALTIME); the bubble is the stages' idle share of it.
    const size_t n = begins_.size();
    CheckBaton(
        batonAllReduce(begins_.data(), begins_.data(), n, batonInt64, batonMin, pipe, nullptr),
        pipe, "bubble allreduce");
    CheckBaton(batonAllReduce(ends_.data(), ends_.data(), n, batonInt64, batonMax, pipe, nullptr),
               pipe, "bubble allreduce");
    double busy = busy_s_;
    CheckBaton(batonAllReduce(&busy, &busy, 1, batonDouble, batonSum, pipe, nullptr), pipe,
               "bubble allreduce");
    double window = 0;
    for (size_t i = 0; i < n; ++i) window += 1e-9 * static_cast<double>(ends_[i] - begins_[i]);
    double bubble = window > 0 ? 1.0 - busy / (layout_.pp * window) : 0;
    // The mean over all pipelines (replicas and tensor indices).
    CheckBaton(batonAllReduce(&bubble, &bubble, 1, batonDouble, batonSum, world, nullptr), world,
               "bubble allreduce");
    e.pipeline = true;
    e.bubble = bubble / run_.world;
    const long per_run = pipedream_ ? steps_ * micro_ : micro_;
    e.bubble_predicted = PredictedBubble(layout_.pp, per_run);
  }
  begins_.clear();
  ends_.clear();
  busy_s_ = 0;
  double sent[2] = {(counters_.bytes_sent - sent_at_epoch_start_) / static_cast<double>(steps_), 0};
  sent[1] = sent[0];
  CheckBaton(batonAllReduce(&sent[0], &sent[0], 1, batonDouble, batonSum, world, nullptr), world,
             "traffic allreduce");
  CheckBaton(batonAllReduce(&sent[1], &sent[1], 1, batonDouble, batonMax, world, nullptr), world,
             "traffic allreduce");
  e.traffic = true;
  e.sent_per_step = sent[0] / run_.world;
  e.sent_per_step_max = sent[1];
  return e;
}

void ModelParallelTrainer::FinishEpoch(int epoch, EpochStats stats, double wall_s) {
  EpochExtras extras = Extras();
  Timeline::Scope span(run_.timeline, "end of epoch", "\"epoch\":" + std::to_string(epoch + 1));
  // Each replica evaluates its share of the test set through its pipeline.
  const Dataset& d = run_.data.test;
  const size_t begin = d.count * static_cast<size_t>(layout_.replica) / layout_.dp;
  const size_t end = d.count * static_cast<size_t>(layout_.replica + 1) / layout_.dp;
  BatchStats test = executor_->Evaluate(TestBatches(begin, end));
  if (!Counts()) test = BatchStats();
  sent_at_epoch_start_ = counters_.bytes_sent;  // the evaluation's traffic is not a step's
  run_.ReportEpoch(epoch, stats, test, nullptr, wall_s, lr_,
                   steps_ * layout_.dp * static_cast<long>(batch_), extras);
}

void ModelParallelTrainer::CheckReplicas(const std::string& when) {
  batonComm_t dp = groups_.data.get();
  if (dp == nullptr) return;
  std::vector<float> host(stage_->parameter_count());
  run_.backend.Synchronize();
  run_.backend.Download(host.data(), stage_->params(), host.size());
  const uint64_t h = HashBytes(host.data(), host.size() * sizeof(float));
  uint64_t v[2] = {h, ~h};
  CheckBaton(batonAllReduce(v, v, 2, batonUint64, batonMax, dp, nullptr), dp,
             "replica check allreduce");
  if (v[0] != ~v[1]) {
    throw TrainError("replica check failed " + when + ": stage " + std::to_string(layout_.stage) +
                     ", tensor index " + std::to_string(layout_.tensor) +
                     " differs between its data-parallel replicas");
  }
}

std::vector<float> ModelParallelTrainer::WholeParameters() {
  size_t n = 0;
  for (size_t i = 0; i + 1 < sizes_.size(); ++i) {
    n += static_cast<size_t>(sizes_[i]) * sizes_[i + 1] + static_cast<size_t>(sizes_[i + 1]);
  }
  // Every value comes from exactly one rank and the others add zeros, so the sum is exact.
  std::vector<float> whole(n, 0.0f);
  if (layout_.replica == 0) stage_->AddTo(&whole);
  CheckBaton(
      batonReduce(whole.data(), whole.data(), n, batonFloat, batonSum, 0, run_.comm, nullptr),
      run_.comm, "parameter gather");
  return whole;
}

void ModelParallelTrainer::PrintLayout() {
  // Per rank: parameters, their bytes with the momentum, activations kept for backward, stash.
  constexpr size_t kFields = 5;
  double mine[kFields] = {static_cast<double>(stage_->parameter_count()),
                          static_cast<double>(stage_->parameter_count()) * 2 * sizeof(float),
                          static_cast<double>(stage_->activation_bytes()),
                          static_cast<double>(stage_->stash_bytes()),
                          static_cast<double>(stage_->slots())};
  std::vector<double> all(kFields * static_cast<size_t>(run_.world));
  CheckBaton(batonAllGather(mine, all.data(), kFields, batonDouble, run_.comm, nullptr), run_.comm,
             "layout allgather");
  if (run_.rank != 0) return;
  std::printf("layout %s", layout_.Describe().c_str());
  if (layout_.pp > 1) {
    std::printf(", stages");
    for (int s = 0; s < layout_.pp; ++s) {
      std::printf(" [layers %d-%d]", layout_.stage_begin[s] + 1, layout_.stage_begin[s + 1]);
    }
    std::printf(", schedule %s", ScheduleName(opt_.schedule));
    if (pipedream_) std::printf(opt_.weight_stash ? " (weight stashing)" : " (no weight stashing)");
  }
  if (layout_.tp > 1) {
    std::printf(", tensor splits");
    for (int l = 0; l < layout_.layers; ++l) {
      std::printf("%s%s", l == 0 ? " " : ", ", TpSplitName(layout_.SplitOf(l)));
    }
  }
  std::printf(", %d micro-batch(es) per batch of %d\n", micro_, batch_);
  if (pipedream_ && layout_.pp > 1) {
    std::printf("pipedream: a micro-batch's backward comes");
    for (int s = 0; s < layout_.pp; ++s)
      std::printf("%s%d", s == 0 ? " " : ", ", layout_.pp - s - 1);
    std::printf(" update(s) after its forward at stages 0..%d, and uses %s\n", layout_.pp - 1,
                opt_.weight_stash
                    ? "the forward's weights (stashed)"
                    : "the newest weights (no stashing: not the gradient of any weights)");
  }
  for (int r = 0; r < run_.world && r < 16; ++r) {
    const double* v = all.data() + kFields * static_cast<size_t>(r);
    std::printf(
        "  rank %d: replica %d, tensor %d, stage %d: %.0f parameters, parameters + "
        "momentum %.3f MiB, activations %.3f MiB (%.0f slot(s))",
        r, (r / layout_.tp) % layout_.dp, r % layout_.tp, r / (layout_.tp * layout_.dp), v[0],
        MiB(v[1]), MiB(v[2]), v[4]);
    if (v[3] > 0) std::printf(", weight stash %.3f MiB", MiB(v[3]));
    std::printf("\n");
  }
  std::fflush(stdout);
}

void ModelParallelTrainer::Train() {
  const size_t global_batch = static_cast<size_t>(layout_.dp) * static_cast<size_t>(batch_);
  steps_ = static_cast<long>(run_.data.train.count / global_batch);
  if (opt_.max_steps > 0) steps_ = std::min(steps_, opt_.max_steps);
  if (steps_ == 0) {
    throw TrainError("too few samples: " + std::to_string(run_.data.train.count) +
                     " gives no global batch of " + std::to_string(global_batch) + " (" +
                     std::to_string(layout_.dp) + " replica(s) x --batch " +
                     std::to_string(batch_) + ")");
  }
  run_.total_steps = steps_ * opt_.epochs * (pipedream_ ? micro_ : 1);
  run_.data_ranks = layout_.dp;  // for the configuration line
  run_.lr_contributors = layout_.dp;
  size_t whole = 0;
  for (size_t i = 0; i + 1 < sizes_.size(); ++i) {
    whole += static_cast<size_t>(sizes_[i]) * sizes_[i + 1] + static_cast<size_t>(sizes_[i + 1]);
  }
  run_.Start("model " + SizesText(sizes_) + " (" + std::to_string(whole) + " parameters), batch " +
             std::to_string(batch_) + " per replica");
  PrintLayout();
  for (int epoch = run_.start_epoch; epoch < run_.LastEpoch(); ++epoch) {
    std::vector<uint32_t> order = run_.EpochOrder(epoch);
    if (pipedream_) {
      TrainPipeDreamEpoch(order, epoch);
    } else {
      TrainFlushedEpoch(order, epoch);
    }
  }
  if (opt_.check_replicas) CheckReplicas("at the end");
  if (opt_.print_hash || !opt_.save_params.empty()) {
    std::vector<float> params = WholeParameters();
    if (run_.rank == 0 && opt_.print_hash) {
      std::printf("final parameter hash: %016" PRIx64 "\n",
                  HashBytes(params.data(), params.size() * sizeof(float)));
    }
    if (run_.rank == 0 && !opt_.save_params.empty()) WriteParameters(opt_.save_params, params);
  }
}

}  // namespace

void TrainModelParallel(RunContext& run, Layout layout) {
  ModelParallelTrainer trainer(run, std::move(layout));
  trainer.Train();
}

}  // namespace trainer
