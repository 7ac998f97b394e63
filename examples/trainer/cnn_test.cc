// The CNN (cnn.h) against independent references:
// - its gradients against central differences of the loss, layer by layer (relative error of the
//   layer's gradient vector), with and without batch norm;
// - SyncBN on 2 and 3 simulated ranks (threads whose StatSum is a shared in-process sum), each
//   with a batch of b rows, against one model with batch norm over the global batch of 2b or 3b
//   rows: the loss, the averaged gradients, then the parameters and running statistics after a
//   few SGD steps, within float tolerance; per-rank batch norm must differ (the check bites);
// - data parallelism without batch norm: 2 ranks' averaged gradients against the global batch.
#include <barrier>
#include <cmath>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backend.h"
#include "cnn.h"
#include "util.h"

namespace {

using trainer::Cnn;

int failures = 0;

void Expect(bool ok, const std::string& what) {
  std::printf("%s - %s\n", ok ? "ok" : "not ok", what.c_str());
  if (!ok) ++failures;
}

struct Batch {
  std::vector<float> x;
  std::vector<uint8_t> labels;
};

constexpr int kSide = 16;
constexpr int kClasses = 10;

Batch MakeBatch(int rows, uint64_t seed) {
  Batch b;
  trainer::Rng rng(seed);
  b.x.resize(static_cast<size_t>(rows) * kSide * kSide);
  for (float& v : b.x) v = static_cast<float>(rng.Below(256)) / 255.0f;
  for (int r = 0; r < rows; ++r) b.labels.push_back(static_cast<uint8_t>(rng.Below(kClasses)));
  return b;
}

double MeanLoss(Cnn& m, const Batch& b, int rows) {
  return m.Forward(m.params(), b.x.data(), b.labels.data(), rows, true).loss_sum / rows;
}

// Central differences of the mean loss along directions in one layer's parameters against the
// directional derivatives Backward's gradient gives: along the gradient itself and along random
// unit directions, with the error relative to the layer gradient's norm. Moving a whole layer
// at once changes the loss far above float rounding, which single entries (gradients of 1e-4)
// do not.
void GradientCheck(bool batch_norm) {
  auto backend = trainer::MakeCpuBackend(1);
  const int rows = 6;
  Cnn m(*backend, Cnn::Sizes(batch_norm, kSide, kClasses), rows);
  m.Initialize(7);
  Batch b = MakeBatch(rows, 11);
  MeanLoss(m, b, rows);
  m.Backward(nullptr);
  std::vector<float> grads(m.grads(), m.grads() + m.parameter_count());
  std::vector<float> saved(m.params(), m.params() + m.parameter_count());
  trainer::Rng rng(3);
  const double h = 1e-4;
  for (size_t l = 0; l < m.layers().size(); ++l) {
    const trainer::LayerSlice& s = m.layers()[l];
    const size_t len = s.end() - s.begin();
    double gnorm = 0;
    for (size_t i = s.begin(); i < s.end(); ++i) gnorm += static_cast<double>(grads[i]) * grads[i];
    gnorm = std::sqrt(gnorm);
    double worst = 0;
    for (int dir = 0; dir < 4; ++dir) {
      std::vector<double> d(len);
      double dn = 0;
      for (size_t k = 0; k < len; ++k) {
        d[k] = dir == 0 ? grads[s.begin() + k] : rng.Normal();
        dn += d[k] * d[k];
      }
      dn = std::sqrt(dn);
      double analytic = 0;
      for (size_t k = 0; k < len; ++k) {
        d[k] /= dn;
        analytic += d[k] * grads[s.begin() + k];
      }
      auto loss_at = [&](double t) {
        for (size_t k = 0; k < len; ++k)
          m.params()[s.begin() + k] = static_cast<float>(saved[s.begin() + k] + t * d[k]);
        return MeanLoss(m, b, rows);
      };
      const double numeric = (loss_at(h) - loss_at(-h)) / (2 * h);
      loss_at(0);
      worst = std::max(worst, std::fabs(numeric - analytic) / gnorm);
    }
    char text[200];
    std::snprintf(text, sizeof text,
                  "%s layer %zu (%d x %d): directional derivatives vs central differences, "
                  "error %.1e of |gradient| %.1e",
                  batch_norm ? "bn" : "plain", l, s.out, s.in, worst, gnorm);
    // A conv bias before batch norm has no effect on the loss: its gradient must be ~0.
    Expect(gnorm < 1e-6 || worst < 1e-2, text);
  }
}

// What ranks in one process share for SyncBN: a sum every rank adds into, then reads.
class InProcessSum {
 public:
  explicit InProcessSum(int ranks) : barrier_(ranks) {}
  void Sum(double* v, size_t n) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (acc_.size() != n) acc_.assign(n, 0.0);
      for (size_t i = 0; i < n; ++i) acc_[i] += v[i];
    }
    barrier_.arrive_and_wait();
    for (size_t i = 0; i < n; ++i) v[i] = acc_[i];
    barrier_.arrive_and_wait();
    {
      std::lock_guard<std::mutex> lock(mu_);
      acc_.clear();
    }
    barrier_.arrive_and_wait();
  }

 private:
  std::mutex mu_;
  std::vector<double> acc_;
  std::barrier<> barrier_;
};

double MaxAbsDiff(const float* a, const float* b, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, static_cast<double>(std::fabs(a[i] - b[i])));
  return m;
}

// `ranks` models with b rows each (sync: SyncBN) against one with ranks x b rows, over `steps`
// plain SGD steps on the averaged gradient. Returns the largest parameter difference at the end.
double DataParallelVsGlobal(bool batch_norm, bool sync, int ranks, int b, int steps, bool report) {
  const int global = ranks * b;
  const float lr = 0.1f;
  auto ref_backend = trainer::MakeCpuBackend(1);
  Cnn ref(*ref_backend, Cnn::Sizes(batch_norm, kSide, kClasses), global);
  ref.Initialize(5);
  std::vector<std::unique_ptr<trainer::Backend>> backends;
  std::vector<std::unique_ptr<Cnn>> models;
  InProcessSum sum(ranks);
  for (int r = 0; r < ranks; ++r) {
    backends.push_back(trainer::MakeCpuBackend(1));
    models.push_back(std::make_unique<Cnn>(*backends.back(), ref.sizes(), b));
    models.back()->Initialize(5);
    if (sync) models.back()->SetStatSum([&sum](double* v, size_t n) { sum.Sum(v, n); });
  }
  const size_t n = ref.parameter_count();
  const size_t pixels = kSide * kSide;
  double worst_loss = 0, worst_grad = 0;
  for (int step = 0; step < steps; ++step) {
    Batch all = MakeBatch(global, 100 + step);
    const double ref_loss = MeanLoss(ref, all, global);
    ref.Backward(nullptr);
    std::vector<double> losses(ranks);
    std::vector<std::thread> threads;
    for (int r = 0; r < ranks; ++r) {
      threads.emplace_back([&, r] {
        Cnn& m = *models[r];
        const size_t first = static_cast<size_t>(r) * b;
        losses[r] =
            m.Forward(m.params(), all.x.data() + first * pixels, all.labels.data() + first, b, true)
                .loss_sum /
            b;
        m.Backward(nullptr);
      });
    }
    for (auto& t : threads) t.join();
    double loss = 0;
    std::vector<float> grad(n, 0.0f);
    for (int r = 0; r < ranks; ++r) {
      loss += losses[r] / ranks;
      for (size_t i = 0; i < n; ++i) grad[i] += models[r]->grads()[i] / static_cast<float>(ranks);
    }
    worst_loss = std::max(worst_loss, std::fabs(loss - ref_loss));
    double gmax = 0;
    for (size_t i = 0; i < n; ++i)
      gmax = std::max(gmax, static_cast<double>(std::fabs(ref.grads()[i])));
    worst_grad = std::max(worst_grad, MaxAbsDiff(grad.data(), ref.grads(), n) / gmax);
    for (size_t i = 0; i < n; ++i) {
      ref.params()[i] -= lr * ref.grads()[i];
      for (int r = 0; r < ranks; ++r) models[r]->params()[i] -= lr * grad[i];
    }
  }
  double worst_param = 0, worst_state = 0;
  for (int r = 0; r < ranks; ++r) {
    worst_param = std::max(worst_param, MaxAbsDiff(models[r]->params(), ref.params(), n));
    worst_state =
        std::max(worst_state, MaxAbsDiff(models[r]->state(), ref.state(), ref.state_count()));
  }
  if (report) {
    char text[240];
    std::snprintf(
        text, sizeof text,
        "%s%s, %d ranks x %d rows vs one process x %d rows, %d steps: loss diff %.1e, "
        "gradient diff %.1e (of the largest), parameter diff %.1e, running stats diff %.1e",
        batch_norm ? (sync ? "SyncBN" : "per-rank BN") : "no BN", "", ranks, b, global, steps,
        worst_loss, worst_grad, worst_param, worst_state);
    const bool ok =
        worst_loss < 1e-5 && worst_grad < 1e-4 && worst_param < 1e-5 && worst_state < 1e-5;
    Expect(ok, text);
  }
  return std::max(worst_param, worst_loss);
}

}  // namespace

int main() {
  GradientCheck(false);
  GradientCheck(true);
  DataParallelVsGlobal(false, false, 2, 8, 3, true);
  DataParallelVsGlobal(true, true, 2, 8, 3, true);
  DataParallelVsGlobal(true, true, 3, 5, 3, true);
  const double per_rank = DataParallelVsGlobal(true, false, 2, 8, 3, false);
  Expect(per_rank > 1e-3, "per-rank BN (no sync) differs from BN over the global batch (" +
                              std::to_string(per_rank) + "), so the SyncBN checks can fail");
  std::printf("%s\n", failures == 0 ? "all passed" : "FAILED");
  return failures == 0 ? 0 : 1;
}
