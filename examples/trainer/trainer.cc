#include "trainer.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstring>

#include "checkpoint.h"
#include "cnn.h"
#include "util.h"

namespace trainer {
std::vector<int> ModelSizes(const Options& o, const DataSplit& data) {
  if (o.model == ModelKind::kCnn) {
    const size_t features = data.train.features;
    if (std::string why = Cnn::Unsupported(features); !why.empty()) throw UsageError(why);
    return Cnn::Sizes(o.batch_norm,
                      static_cast<int>(std::lround(std::sqrt(static_cast<double>(features)))),
                      data.train.classes);
  }
  std::vector<int> sizes = {static_cast<int>(data.train.features)};
  sizes.insert(sizes.end(), o.hidden.begin(), o.hidden.end());
  sizes.push_back(data.train.classes);
  return sizes;
}

std::string SizesText(const std::vector<int>& sizes) {
  std::string text;
  for (int s : sizes) {
    if (!text.empty()) text += '-';
    text += std::to_string(s);
  }
  return text;
}

void WriteParameters(const std::string& path, const std::vector<float>& params) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr)
    throw TrainError("--save-params: cannot open " + path + ": " + std::strerror(errno));
  const bool written = std::fwrite(params.data(), sizeof(float), params.size(), f) == params.size();
  if (std::fclose(f) != 0 || !written) {
    throw TrainError("--save-params: cannot write " + path + ": " + std::strerror(errno));
  }
}

RunContext::RunContext(batonComm_t& comm_in, const Options& options, Backend& backend_in,
                       const DataSplit& data_in)
    : comm(comm_in), opt(options), backend(backend_in), data(data_in), straggler(options, 0) {
  CheckBaton(batonCommUserRank(comm, &rank), comm, "batonCommUserRank");
  CheckBaton(batonCommCount(comm, &world), comm, "batonCommCount");
  straggler = Straggler(options, rank);
  for (const auto& [r, factor] : opt.straggle) {
    if (r >= world) {
      throw UsageError("--straggle: rank " + std::to_string(r) + " does not exist (" +
                       std::to_string(world) + " ranks)");
    }
  }
  tty_ = rank == 0 && opt.progress && isatty(STDERR_FILENO) == 1;
}

RunContext::~RunContext() {
  if (json_ != nullptr) std::fclose(json_);
}

std::vector<uint32_t> RunContext::EpochOrder(int epoch) const {
  std::vector<uint32_t> order(data.train.count);
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<uint32_t>(i);
  Rng rng(MixSeed(opt.seed, static_cast<uint64_t>(epoch), 0x5407));
  for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.Below(i)]);
  return order;
}

void RunContext::LoadRows(const Dataset& set, const uint32_t* indices, int rows, float* host,
                          uint8_t* labels) const {
  for (int r = 0; r < rows; ++r) {
    const uint32_t index = indices[r];
    if (host != nullptr) {
      const uint8_t* img = set.image(index);
      float* x = host + static_cast<size_t>(r) * set.features;
      for (size_t f = 0; f < set.features; ++f) x[f] = static_cast<float>(img[f]) * (1.0f / 255.0f);
    }
    if (labels != nullptr) labels[r] = set.labels[index];
  }
}

void RunContext::MembershipChanged() {
  tty_ = rank == 0 && opt.progress && isatty(STDERR_FILENO) == 1;
  // The job's file, continued by whoever is rank 0 now.
  if (rank == 0 && json_ == nullptr && !opt.json.empty()) json_ = std::fopen(opt.json.c_str(), "a");
}

void RunContext::FailOnRootProblem(const std::string& problem) {
  if (std::string first = FirstRankProblem(problem, comm, "start-up check"); !first.empty())
    throw TrainError(first);
}

TrainingRun::TrainingRun(batonComm_t& comm_in, const Options& options, Backend& backend_in,
                         const DataSplit& data_in)
    : RunContext(comm_in, options, backend_in, data_in),
      model_storage(
          MakeModel(backend_in, ModelSizes(options, data_in), std::max(options.batch, kEvalBatch))),
      model(*model_storage),
      optimizer(backend_in, model.layers(), model.parameter_count(), options) {
  size_t max_rows = static_cast<size_t>(std::max(opt.batch, kEvalBatch));
  batch_x_ = backend.Allocate(max_rows * data.train.features);
  host_x_.resize(max_rows * data.train.features);
  batch_labels_.resize(max_rows);
  if (opt.accumulate > 1) grad_sum_ = backend.Allocate(model.parameter_count());
}

TrainingRun::~TrainingRun() {
  if (bn_comm_ != nullptr) batonCommDestroy(bn_comm_);
}

void TrainingRun::StartSyncBatchNorm() {
  auto* cnn = dynamic_cast<Cnn*>(&model);
  if (cnn == nullptr) throw TrainError("internal: --sync-bn without the CNN");
  CheckBaton(batonCommSplit(comm, 0, rank, &bn_comm_, nullptr), comm, "batonCommSplit (--sync-bn)");
  cnn->SetStatSum([this](double* values, size_t n) {
    CheckBaton(batonAllReduce(values, values, n, batonFloat64, batonSum, bn_comm_, nullptr),
               bn_comm_, "--sync-bn statistics allreduce");
  });
}

Shard TrainingRun::ShardOf(int part, int parts) const {
  size_t per = data.train.count / static_cast<size_t>(parts);
  Shard s;
  s.begin = per * static_cast<size_t>(part);
  s.steps = static_cast<long>(per / static_cast<size_t>(StepBatch(opt)));
  if (opt.max_steps > 0) s.steps = std::min(s.steps, opt.max_steps);
  return s;
}

BatchStats TrainingRun::ForwardBatch(const std::vector<uint32_t>& order, const Shard& shard,
                                     long step, bool train) {
  const Dataset& d = data.train;
  int rows = opt.batch;
  size_t first = shard.begin + static_cast<size_t>(step) * static_cast<size_t>(rows);
  LoadRows(d, order.data() + first, rows, host_x_.data(), batch_labels_.data());
  backend.Upload(batch_x_.data(), host_x_.data(), static_cast<size_t>(rows) * d.features);
  return model.Forward(model.params(), batch_x_.data(), batch_labels_.data(), rows, train);
}

BatchStats TrainingRun::ForwardMicroBatch(const std::vector<uint32_t>& order, const Shard& shard,
                                          long step, int micro) {
  return ForwardBatch(order, shard, step * opt.accumulate + micro, true);
}

BatchStats TrainingRun::ComputeGradient(const std::vector<uint32_t>& order, const Shard& shard,
                                        long step,
                                        const std::function<void(int layer)>& layer_done) {
  const int micro = opt.accumulate;
  straggler.Before();
  if (micro == 1) {
    BatchStats b = ForwardBatch(order, shard, step, true);
    model.Backward(layer_done);
    straggler.After();
    return b;
  }
  // Each micro-batch's gradient is the mean over its rows; their mean over the micro-batches is
  // the gradient of the whole (micro x batch) batch, summed in another order.
  BatchStats total;
  const size_t n = model.parameter_count();
  const float inv = 1.0f / static_cast<float>(micro);
  for (int m = 0; m < micro; ++m) {
    BatchStats b = ForwardMicroBatch(order, shard, step, m);
    total.loss_sum += b.loss_sum;
    total.correct += b.correct;
    total.samples += b.samples;
    if (m + 1 < micro) {
      model.Backward(nullptr);
      if (m == 0) {
        backend.Copy(grad_sum_.data(), model.grads(), n);
      } else {
        backend.Add(grad_sum_.data(), model.grads(), n);
      }
      continue;
    }
    // The last one: each layer's sum is completed (and scaled) as soon as backward has it, so
    // its allreduce still overlaps the layers below.
    model.Backward([&](int l) {
      const LayerSlice& s = model.layers()[static_cast<size_t>(l)];
      float* g = model.grads() + s.begin();
      backend.Add(g, grad_sum_.data() + s.begin(), s.end() - s.begin());
      backend.Scale(g, s.end() - s.begin(), inv);
      if (layer_done) layer_done(l);
    });
  }
  straggler.After();
  return total;
}

void TrainingRun::BroadcastParameters() {
  backend.Synchronize();
  CheckBaton(batonBroadcast(model.params(), model.params(), model.parameter_count(), batonFloat, 0,
                            comm, nullptr),
             comm, "parameter broadcast");
  if (model.state_count() > 0) {
    CheckBaton(batonBroadcast(model.state(), model.state(), model.state_count(), batonFloat, 0,
                              comm, nullptr),
               comm, "model state broadcast");
  }
}

void TrainingRun::AverageModelState(bool contributes) {
  const size_t n = model.state_count();
  if (n == 0) return;
  // The sum of the contributors' state and their count, in one allreduce.
  std::vector<double> v(n + 1, 0.0);
  if (contributes) {
    for (size_t i = 0; i < n; ++i) v[i] = model.state()[i];
    v[n] = 1;
  }
  CheckBaton(batonAllReduce(v.data(), v.data(), v.size(), batonFloat64, batonSum, comm, nullptr),
             comm, "model state allreduce");
  if (v[n] <= 0) return;
  for (size_t i = 0; i < n; ++i) model.state()[i] = static_cast<float>(v[i] / v[n]);
}

void TrainingRun::ShareState(int root) {
  backend.Synchronize();
  const size_t n = model.parameter_count();
  auto share = [&](float* buf, const char* what) {
    CheckBaton(batonBroadcast(buf, buf, n, batonFloat, root, comm, nullptr), comm, what);
  };
  share(model.params(), "parameter broadcast");
  if (model.state_count() > 0) {
    CheckBaton(batonBroadcast(model.state(), model.state(), model.state_count(), batonFloat, root,
                              comm, nullptr),
               comm, "model state broadcast");
  }
  for (int p = 0; p < optimizer.parts(); ++p)
    share(optimizer.state() + p * n, "optimizer broadcast");
  if (ema) share(ema->data(), "EMA broadcast");
  optimizer.set_steps(global_step);
}

uint64_t TrainingRun::ParameterHash() {
  std::vector<float> host(model.parameter_count());
  backend.Synchronize();
  backend.Download(host.data(), model.params(), host.size());
  return HashBytes(host.data(), host.size() * sizeof(float));
}

void TrainingRun::CheckReplicas(const char* when) {
  uint64_t h = ParameterHash();
  // max of (h, ~h) gives the largest hash and the complement of the smallest in one call.
  uint64_t v[2] = {h, ~h};
  CheckBaton(batonAllReduce(v, v, 2, batonUint64, batonMax, comm, nullptr), comm,
             "replica check allreduce");
  uint64_t hmax = v[0];
  uint64_t hmin = ~v[1];
  if (hmax != hmin) {
    char buf[160];
    std::snprintf(
        buf, sizeof buf,
        "replica check failed %s: parameter hashes differ across ranks (this rank %016" PRIx64
        ", min %016" PRIx64 ", max %016" PRIx64 ")",
        when, h, hmin, hmax);
    throw TrainError(buf);
  }
}

void TrainingRun::FinishEpoch(int epoch, const EpochStats& stats, double wall_s, float lr,
                              long samples_trained, const EpochExtras& extras) {
  Timeline::Scope span(timeline, "end of epoch", "\"epoch\":" + std::to_string(epoch + 1));
  backend.Synchronize();
  // Batch norm's running statistics: the mean over the ranks that trained (not the servers of
  // --mode ps, ranks 0..ps_shards-1), so every rank evaluates and checkpoints the same model.
  AverageModelState(!(opt.mode == Mode::kPs && rank < opt.ps_shards));
  std::vector<double> class_counts(2 * static_cast<size_t>(data.test.classes), 0.0);
  BatchStats test = Evaluate(data.test, model.params(), &class_counts);
  BatchStats ema_test;
  if (ema) ema_test = Evaluate(data.test, ema->data(), nullptr);
  BatchStats val;
  if (data.val.count > 0) val = Evaluate(data.val, model.params(), nullptr);
  ReportEpoch(epoch, stats, test, ema ? &ema_test : nullptr, wall_s, lr, samples_trained, extras,
              data.val.count > 0 ? &val : nullptr, &class_counts);
  if (!opt.checkpoint.empty()) SaveCheckpoint(epoch + 1, opt.checkpoint);
  // last_score is the same on every rank (ReportEpoch's sums).
  if (opt.keep_best && last_score > best_score_) {
    best_score_ = last_score;
    SaveCheckpoint(epoch + 1, opt.checkpoint + ".best");
    if (rank == 0) {
      std::printf("keep-best: epoch %d (%s %.4f) saved to %s.best\n", epoch + 1,
                  data.val.count > 0 ? "val_acc" : "test_acc", last_score, opt.checkpoint.c_str());
      std::fflush(stdout);
    }
  }
}

std::string CheckpointTag(const Options& o) {
  // "sync" for SGD, as before --optimizer existed; "sync/adam" for the others.
  std::string tag = ModeName(o);
  if (o.optimizer != OptimizerKind::kSgd) tag += std::string("/") + OptimizerName(o.optimizer);
  return tag;
}

void TrainingRun::SaveCheckpoint(int epochs_done, const std::string& path) {
  if (rank != 0) return;
  Checkpoint c;
  c.mode = CheckpointTag(opt);
  c.sizes = model.sizes();
  c.seed = opt.seed;
  c.epochs_done = epochs_done;
  c.global_step = global_step;
  size_t n = model.parameter_count();
  backend.Synchronize();
  c.params.resize(n);
  backend.Download(c.params.data(), model.params(), n);
  c.model_state.assign(model.state(), model.state() + model.state_count());
  c.momentum.resize(optimizer.state_size());
  backend.Download(c.momentum.data(), optimizer.state(), c.momentum.size());
  if (ema) {
    c.ema.resize(n);
    backend.Download(c.ema.data(), ema->data(), n);
  }
  WriteCheckpoint(path, c);
}

// Rank 0 reads the file and broadcasts it, so the other ranks need not see the same filesystem.
void TrainingRun::LoadCheckpoint() {
  Checkpoint c;
  std::string problem;
  if (rank == 0) {
    try {
      c = ReadCheckpoint(opt.resume);
      if (c.sizes != model.sizes())
        problem = opt.resume + ": the model's layer sizes differ";
      else if (c.mode != CheckpointTag(opt))
        problem = opt.resume + ": written by --mode " + c.mode +
                  " (this run: " + CheckpointTag(opt) + ")";
      else if (c.seed != opt.seed)
        problem = opt.resume + ": written with another --seed";
      else if (!c.ema.empty() != (ema != nullptr))
        problem = opt.resume + ": --ema differs";
      else if (c.params.size() != model.parameter_count() ||
               c.model_state.size() != model.state_count() ||
               c.momentum.size() != optimizer.state_size())
        problem = opt.resume + ": wrong size";
    } catch (const TrainError& e) {
      problem = e.what();
    }
  }
  FailOnRootProblem(problem);
  int64_t meta[2] = {c.epochs_done, c.global_step};
  CheckBaton(batonBroadcast(meta, meta, 2, batonInt64, 0, comm, nullptr), comm,
             "checkpoint broadcast");
  size_t n = model.parameter_count();
  auto share = [&](std::vector<float>& host, float* dst, size_t count) {
    host.resize(count);
    CheckBaton(batonBroadcast(host.data(), host.data(), count, batonFloat, 0, comm, nullptr), comm,
               "checkpoint broadcast");
    backend.Upload(dst, host.data(), count);
  };
  share(c.params, model.params(), n);
  if (model.state_count() > 0) {
    std::vector<float>& state = c.model_state;
    state.resize(model.state_count());
    CheckBaton(
        batonBroadcast(state.data(), state.data(), state.size(), batonFloat, 0, comm, nullptr),
        comm, "checkpoint broadcast");
    std::copy(state.begin(), state.end(), model.state());
  }
  share(c.momentum, optimizer.state(), optimizer.state_size());
  if (ema) share(c.ema, ema->data(), n);
  start_epoch = static_cast<int>(meta[0]);
  global_step = meta[1];
  optimizer.set_steps(global_step);
}

void TrainingRun::Run() {
  model.Initialize(opt.seed);
  // Every rank starts from rank 0's parameters, as DDP and Horovod do. A replacement that joined
  // a running job receives the whole state from it instead, in the mode's loop (elastic.h).
  if (!joined) BroadcastParameters();
  if (opt.sync_bn) StartSyncBatchNorm();
  if (opt.ema > 0) {
    ema = std::make_unique<ParameterEma>(backend, model.params(), model.parameter_count(),
                                         static_cast<float>(opt.ema));
  }
  // For the configuration and the schedule: what each mode sets again when it starts.
  const int workers = world - opt.ps_shards;
  switch (opt.mode) {
    case Mode::kPs:
      data_ranks = workers;
      lr_contributors = opt.async ? 1 : workers;
      total_steps = ShardOf(0, std::max(workers, 1)).steps * opt.epochs *
                    (opt.async ? std::max(workers, 1) : 1);
      break;
    case Mode::kLocal:
      data_ranks = world;
      lr_contributors = 1;
      total_steps = ShardOf(rank, world).steps * opt.epochs;
      break;
    default:
      data_ranks = world;
      lr_contributors = world;
      total_steps = ShardOf(0, world).steps * opt.epochs;
      break;
  }
  if (!joined) {
    if (!opt.resume.empty()) LoadCheckpoint();
    Start("model " + model.Describe() + " (" + std::to_string(model.parameter_count()) +
          " parameters), batch " + std::to_string(opt.batch) + " per rank" +
          (opt.accumulate > 1 ? " x " + std::to_string(opt.accumulate) + " accumulated" : "") +
          ", optimizer " + OptimizerName(opt.optimizer));
    if (rank == 0 && start_epoch > 0) {
      std::printf("resumed after epoch %d (step %ld)\n", start_epoch, global_step);
      // Not an error, as in Keras (fit with initial_epoch >= epochs) and Lightning (max_epochs
      // reached): rerunning a finished job's command trains nothing and succeeds.
      if (start_epoch >= LastEpoch()) {
        if (opt.epochs <= start_epoch)
          std::printf(
              "nothing left to train: the checkpoint is after epoch %d and --epochs is %d (give "
              "--epochs above %d to train on)\n",
              start_epoch, opt.epochs, start_epoch);
        else
          std::printf(
              "nothing left to train: the checkpoint is after epoch %d and --stop-after is %d\n",
              start_epoch, opt.stop_after);
      }
      std::fflush(stdout);
    }
  }
  if (joined || start_epoch < LastEpoch()) {
    switch (opt.mode) {
      case Mode::kSync:
        TrainSync(*this);
        break;
      case Mode::kLocal:
        TrainLocal(*this);
        break;
      case Mode::kPs:
        TrainParameterServer(*this);
        break;
      default:
        throw TrainError("internal: a model-parallel mode in the data-parallel trainer");
    }
  }
  ReportTarget();
  if (opt.check_replicas) CheckReplicas("at the end");
  if (opt.print_hash) {
    uint64_t h = ParameterHash();
    if (rank == 0) std::printf("final parameter hash: %016" PRIx64 "\n", h);
  }
  if (!opt.save_params.empty() && rank == 0) {
    std::vector<float> host(model.parameter_count());
    backend.Synchronize();
    backend.Download(host.data(), model.params(), host.size());
    WriteParameters(opt.save_params, host);
  }
}

}  // namespace trainer
