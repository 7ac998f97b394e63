#include "trainer.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstring>

#include "checkpoint.h"
#include "util.h"

namespace trainer {
namespace {

constexpr int kEvalBatch = 500;

}  // namespace

std::vector<int> ModelSizes(const Options& o, const DataSplit& data) {
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
    : comm(comm_in), opt(options), backend(backend_in), data(data_in) {
  CheckBaton(batonCommUserRank(comm, &rank), comm, "batonCommUserRank");
  CheckBaton(batonCommCount(comm, &world), comm, "batonCommCount");
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

float RunContext::LearningRate(long step, int contributors) const {
  double base = opt.lr;
  double target = opt.lr_scaling ? opt.lr * contributors : opt.lr;
  if (opt.warmup_steps > 0 && step < opt.warmup_steps) {
    return static_cast<float>(base +
                              (target - base) * static_cast<double>(step) / opt.warmup_steps);
  }
  if (opt.cosine && total_steps > opt.warmup_steps) {
    double progress = static_cast<double>(step - opt.warmup_steps) /
                      static_cast<double>(total_steps - opt.warmup_steps);
    progress = std::min(std::max(progress, 0.0), 1.0);
    return static_cast<float>(target * 0.5 * (1.0 + std::cos(M_PI * progress)));
  }
  return static_cast<float>(target);
}

int RunContext::LastEpoch() const {
  return opt.stop_after > 0 ? std::min(opt.stop_after, opt.epochs) : opt.epochs;
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

void RunContext::Progress(int epoch, long step, long steps, const EpochStats& stats) {
  if (!tty_) return;
  double now = NowSeconds();
  if (step + 1 < steps && now - last_progress_ < 0.1) return;
  last_progress_ = now;
  constexpr int kWidth = 30;
  int filled = static_cast<int>(kWidth * (step + 1) / std::max(steps, 1L));
  std::string bar(static_cast<size_t>(filled), '=');
  bar.resize(kWidth, ' ');
  double loss = stats.samples > 0 ? stats.loss_sum / stats.samples : 0;
  std::fprintf(stderr, "\repoch %d [%s] %ld/%ld loss %.4f", epoch + 1, bar.c_str(), step + 1, steps,
               loss);
  if (step + 1 == steps) std::fprintf(stderr, "\r%*s\r", 70, "");
  std::fflush(stderr);
}

void RunContext::MembershipChanged() {
  tty_ = rank == 0 && opt.progress && isatty(STDERR_FILENO) == 1;
  // The job's file, continued by whoever is rank 0 now.
  if (rank == 0 && json_ == nullptr && !opt.json.empty()) json_ = std::fopen(opt.json.c_str(), "a");
}

void RunContext::FailOnRootProblem(const std::string& problem) {
  char text[512] = {};
  if (rank == 0) std::snprintf(text, sizeof text, "%s", problem.c_str());
  CheckBaton(batonBroadcast(text, text, sizeof text, batonChar, 0, comm, nullptr), comm,
             "start-up broadcast");
  if (text[0] != '\0') {
    throw TrainError(rank == 0 ? problem : std::string(text) + " (reported by rank 0)");
  }
}

void RunContext::ReportEpoch(int epoch, const EpochStats& stats, const BatchStats& test,
                             const BatchStats* ema_test_in, double wall_s, float lr,
                             long samples_trained, const EpochExtras& extras) {
  BatchStats ema_test = ema_test_in != nullptr ? *ema_test_in : BatchStats();
  double sums[11] = {stats.loss_sum, stats.correct,       stats.samples,         stats.comm_wait_s,
                     stats.step_s,   stats.staleness_sum, stats.staleness_count, test.correct,
                     test.samples,   ema_test.correct,    ema_test.samples};
  CheckBaton(batonAllReduce(sums, sums, 11, batonDouble, batonSum, comm, nullptr), comm,
             "metrics allreduce");
  double stale_max = stats.staleness_max;
  CheckBaton(batonAllReduce(&stale_max, &stale_max, 1, batonDouble, batonMax, comm, nullptr), comm,
             "metrics allreduce");
  if (rank != 0 || epoch <= last_printed_epoch_) return;
  last_printed_epoch_ = epoch;

  double loss = sums[2] > 0 ? sums[0] / sums[2] : 0;
  double train_acc = sums[2] > 0 ? sums[1] / sums[2] : 0;
  double wait_frac = sums[4] > 0 ? sums[3] / sums[4] : 0;
  double test_acc = sums[8] > 0 ? sums[7] / sums[8] : 0;
  double ema_acc = sums[10] > 0 ? sums[9] / sums[10] : 0;
  double samples_per_s = wall_s > 0 ? static_cast<double>(samples_trained) / wall_s : 0;
  double stale_mean = sums[6] > 0 ? sums[5] / sums[6] : 0;
  std::printf("epoch %d/%d  loss %.4f  train_acc %.4f  test_acc %.4f", epoch + 1, opt.epochs, loss,
              train_acc, test_acc);
  if (ema_test_in != nullptr) std::printf("  ema_test_acc %.4f", ema_acc);
  std::printf("  samples/s %.0f  comm_wait_frac %.3f", samples_per_s, wait_frac);
  if (opt.mode == Mode::kPs && opt.async) {
    std::printf("  staleness mean %.2f max %.0f", stale_mean, stale_max);
  }
  if (extras.pipeline) {
    std::printf("  bubble %.3f (predicted %.3f)", extras.bubble, extras.bubble_predicted);
  }
  if (extras.traffic) std::printf("  sent/step %.3f MB", extras.sent_per_step / 1e6);
  if (opt.elastic) std::printf("  ranks %d", world);
  std::printf("  lr %.4g  %.1fs\n", lr, wall_s);
  std::fflush(stdout);
  if (json_ != nullptr) {
    std::fprintf(json_,
                 "{\"epoch\": %d, \"mode\": \"%s\", \"ranks\": %d, \"loss\": %.6f, "
                 "\"train_acc\": %.6f, \"test_acc\": %.6f",
                 epoch + 1, ModeName(opt), world, loss, train_acc, test_acc);
    if (ema_test_in != nullptr) std::fprintf(json_, ", \"ema_test_acc\": %.6f", ema_acc);
    if (extras.pipeline) {
      std::fprintf(json_, ", \"bubble\": %.6f, \"bubble_predicted\": %.6f", extras.bubble,
                   extras.bubble_predicted);
    }
    if (extras.traffic) {
      std::fprintf(json_,
                   ", \"sent_bytes_per_rank_step\": %.1f, \"sent_bytes_max_rank_step\": %.1f",
                   extras.sent_per_step, extras.sent_per_step_max);
    }
    std::fprintf(json_,
                 ", \"samples_per_s\": %.1f, \"comm_wait_frac\": %.6f, \"staleness_mean\": %.4f, "
                 "\"staleness_max\": %.0f, \"lr\": %.6g, \"seconds\": %.3f, \"step\": %ld}\n",
                 samples_per_s, wait_frac, stale_mean, stale_max, lr, wall_s, global_step);
    std::fflush(json_);
  }
}

void RunContext::Start(const std::string& what) {
  // Opened before training so an unwritable path fails at once, not after the first epoch.
  std::string json_problem;
  if (rank == 0 && !opt.json.empty()) {
    json_ = std::fopen(opt.json.c_str(), opt.resume.empty() ? "w" : "a");
    if (json_ == nullptr) json_problem = "cannot open " + opt.json + ": " + std::strerror(errno);
  }
  FailOnRootProblem(json_problem);
  if (rank == 0) {
    std::printf("baton-train: %s, %d rank(s), mode %s, %s, %s\n", data.description.c_str(), world,
                ModeName(opt), what.c_str(), backend.name().c_str());
    std::fflush(stdout);
  }
}

TrainingRun::TrainingRun(batonComm_t& comm_in, const Options& options, Backend& backend_in,
                         const DataSplit& data_in)
    : RunContext(comm_in, options, backend_in, data_in),
      model(backend_in, ModelSizes(options, data_in), std::max(options.batch, kEvalBatch)),
      optimizer(backend_in, model.parameter_count(), static_cast<float>(options.momentum),
                static_cast<float>(options.weight_decay)) {
  size_t max_rows = static_cast<size_t>(std::max(opt.batch, kEvalBatch));
  batch_x_ = backend.Allocate(max_rows * data.train.features);
  host_x_.resize(max_rows * data.train.features);
  batch_labels_.resize(max_rows);
}

Shard TrainingRun::ShardOf(int part, int parts) const {
  size_t per = data.train.count / static_cast<size_t>(parts);
  Shard s;
  s.begin = per * static_cast<size_t>(part);
  s.steps = static_cast<long>(per / static_cast<size_t>(opt.batch));
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

void TrainingRun::BroadcastParameters() {
  backend.Synchronize();
  CheckBaton(batonBroadcast(model.params(), model.params(), model.parameter_count(), batonFloat, 0,
                            comm, nullptr),
             comm, "parameter broadcast");
}

void TrainingRun::ShareState(int root) {
  backend.Synchronize();
  const size_t n = model.parameter_count();
  auto share = [&](float* buf, const char* what) {
    CheckBaton(batonBroadcast(buf, buf, n, batonFloat, root, comm, nullptr), comm, what);
  };
  share(model.params(), "parameter broadcast");
  share(optimizer.momentum_buffer(), "momentum broadcast");
  if (ema) share(ema->data(), "EMA broadcast");
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

BatchStats TrainingRun::Evaluate(const float* params) {
  const Dataset& d = data.test;
  size_t begin = d.count * static_cast<size_t>(rank) / static_cast<size_t>(world);
  size_t end = d.count * static_cast<size_t>(rank + 1) / static_cast<size_t>(world);
  BatchStats total;
  for (size_t i = begin; i < end; i += kEvalBatch) {
    int rows = static_cast<int>(std::min<size_t>(kEvalBatch, end - i));
    for (int r = 0; r < rows; ++r) {
      const uint8_t* img = d.image(i + static_cast<size_t>(r));
      float* x = host_x_.data() + static_cast<size_t>(r) * d.features;
      for (size_t f = 0; f < d.features; ++f) x[f] = static_cast<float>(img[f]) * (1.0f / 255.0f);
    }
    backend.Upload(batch_x_.data(), host_x_.data(), static_cast<size_t>(rows) * d.features);
    BatchStats s = model.Forward(params, batch_x_.data(), d.labels.data() + i, rows, false);
    total.loss_sum += s.loss_sum;
    total.correct += s.correct;
    total.samples += s.samples;
  }
  return total;
}

void TrainingRun::FinishEpoch(int epoch, const EpochStats& stats, double wall_s, float lr,
                              long samples_trained, const EpochExtras& extras) {
  Timeline::Scope span(timeline, "end of epoch", "\"epoch\":" + std::to_string(epoch + 1));
  backend.Synchronize();
  BatchStats test = Evaluate(model.params());
  BatchStats ema_test;
  if (ema) ema_test = Evaluate(ema->data());
  ReportEpoch(epoch, stats, test, ema ? &ema_test : nullptr, wall_s, lr, samples_trained, extras);
  if (!opt.checkpoint.empty()) SaveCheckpoint(epoch + 1);
}

void TrainingRun::SaveCheckpoint(int epochs_done) {
  if (rank != 0) return;
  Checkpoint c;
  c.mode = ModeName(opt);
  c.sizes = model.sizes();
  c.seed = opt.seed;
  c.epochs_done = epochs_done;
  c.global_step = global_step;
  size_t n = model.parameter_count();
  backend.Synchronize();
  c.params.resize(n);
  backend.Download(c.params.data(), model.params(), n);
  c.momentum.resize(n);
  backend.Download(c.momentum.data(), optimizer.momentum_buffer(), n);
  if (ema) {
    c.ema.resize(n);
    backend.Download(c.ema.data(), ema->data(), n);
  }
  WriteCheckpoint(opt.checkpoint, c);
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
      else if (c.mode != ModeName(opt))
        problem = opt.resume + ": written by --mode " + c.mode;
      else if (c.seed != opt.seed)
        problem = opt.resume + ": written with another --seed";
      else if (!c.ema.empty() != (ema != nullptr))
        problem = opt.resume + ": --ema differs";
      else if (c.params.size() != model.parameter_count())
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
  auto share = [&](std::vector<float>& host, float* dst) {
    host.resize(n);
    CheckBaton(batonBroadcast(host.data(), host.data(), n, batonFloat, 0, comm, nullptr), comm,
               "checkpoint broadcast");
    backend.Upload(dst, host.data(), n);
  };
  share(c.params, model.params());
  share(c.momentum, optimizer.momentum_buffer());
  if (ema) share(c.ema, ema->data());
  start_epoch = static_cast<int>(meta[0]);
  global_step = meta[1];
}

void TrainingRun::Run() {
  model.Initialize(opt.seed);
  // Every rank starts from rank 0's parameters, as DDP and Horovod do. A replacement that joined
  // a running job receives the whole state from it instead, in the mode's loop (elastic.h).
  if (!joined) BroadcastParameters();
  if (opt.ema > 0) {
    ema = std::make_unique<ParameterEma>(backend, model.params(), model.parameter_count(),
                                         static_cast<float>(opt.ema));
  }
  if (!joined) {
    if (!opt.resume.empty()) LoadCheckpoint();
    Start("model " + SizesText(model.sizes()) + " (" + std::to_string(model.parameter_count()) +
          " parameters), batch " + std::to_string(opt.batch) + " per rank");
    if (rank == 0 && start_epoch > 0) {
      std::printf("resumed after epoch %d (step %ld)\n", start_epoch, global_step);
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
