// The effective configuration (every option after defaults and scaling), printed at the start and
// written as the first line of --json, and the version text.
#include <baton.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "backend.h"
#include "options.h"
#include "trainer.h"

namespace trainer {
namespace {

std::string Quote(const std::string& s) {
  std::string q = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') q += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      q += buf;
      continue;
    }
    q += c;
  }
  return q + "\"";
}

std::string Number(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", x);
  return buf;
}

std::string VersionString(int code) {
  return std::to_string(code / 10000) + "." + std::to_string(code / 100 % 100) + "." +
         std::to_string(code % 100);
}

}  // namespace

std::string VersionText() {
  int library = 0;
  batonGetVersion(&library);
  return "baton-train " + VersionString(BATON_VERSION_CODE) + " (Baton library " +
         VersionString(library) + ", built " + (cudaBackendBuilt() ? "with" : "without") +
         " the CUDA backend)";
}

// (key, JSON value) pairs; the text form prints strings unquoted.
std::vector<std::pair<std::string, std::string>> RunContext::ConfigEntries() const {
  const Options& o = opt;
  std::vector<std::pair<std::string, std::string>> e;
  auto str = [&](const char* k, const std::string& v) { e.emplace_back(k, Quote(v)); };
  auto num = [&](const char* k, double v) { e.emplace_back(k, Number(v)); };
  auto flag = [&](const char* k, bool v) { e.emplace_back(k, v ? "true" : "false"); };
  str("version", VersionString(BATON_VERSION_CODE));
  str("mode", ModeName(o));
  num("ranks", world);
  num("data_parallel_ranks", data_ranks > 0 ? data_ranks : world);
  str("data", o.synthetic > 0 ? "synthetic " + std::to_string(o.synthetic) : o.data_dir);
  num("train_samples", static_cast<double>(data.train.count));
  num("val_samples", static_cast<double>(data.val.count));
  num("test_samples", static_cast<double>(data.test.count));
  std::string hidden;
  for (int h : o.hidden) {
    if (!hidden.empty()) hidden += ',';
    hidden += std::to_string(h);
  }
  str("model", o.model == ModelKind::kCnn ? "cnn" : "mlp");
  if (o.model == ModelKind::kCnn) {
    str("batch_norm", o.batch_norm ? "on" : "off");
    str("sync_bn", o.sync_bn ? "on" : "off");
  } else {
    str("hidden", hidden);
  }
  num("epochs", o.epochs);
  num("batch", o.batch);
  num("accumulate", o.accumulate);
  num("global_batch", GlobalBatch());
  str("optimizer", OptimizerName(o.optimizer));
  num("lr", o.lr);
  str("lr_scaling", LrScalingName(o.lr_scaling));
  num("base_batch", o.base_batch > 0 ? o.base_batch : o.batch);
  num("lr_peak", PeakLearningRate(lr_contributors));
  num("warmup_steps", static_cast<double>(WarmupSteps()));
  if (o.warmup_epochs >= 0) num("warmup_epochs", o.warmup_epochs);
  str("lr_schedule", o.cosine ? "cosine" : "constant");
  num("total_steps", static_cast<double>(total_steps));
  num("momentum", o.momentum);
  num("weight_decay", o.weight_decay);
  if (o.optimizer == OptimizerKind::kAdam || o.optimizer == OptimizerKind::kLamb) {
    num("beta2", o.beta2);
    num("eps", o.adam_eps);
  }
  if (o.optimizer == OptimizerKind::kLars) num("trust_coef", o.trust);
  if (o.ema > 0) num("ema", o.ema);
  num("seed", static_cast<double>(o.seed));
  if (o.mode == Mode::kPs) num("ps_shards", o.ps_shards);
  if (o.mode == Mode::kPs && o.async) num("staleness", o.staleness);  // -1: unbounded
  if (o.mode == Mode::kPs && !o.async) num("backup_workers", o.backup_workers);
  if (!o.straggle.empty()) {
    std::string text;
    for (const auto& [r, f] : o.straggle) {
      if (!text.empty()) text += ',';
      text += std::to_string(r) + ":" + Number(f);
    }
    str("straggle", text);
  }
  if (o.straggle_random_p > 0) {
    str("straggle_random", Number(o.straggle_random_p) + ":" + Number(o.straggle_random_factor));
  }
  if (o.mode == Mode::kLocal) {
    num("average_every", o.average_every);
    num("post_local", o.post_local);
    flag("adaptive_k", o.adaptive_k);
  }
  if (!o.algo.empty()) str("algo", o.algo);
  if (o.mode == Mode::kSync) {
    flag("overlap", o.overlap);
    num("bucket_cap_mb", o.bucket_cap_mb);
    num("first_bucket_mb", o.first_bucket_mb);
    flag("fp16_allreduce", o.fp16_allreduce);
  }
  flag("elastic", o.elastic);
  num("val_fraction", o.val_fraction);
  if (o.train_subset > 0) num("train_subset", static_cast<double>(o.train_subset));
  if (o.target_acc > 0) {
    num("target_acc", o.target_acc);
    flag("stop_at_target", o.stop_at_target);
  }
  if (o.log_every > 0) num("log_every", static_cast<double>(o.log_every));
  if (o.max_steps > 0) num("max_steps", static_cast<double>(o.max_steps));
  str("device", o.device == Device::kCuda ? "cuda" : "cpu");
  str("backend", backend.name());
  if (!o.checkpoint.empty()) str("checkpoint", o.checkpoint);
  flag("keep_best", o.keep_best);
  if (!o.resume.empty()) str("resume", o.resume);
  if (const char* algo = std::getenv("BATON_ALGO"); algo != nullptr) str("baton_algo", algo);
  return e;
}

std::string RunContext::ConfigJson() const {
  std::string j = "{\"config\": {";
  bool first = true;
  for (const auto& [k, v] : ConfigEntries()) {
    j += (first ? "" : ", ") + Quote(k) + ": " + v;
    first = false;
  }
  return j + "}}";
}

std::string RunContext::ConfigText() const {
  std::string t = "config:";
  size_t line = t.size();
  for (const auto& [k, v] : ConfigEntries()) {
    std::string item = " " + k + "=" + (v.front() == '"' ? v.substr(1, v.size() - 2) : v);
    if (line + item.size() > 100) {
      t += "\n       ";
      line = 7;
    }
    t += item;
    line += item.size();
  }
  return t + "\n";
}

}  // namespace trainer
