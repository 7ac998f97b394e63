// Evaluation: a model over a set (loss, accuracy, per-class counts), the validation split
// (--val-fraction), and `baton-train eval --checkpoint F`.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "checkpoint.h"
#include "cnn.h"
#include "trainer.h"
#include "util.h"

namespace trainer {

BatchStats EvaluateRows(Backend& backend, Model& model, const Dataset& d, const float* params,
                        size_t begin, size_t end, float* x, std::vector<float>& host,
                        std::vector<double>* class_counts) {
  BatchStats total;
  std::vector<float> logits;
  const int classes = d.classes;
  for (size_t i = begin; i < end; i += kEvalBatch) {
    int rows = static_cast<int>(std::min<size_t>(kEvalBatch, end - i));
    for (int r = 0; r < rows; ++r) {
      const uint8_t* img = d.image(i + static_cast<size_t>(r));
      float* row = host.data() + static_cast<size_t>(r) * d.features;
      for (size_t f = 0; f < d.features; ++f) row[f] = static_cast<float>(img[f]) * (1.0f / 255.0f);
    }
    backend.Upload(x, host.data(), static_cast<size_t>(rows) * d.features);
    BatchStats s = model.Forward(params, x, d.labels.data() + i, rows, false);
    total.loss_sum += s.loss_sum;
    total.correct += s.correct;
    total.samples += s.samples;
    if (class_counts == nullptr) continue;
    // The arg max as SoftmaxCrossEntropyRow takes it (the first of equal maxima).
    logits.resize(static_cast<size_t>(rows) * classes);
    backend.Synchronize();
    backend.Download(logits.data(), model.logits(), logits.size());
    for (int r = 0; r < rows; ++r) {
      const float* z = logits.data() + static_cast<size_t>(r) * classes;
      int best = 0;
      for (int c = 1; c < classes; ++c) {
        if (z[c] > z[best]) best = c;
      }
      const int label = d.labels[i + static_cast<size_t>(r)];
      (*class_counts)[static_cast<size_t>(label)] += best == label ? 1 : 0;
      (*class_counts)[static_cast<size_t>(classes + label)] += 1;
    }
  }
  return total;
}

BatchStats TrainingRun::Evaluate(const Dataset& d, const float* params,
                                 std::vector<double>* class_counts) {
  size_t begin = d.count * static_cast<size_t>(rank) / static_cast<size_t>(world);
  size_t end = d.count * static_cast<size_t>(rank + 1) / static_cast<size_t>(world);
  return EvaluateRows(backend, model, d, params, begin, end, batch_x_.data(), host_x_,
                      class_counts);
}

void SplitValidation(DataSplit* data, double fraction, uint64_t seed) {
  Dataset& train = data->train;
  const size_t held = static_cast<size_t>(static_cast<double>(train.count) * fraction);
  if (fraction <= 0) return;
  if (held == 0 || held >= train.count) {
    throw UsageError("--val-fraction " + std::to_string(fraction) + " of " +
                     std::to_string(train.count) + " training samples leaves " +
                     (held == 0 ? "no validation sample" : "no training sample"));
  }
  // A permutation of its own (not the epochs' shuffles), the same on every rank.
  std::vector<uint32_t> order(train.count);
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<uint32_t>(i);
  Rng rng(MixSeed(seed, 0x7a1, 0x5b11));
  for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.Below(i)]);
  // Both parts keep the original order of their samples.
  std::vector<char> is_val(train.count, 0);
  for (size_t i = train.count - held; i < train.count; ++i) is_val[order[i]] = 1;
  Dataset kept, val;
  for (Dataset* d : {&kept, &val}) {
    d->features = train.features;
    d->classes = train.classes;
  }
  for (size_t i = 0; i < train.count; ++i) {
    Dataset& to = is_val[i] ? val : kept;
    to.pixels.insert(to.pixels.end(), train.image(i), train.image(i) + train.features);
    to.labels.push_back(train.labels[i]);
    ++to.count;
  }
  train = std::move(kept);
  data->val = std::move(val);
  data->description +=
      ", " + std::to_string(data->val.count) + " of the train set held out for validation";
}

void TakeTrainSubset(DataSplit* data, long count) {
  Dataset& train = data->train;
  if (count <= 0) return;
  if (static_cast<size_t>(count) > train.count) {
    throw UsageError("--train-subset " + std::to_string(count) + " is more than the " +
                     std::to_string(train.count) + " training samples");
  }
  train.count = static_cast<size_t>(count);
  train.pixels.resize(train.count * train.features);
  train.labels.resize(train.count);
  data->description += ", training on the first " + std::to_string(count);
}

int RunEvaluation(const Options& o) {
  try {
    Checkpoint c = ReadCheckpoint(o.eval_checkpoint);
    // The synthetic set is a function of (count, seed): the seed the checkpoint trained with.
    DataSplit data =
        o.synthetic > 0 ? MakeSynthetic(o.synthetic, c.seed) : LoadFashionMnist(o.data_dir);
    if (c.sizes.size() < 2) throw TrainError(o.eval_checkpoint + ": no layers");
    const bool cnn = c.sizes.front() == 0;
    if (cnn && !Cnn::Unsupported(data.test.features).empty()) {
      throw UsageError(o.eval_checkpoint + ": " + Cnn::Unsupported(data.test.features));
    }
    if ((!cnn && static_cast<size_t>(c.sizes.front()) != data.test.features) ||
        c.sizes.back() != data.test.classes) {
      throw UsageError(o.eval_checkpoint + ": a model for " + std::to_string(c.sizes.front()) +
                       " features and " + std::to_string(c.sizes.back()) +
                       " classes, but the data has " + std::to_string(data.test.features) +
                       " and " + std::to_string(data.test.classes));
    }
    std::unique_ptr<Backend> backend = MakeCpuBackend(o.blas_threads);
    std::unique_ptr<Model> owned = MakeModel(*backend, c.sizes, kEvalBatch);
    Model& model = *owned;
    const size_t n = model.parameter_count();
    if (c.params.size() != n || c.model_state.size() != model.state_count()) {
      throw TrainError(o.eval_checkpoint + ": wrong number of parameters");
    }
    // Batch norm's running statistics.
    std::copy(c.model_state.begin(), c.model_state.end(), model.state());
    Buffer x = backend->Allocate(static_cast<size_t>(kEvalBatch) * data.test.features);
    std::vector<float> host(static_cast<size_t>(kEvalBatch) * data.test.features);
    std::printf("eval: %s, %s, trained %ld epoch(s), %ld step(s), mode %s\n",
                o.eval_checkpoint.c_str(), data.description.c_str(),
                static_cast<long>(c.epochs_done), static_cast<long>(c.global_step), c.mode.c_str());
    for (int which = 0; which < (c.ema.empty() ? 1 : 2); ++which) {
      backend->Upload(model.params(), (which == 0 ? c.params : c.ema).data(), n);
      std::vector<double> counts(2 * static_cast<size_t>(data.test.classes), 0.0);
      BatchStats s = EvaluateRows(*backend, model, data.test, model.params(), 0, data.test.count,
                                  x.data(), host, &counts);
      const char* what = which == 0 ? "" : "ema_";
      std::printf("%stest_acc %.4f  %stest_loss %.4f  (%.0f samples)\n", what,
                  s.correct / s.samples, what, s.loss_sum / s.samples, s.samples);
      std::printf("%sper-class test accuracy:", what);
      for (int k = 0; k < data.test.classes; ++k) {
        const double total = counts[static_cast<size_t>(data.test.classes + k)];
        std::printf(" %d:%.4f", k, total > 0 ? counts[static_cast<size_t>(k)] / total : 0.0);
      }
      std::printf("\n");
    }
    return 0;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "baton-train: eval: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "baton-train: eval: error: %s\n", e.what());
    return 1;
  }
}

}  // namespace trainer
