// The update rules of --optimizer: SGD with momentum (the backend's SgdStep, so it runs on every
// device), Nesterov momentum, Adam, and the layer-wise LARS and LAMB, over the model's flat
// parameter vector. The last four run on host memory (options_check.cc refuses them with
// --device cuda).
//
// LARS (You, Gitman & Ginsburg 2017, "Large Batch Training of Convolutional Networks", Alg. 1):
//   per layer l: local_lr = eta ||w|| / (||g|| + wd ||w||)
//   v = m v + lr local_lr (g + wd w);  w -= v
// LAMB (You et al. 2019, "Large Batch Optimization for Deep Learning", Alg. 2):
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;  r = m^ / (sqrt(v^) + eps)
//   (m^, v^ bias-corrected);  u = r + wd w;  w -= lr (||w|| / ||u||) u   (phi = identity)
// Both take the trust ratio 1 where a norm is 0, and exclude biases from the trust ratio and
// from weight decay, as the papers' reference implementations and MLPerf's do.
#pragma once

#include <cstddef>
#include <vector>

#include "backend.h"
#include "model.h"
#include "options.h"

namespace trainer {

// The per-element and per-layer rules on host memory (also the unit test's subjects).
// PyTorch's SGD(nesterov=True): v = m v + g';  w -= lr (g' + m v), g' = g + wd w.
void NesterovUpdate(float* w, float* v, const float* g, size_t n, float lr, float momentum,
                    float weight_decay);
// torch.optim.Adam (L2 weight decay added to the gradient); t: this update's number, from 1.
void AdamUpdate(float* w, float* m, float* v, const float* g, size_t n, float lr, float beta1,
                float beta2, float eps, float weight_decay, long t);
// One tensor (a layer's weights with trust = true, its bias with trust = false: no trust ratio,
// no weight decay).
void LarsUpdate(float* w, float* v, const float* g, size_t n, float lr, float momentum,
                float weight_decay, float eta, bool trust);
// scratch: n floats of room for the update (null: allocated here).
void LambUpdate(float* w, float* m, float* v, const float* g, size_t n, float lr, float beta1,
                float beta2, float eps, float weight_decay, long t, bool trust,
                std::vector<float>* scratch = nullptr);

class Optimizer {
 public:
  Optimizer(Backend& backend, std::vector<LayerSlice> layers, size_t n, const Options& options);

  void Step(float* params, const float* grads, float lr);
  // Elements [begin, end) only (a parameter server's shard): for the element-wise rules the same
  // arithmetic per element as Step; lars and lamb need whole layers (a TrainError otherwise).
  void StepRange(float* params, const float* grads, float lr, size_t begin, size_t end);

  // The state: parts() consecutive vectors of size() floats (momentum; Adam's m then v).
  float* state() { return state_.data(); }
  size_t size() const { return n_; }
  int parts() const { return parts_; }
  size_t state_size() const { return n_ * static_cast<size_t>(parts_); }
  // Updates applied so far (Adam's bias correction); restored with the rest of the state.
  long steps() const { return steps_; }
  void set_steps(long steps) { steps_ = steps; }
  OptimizerKind kind() const { return kind_; }

 private:
  Backend& backend_;
  std::vector<LayerSlice> layers_;
  size_t n_;
  OptimizerKind kind_;
  int parts_;
  Buffer state_;
  float momentum_, weight_decay_, beta2_, eps_, trust_;
  long steps_ = 0;
  std::vector<float> scratch_;  // lamb's update of the largest layer
};

}  // namespace trainer
