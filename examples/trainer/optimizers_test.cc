// --optimizer's update rules against reference values: two steps on a 3-element model (one layer:
// two weights and a bias) from fixed numbers. sgd, nesterov and adam: torch.optim.SGD / Adam
// (2.x, float64) with the same hyper-parameters; lars and lamb: the papers' algorithms (You et al.
// 2017 Alg. 1, You et al. 2019 Alg. 2) written out in float64 numpy, the bias without trust ratio
// and weight decay. Also: ranges give Step's bits, a zero norm takes the trust ratio 1, and lars
// refuses part of a layer.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "backend.h"
#include "optimizers.h"
#include "util.h"

namespace {

using trainer::OptimizerKind;

int failures = 0;

void Expect(bool ok, const std::string& what) {
  std::printf("%s - %s\n", ok ? "ok" : "not ok", what.c_str());
  if (!ok) ++failures;
}

trainer::Options Hyper(OptimizerKind kind) {
  trainer::Options o;
  o.optimizer = kind;
  o.momentum = 0.9;
  o.weight_decay = 0.01;
  o.beta2 = 0.999;
  o.adam_eps = 1e-8;
  o.trust = 0.001;
  return o;
}

std::vector<trainer::LayerSlice> OneLayer() {
  trainer::LayerSlice l;
  l.in = 2;
  l.out = 1;
  l.weight_offset = 0;
  l.bias_offset = 2;
  return {l};
}

std::vector<float> TwoSteps(trainer::Backend& backend, OptimizerKind kind, std::vector<float> w) {
  trainer::Optimizer opt(backend, OneLayer(), 3, Hyper(kind));
  const std::vector<std::vector<float>> grads = {{0.1f, 0.2f, -0.3f}, {-0.05f, 0.4f, 0.25f}};
  for (const auto& g : grads) opt.Step(w.data(), g.data(), 0.1f);
  return w;
}

void CheckReference(trainer::Backend& backend, OptimizerKind kind, std::vector<double> want) {
  std::vector<float> got = TwoSteps(backend, kind, {0.5f, -1.0f, 2.0f});
  double worst = 0;
  for (size_t i = 0; i < 3; ++i) worst = std::max(worst, std::fabs(got[i] - want[i]));
  char buf[200];
  std::snprintf(buf, sizeof buf,
                "%s: two steps match the reference (%.7f %.7f %.7f; max error %.2g)",
                trainer::OptimizerName(kind), got[0], got[1], got[2], worst);
  Expect(worst < 2e-6, buf);
}

}  // namespace

int main() {
  std::unique_ptr<trainer::Backend> backend = trainer::MakeCpuBackend(1);
  CheckReference(*backend, OptimizerKind::kSgd, {0.4845605000, -1.0750810000, 2.0261720000});
  CheckReference(*backend, OptimizerKind::kNesterov, {0.4801329050, -1.1255214100, 2.0244789200});
  CheckReference(*backend, OptimizerKind::kAdam, {0.3685034924, -1.1962661248, 2.0963706870});
  CheckReference(*backend, OptimizerKind::kLars, {0.4999171447, -1.0002771574, 2.0320000000});
  CheckReference(*backend, OptimizerKind::kLamb, {0.3887837433, -1.1898211223, 2.1038121999});

  // The element-wise rules over two ranges (a sharded parameter server) give Step's bits.
  for (OptimizerKind kind : {OptimizerKind::kSgd, OptimizerKind::kNesterov, OptimizerKind::kAdam}) {
    std::vector<float> whole = {0.5f, -1.0f, 2.0f}, split = whole;
    trainer::Optimizer a(*backend, OneLayer(), 3, Hyper(kind));
    trainer::Optimizer b(*backend, OneLayer(), 3, Hyper(kind));
    const float g[3] = {0.1f, 0.2f, -0.3f};
    for (int step = 0; step < 3; ++step) {
      a.Step(whole.data(), g, 0.1f);
      b.StepRange(split.data(), g, 0.1f, 0, 1);
      b.set_steps(b.steps() - 1);  // one update, two ranges (as two servers count it)
      b.StepRange(split.data(), g, 0.1f, 1, 3);
    }
    Expect(whole == split,
           std::string(trainer::OptimizerName(kind)) + ": two ranges == one step, bit for bit");
  }

  // Zero weights: the trust ratio is 1 (not 0/0), so the layer still learns.
  for (OptimizerKind kind : {OptimizerKind::kLars, OptimizerKind::kLamb}) {
    std::vector<float> w = TwoSteps(*backend, kind, {0.0f, 0.0f, 0.0f});
    Expect(std::isfinite(w[0]) && std::isfinite(w[1]) && w[0] != 0.0f && w[1] != 0.0f,
           std::string(trainer::OptimizerName(kind)) + ": zero weights take trust ratio 1");
  }

  // Part of a layer is refused.
  trainer::Optimizer lars(*backend, OneLayer(), 3, Hyper(OptimizerKind::kLars));
  std::vector<float> w = {0.5f, -1.0f, 2.0f};
  const float g[3] = {0.1f, 0.2f, -0.3f};
  bool refused = false;
  try {
    lars.StepRange(w.data(), g, 0.1f, 0, 1);
  } catch (const trainer::TrainError&) {
    refused = true;
  }
  Expect(refused, "lars: part of a layer is refused");

  std::printf("%d failure(s)\n", failures);
  return failures == 0 ? 0 : 1;
}
