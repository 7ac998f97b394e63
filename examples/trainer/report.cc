// What rank 0 reports: the configuration at the start, each epoch's line and JSON record (test
// loss and accuracy, validation, per-class accuracy at the end, --target-acc), the progress bar
// and --log-every lines.
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "trainer.h"
#include "util.h"

namespace trainer {
namespace {

// printf onto the end of *out.
__attribute__((format(printf, 2, 3))) void Append(std::string* out, const char* format, ...) {
  va_list args;
  va_start(args, format);
  char small[512];
  const int n = std::vsnprintf(small, sizeof small, format, args);
  va_end(args);
  if (n < 0) return;
  if (static_cast<size_t>(n) < sizeof small) {
    out->append(small, static_cast<size_t>(n));
    return;
  }
  std::string big(static_cast<size_t>(n) + 1, '\0');
  va_start(args, format);
  std::vsnprintf(big.data(), big.size(), format, args);
  va_end(args);
  out->append(big.data(), static_cast<size_t>(n));
}

// A diverged run's figures print as nan, -nan, inf or -inf, which JSON has no word for: each such
// value (after ": ", "[" or ", ") becomes null, so that the line still parses.
void NullNonFinite(std::string* record) {
  const std::string& s = *record;
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const bool value_start =
        i > 1 && (s[i - 1] == '[' || (s[i - 1] == ' ' && (s[i - 2] == ':' || s[i - 2] == ',')));
    const size_t j = i + (s[i] == '-' ? 1 : 0);
    if (value_start && (s.compare(j, 3, "nan") == 0 || s.compare(j, 3, "inf") == 0)) {
      out += "null";
      i = j + 3;
      continue;
    }
    out += s[i++];
  }
  *record = std::move(out);
}

}  // namespace

void RunContext::Progress(int epoch, long step, long steps, const EpochStats& stats) {
  const double end = NowSeconds();
  if (step > 0 && last_step_end_ > 0) step_times_.push_back(end - last_step_end_);
  last_step_end_ = end;
  if (stats.samples < jitter_samples_) jitter_loss_ = jitter_samples_ = 0;  // a new epoch
  if (stats.samples > jitter_samples_) {
    const double step_loss = (stats.loss_sum - jitter_loss_) / (stats.samples - jitter_samples_);
    jitter_n_ += 1;
    jitter_sum_ += step_loss;
    jitter_sq_ += step_loss * step_loss;
    jitter_loss_ = stats.loss_sum;
    jitter_samples_ = stats.samples;
  }
  if (opt.log_every > 0 && stats.samples > 0) {
    // The rank that logs computes gradients: rank 0, or the first worker of a parameter server.
    const int logger = opt.mode == Mode::kPs ? opt.ps_shards : 0;
    if (stats.samples < log_samples_) log_loss_ = log_samples_ = 0;  // a new epoch
    ++logged_steps_;
    if (rank == logger && logged_steps_ % opt.log_every == 0) {
      const double n = stats.samples - log_samples_;
      std::printf("step %ld (epoch %d, %ld/%ld)  loss %.4f (rank %d, mean of the last %ld steps)\n",
                  logged_steps_, epoch + 1, step + 1, steps,
                  n > 0 ? (stats.loss_sum - log_loss_) / n : 0.0, rank, opt.log_every);
      std::fflush(stdout);
      log_loss_ = stats.loss_sum;
      log_samples_ = stats.samples;
    }
  }
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

int RunContext::LastEpoch() const {
  int last = opt.stop_after > 0 ? std::min(opt.stop_after, opt.epochs) : opt.epochs;
  if (stop_epoch_ >= 0) last = std::min(last, stop_epoch_ + 1);
  return last;
}

void RunContext::ReportEpoch(int epoch, const EpochStats& stats, const BatchStats& test,
                             const BatchStats* ema_test_in, double wall_s, float lr,
                             long samples_trained, const EpochExtras& extras,
                             const BatchStats* val_in, const std::vector<double>* class_counts) {
  BatchStats ema_test = ema_test_in != nullptr ? *ema_test_in : BatchStats();
  BatchStats val = val_in != nullptr ? *val_in : BatchStats();
  std::vector<double> sums = {stats.loss_sum,        stats.correct,    stats.samples,
                              stats.comm_wait_s,     stats.step_s,     stats.staleness_sum,
                              stats.staleness_count, test.correct,     test.samples,
                              ema_test.correct,      ema_test.samples, test.loss_sum,
                              val.correct,           val.samples,      val.loss_sum};
  const bool straggling = straggler.active() || !opt.straggle.empty();
  sums.push_back(straggler.slept_s() - straggle_s_);
  sums.push_back(static_cast<double>(straggler.straggled_steps() - straggled_));
  straggle_s_ = straggler.slept_s();
  straggled_ = straggler.straggled_steps();
  sums.push_back(stats.gradients_applied);  // 17
  sums.push_back(stats.gradients_dropped);  // 18
  sums.push_back(stats.averages);           // 19 (each rank's count: / world below)
  sums.push_back(jitter_n_);                // 20: per-step losses of every training rank
  sums.push_back(jitter_sum_);              // 21
  sums.push_back(jitter_sq_);               // 22
  jitter_n_ = jitter_sum_ = jitter_sq_ = 0;
  jitter_loss_ = jitter_samples_ = 0;
  const size_t per_class_at = sums.size();
  if (class_counts != nullptr) sums.insert(sums.end(), class_counts->begin(), class_counts->end());
  CheckBaton(
      batonAllReduce(sums.data(), sums.data(), sums.size(), batonDouble, batonSum, comm, nullptr),
      comm, "metrics allreduce");
  // The step times' median and 99th percentile on this rank (nearest rank), the largest over the
  // ranks: the pace of the slowest.
  std::vector<double> times = std::move(step_times_);
  step_times_.clear();
  last_step_end_ = 0;
  std::sort(times.begin(), times.end());
  auto percentile = [&](double p) {
    if (times.empty()) return 0.0;
    size_t i = static_cast<size_t>(std::ceil(p * static_cast<double>(times.size()))) - 1;
    return times[std::min(i, times.size() - 1)];
  };
  double maxima[4] = {stats.staleness_max, stats.clock_gap_max, percentile(0.5), percentile(0.99)};
  CheckBaton(batonAllReduce(maxima, maxima, 4, batonDouble, batonMax, comm, nullptr), comm,
             "metrics allreduce");
  const double stale_max = maxima[0];
  // Loss jitter: the standard deviation of the per-step losses (each a rank's batch mean) of all
  // training ranks over the epoch, trend included.
  double loss_step_std = 0;
  if (sums[20] > 1) {
    const double mean = sums[21] / sums[20];
    const double var = (sums[22] - sums[20] * mean * mean) / (sums[20] - 1);
    // A diverged run's NaN stays NaN (std::max would turn it into 0).
    loss_step_std = std::isnan(var) ? var : std::sqrt(std::max(0.0, var));
  }
  auto ratio = [&](size_t num, size_t den) { return sums[den] > 0 ? sums[num] / sums[den] : 0; };
  const double test_acc = ratio(7, 8);
  const double test_loss = ratio(11, 8);
  const bool has_val = val_in != nullptr && sums[13] > 0;
  const double val_acc = ratio(12, 13);
  const double val_loss = ratio(14, 13);
  // Every rank has the sums: each decides alike whether the target is reached (and stops).
  last_score = has_val ? val_acc : test_acc;
  bool reached_now = false;
  if (opt.target_acc > 0 && !target_reached_ && last_score >= opt.target_acc) {
    target_reached_ = reached_now = true;
    if (opt.stop_at_target) stop_epoch_ = epoch;
  }
  const bool last = epoch + 1 >= LastEpoch();
  last_train_loss = ratio(0, 2);
  if (rank != 0 || epoch <= last_printed_epoch_) return;
  last_printed_epoch_ = epoch;

  double loss = ratio(0, 2);
  double train_acc = ratio(1, 2);
  double wait_frac = ratio(3, 4);
  double ema_acc = ratio(9, 10);
  double samples_per_s = wall_s > 0 ? static_cast<double>(samples_trained) / wall_s : 0;
  double stale_mean = ratio(5, 6);
  std::printf("epoch %d/%d  loss %.4f  train_acc %.4f  test_acc %.4f  test_loss %.4f", epoch + 1,
              opt.epochs, loss, train_acc, test_acc, test_loss);
  if (has_val) std::printf("  val_acc %.4f  val_loss %.4f", val_acc, val_loss);
  if (ema_test_in != nullptr) std::printf("  ema_test_acc %.4f", ema_acc);
  std::printf("  samples/s %.0f  comm_wait_frac %.3f", samples_per_s, wait_frac);
  if (opt.mode == Mode::kPs && opt.async) {
    std::printf("  staleness mean %.2f max %.0f  clock gap max %.0f", stale_mean, stale_max,
                maxima[1]);
  }
  if (extras.pipeline) {
    std::printf("  bubble %.3f (predicted %.3f)", extras.bubble, extras.bubble_predicted);
  }
  if (extras.traffic) std::printf("  sent/step %.3f MB", extras.sent_per_step / 1e6);
  if (opt.mode == Mode::kLocal) {
    std::printf("  K %.0f  averages %.0f", stats.local_k, sums[19] / world);
  }
  if (opt.backup_workers > 0) {
    std::printf("  gradients applied %.0f dropped %.0f", sums[17], sums[18]);
  }
  if (straggling) std::printf("  straggled %.0f steps, slept %.3fs", sums[16], sums[15]);
  if (opt.elastic) std::printf("  ranks %d", world);
  std::printf("  step p50 %.1f ms p99 %.1f ms  lr %.4g  %.1fs\n", 1e3 * maxima[2], 1e3 * maxima[3],
              lr, wall_s);
  const double since_start = NowSeconds() - start_time_;
  if (reached_now) {
    std::printf("target: %s %.4f >= %.4f after epoch %d, step %ld, %.2f s%s\n",
                has_val ? "val_acc" : "test_acc", last_score, opt.target_acc, epoch + 1,
                global_step, since_start,
                opt.stop_at_target ? " (stopping: --stop-at-target)" : "");
  }
  std::vector<double> per_class;
  if (last && class_counts != nullptr) {
    const size_t classes = class_counts->size() / 2;
    std::printf("per-class test accuracy:");
    for (size_t c = 0; c < classes; ++c) {
      const double total = sums[per_class_at + classes + c];
      per_class.push_back(total > 0 ? sums[per_class_at + c] / total : 0);
      std::printf(" %zu:%.4f", c, per_class.back());
    }
    std::printf("\n");
  }
  std::fflush(stdout);
  if (json_ != nullptr) {
    std::string record;
    Append(&record,
           "{\"epoch\": %d, \"mode\": \"%s\", \"ranks\": %d, \"loss\": %.6f, "
           "\"train_acc\": %.6f, \"test_acc\": %.6f, \"test_loss\": %.6f",
           epoch + 1, ModeName(opt), world, loss, train_acc, test_acc, test_loss);
    if (has_val) Append(&record, ", \"val_acc\": %.6f, \"val_loss\": %.6f", val_acc, val_loss);
    if (ema_test_in != nullptr) Append(&record, ", \"ema_test_acc\": %.6f", ema_acc);
    if (extras.pipeline) {
      Append(&record, ", \"bubble\": %.6f, \"bubble_predicted\": %.6f", extras.bubble,
             extras.bubble_predicted);
    }
    if (extras.traffic) {
      Append(&record, ", \"sent_bytes_per_rank_step\": %.1f, \"sent_bytes_max_rank_step\": %.1f",
             extras.sent_per_step, extras.sent_per_step_max);
    }
    if (opt.mode == Mode::kPs && opt.async) Append(&record, ", \"clock_gap_max\": %.0f", maxima[1]);
    if (opt.mode == Mode::kLocal) {
      Append(&record, ", \"average_every\": %.0f, \"averages\": %.0f", stats.local_k,
             sums[19] / world);
    }
    if (opt.backup_workers > 0) {
      Append(&record, ", \"gradients_applied\": %.0f, \"gradients_dropped\": %.0f", sums[17],
             sums[18]);
    }
    if (straggling) {
      Append(&record, ", \"straggled_steps\": %.0f, \"straggle_sleep_s\": %.3f", sums[16],
             sums[15]);
    }
    if (reached_now) {
      Append(&record, ", \"target_reached_step\": %ld, \"target_reached_seconds\": %.3f",
             global_step, since_start);
    }
    if (!per_class.empty()) {
      Append(&record, ", \"per_class_test_acc\": [");
      for (size_t c = 0; c < per_class.size(); ++c) {
        Append(&record, "%s%.6f", c > 0 ? ", " : "", per_class[c]);
      }
      Append(&record, "]");
    }
    Append(&record, ", \"step_p50_s\": %.6f, \"step_p99_s\": %.6f", maxima[2], maxima[3]);
    Append(&record, ", \"loss_step_std\": %.6f", loss_step_std);
    Append(&record,
           ", \"samples_per_s\": %.1f, \"comm_wait_frac\": %.6f, \"staleness_mean\": %.4f, "
           "\"staleness_max\": %.0f, \"lr\": %.6g, \"seconds\": %.3f, \"step\": %ld}\n",
           samples_per_s, wait_frac, stale_mean, stale_max, lr, wall_s, global_step);
    NullNonFinite(&record);
    std::fputs(record.c_str(), json_);
    std::fflush(json_);
  }
}

void RunContext::ReportTarget() {
  if (rank != 0 || opt.target_acc <= 0 || target_reached_) return;
  std::printf("target: %s %.4f not reached in %d epoch(s) (last %.4f)\n",
              data.val.count > 0 ? "val_acc" : "test_acc", opt.target_acc, LastEpoch(), last_score);
  std::fflush(stdout);
}

void RunContext::Start(const std::string& what) {
  start_time_ = NowSeconds();
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
    std::fputs(ConfigText().c_str(), stdout);
    std::fflush(stdout);
    if (json_ != nullptr) {
      std::fprintf(json_, "%s\n", ConfigJson().c_str());
      std::fflush(json_);
    }
  }
}

}  // namespace trainer
