#include "optimizers.h"

#include <cmath>
#include <string>

#include "util.h"

namespace trainer {
namespace {

double Norm(const float* x, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return std::sqrt(s);
}

}  // namespace

const char* OptimizerName(OptimizerKind k) {
  switch (k) {
    case OptimizerKind::kSgd:
      return "sgd";
    case OptimizerKind::kNesterov:
      return "nesterov";
    case OptimizerKind::kAdam:
      return "adam";
    case OptimizerKind::kLars:
      return "lars";
    case OptimizerKind::kLamb:
      return "lamb";
  }
  return "?";
}

void NesterovUpdate(float* w, float* v, const float* g, size_t n, float lr, float momentum,
                    float weight_decay) {
  for (size_t i = 0; i < n; ++i) {
    const float d = g[i] + weight_decay * w[i];
    v[i] = momentum * v[i] + d;
    w[i] -= lr * (d + momentum * v[i]);
  }
}

void AdamUpdate(float* w, float* m, float* v, const float* g, size_t n, float lr, float beta1,
                float beta2, float eps, float weight_decay, long t) {
  const double c1 = 1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(t));
  const double c2 = 1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(t));
  const float step = static_cast<float>(lr / c1);
  const float c2_sqrt = static_cast<float>(std::sqrt(c2));
  for (size_t i = 0; i < n; ++i) {
    const float d = g[i] + weight_decay * w[i];
    m[i] = beta1 * m[i] + (1.0f - beta1) * d;
    v[i] = beta2 * v[i] + (1.0f - beta2) * d * d;
    w[i] -= step * m[i] / (std::sqrt(v[i]) / c2_sqrt + eps);
  }
}

void LarsUpdate(float* w, float* v, const float* g, size_t n, float lr, float momentum,
                float weight_decay, float eta, bool trust) {
  float local = 1.0f;
  float wd = 0.0f;
  if (trust) {
    wd = weight_decay;
    const double wn = Norm(w, n), gn = Norm(g, n);
    if (wn > 0 && gn > 0) local = static_cast<float>(eta * wn / (gn + weight_decay * wn));
  }
  const float scaled = lr * local;
  for (size_t i = 0; i < n; ++i) {
    v[i] = momentum * v[i] + scaled * (g[i] + wd * w[i]);
    w[i] -= v[i];
  }
}

void LambUpdate(float* w, float* m, float* v, const float* g, size_t n, float lr, float beta1,
                float beta2, float eps, float weight_decay, long t, bool trust,
                std::vector<float>* scratch) {
  const double c1 = 1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(t));
  const double c2 = 1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(t));
  const float inv_c1 = static_cast<float>(1.0 / c1), inv_c2 = static_cast<float>(1.0 / c2);
  const float wd = trust ? weight_decay : 0.0f;
  // The update u needs the norms of all of it before it is applied: kept in a scratch.
  std::vector<float> local;
  std::vector<float>& room = scratch != nullptr ? *scratch : local;
  if (room.size() < n) room.resize(n);
  float* u = room.data();
  for (size_t i = 0; i < n; ++i) {
    m[i] = beta1 * m[i] + (1.0f - beta1) * g[i];
    v[i] = beta2 * v[i] + (1.0f - beta2) * g[i] * g[i];
    u[i] = m[i] * inv_c1 / (std::sqrt(v[i] * inv_c2) + eps) + wd * w[i];
  }
  float ratio = 1.0f;
  if (trust) {
    const double wn = Norm(w, n), un = Norm(u, n);
    if (wn > 0 && un > 0) ratio = static_cast<float>(wn / un);
  }
  const float scaled = lr * ratio;
  for (size_t i = 0; i < n; ++i) w[i] -= scaled * u[i];
}

Optimizer::Optimizer(Backend& backend, std::vector<LayerSlice> layers, size_t n, const Options& o)
    : backend_(backend),
      layers_(std::move(layers)),
      n_(n),
      kind_(o.optimizer),
      parts_(o.optimizer == OptimizerKind::kAdam || o.optimizer == OptimizerKind::kLamb ? 2 : 1),
      state_(backend.Allocate(n * static_cast<size_t>(parts_))),
      momentum_(static_cast<float>(o.momentum)),
      weight_decay_(static_cast<float>(o.weight_decay)),
      beta2_(static_cast<float>(o.beta2)),
      eps_(static_cast<float>(o.adam_eps)),
      trust_(static_cast<float>(o.trust)) {}

void Optimizer::Step(float* params, const float* grads, float lr) {
  StepRange(params, grads, lr, 0, n_);
}

void Optimizer::StepRange(float* params, const float* grads, float lr, size_t begin, size_t end) {
  ++steps_;
  float* s = state_.data();
  const size_t count = end - begin;
  switch (kind_) {
    case OptimizerKind::kSgd:
      backend_.SgdStep(params + begin, s + begin, grads + begin, count, lr, momentum_,
                       weight_decay_);
      return;
    case OptimizerKind::kNesterov:
      NesterovUpdate(params + begin, s + begin, grads + begin, count, lr, momentum_, weight_decay_);
      return;
    case OptimizerKind::kAdam:
      AdamUpdate(params + begin, s + begin, s + n_ + begin, grads + begin, count, lr, momentum_,
                 beta2_, eps_, weight_decay_, steps_);
      return;
    case OptimizerKind::kLars:
    case OptimizerKind::kLamb:
      break;
  }
  for (const LayerSlice& l : layers_) {
    if (l.end() <= begin || l.begin() >= end) continue;
    if (l.begin() < begin || l.end() > end) {
      throw TrainError("internal: --optimizer " + std::string(OptimizerName(kind_)) +
                       " was given part of a layer");
    }
    const size_t nw = l.bias_offset - l.weight_offset;
    const size_t nb = static_cast<size_t>(l.out);
    for (int part = 0; part < 2; ++part) {
      const size_t off = part == 0 ? l.weight_offset : l.bias_offset;
      const size_t len = part == 0 ? nw : nb;
      const bool trust = part == 0;
      if (kind_ == OptimizerKind::kLars) {
        LarsUpdate(params + off, s + off, grads + off, len, lr, momentum_, weight_decay_, trust_,
                   trust);
      } else {
        LambUpdate(params + off, s + off, s + n_ + off, grads + off, len, lr, momentum_, beta2_,
                   eps_, weight_decay_, steps_, trust, &scratch_);
      }
    }
  }
}

}  // namespace trainer
