#include "model.h"

#include <cmath>

#include "cnn.h"
#include "util.h"

namespace trainer {

Mlp::Mlp(Backend& backend, std::vector<int> sizes, int max_batch)
    : backend_(backend), sizes_(std::move(sizes)), max_batch_(max_batch) {
  size_t offset = 0;
  for (size_t l = 0; l + 1 < sizes_.size(); ++l) {
    LayerSlice s;
    s.in = sizes_[l];
    s.out = sizes_[l + 1];
    s.weight_offset = offset;
    offset += static_cast<size_t>(s.in) * s.out;
    s.bias_offset = offset;
    offset += static_cast<size_t>(s.out);
    layers_.push_back(s);
  }
  params_ = backend_.Allocate(offset);
  grads_ = backend_.AllocateShared(offset);
  activations_.resize(sizes_.size());
  deltas_.resize(sizes_.size());
  for (size_t l = 1; l < sizes_.size(); ++l) {
    activations_[l] = backend_.Allocate(static_cast<size_t>(max_batch_) * sizes_[l]);
    deltas_[l] = backend_.Allocate(static_cast<size_t>(max_batch_) * sizes_[l]);
  }
}

std::string Mlp::Describe() const {
  std::string text;
  for (int s : sizes_) {
    if (!text.empty()) text += '-';
    text += std::to_string(s);
  }
  return text;
}

std::unique_ptr<Model> MakeModel(Backend& backend, const std::vector<int>& sizes, int max_batch) {
  if (!sizes.empty() && sizes[0] == 0) return std::make_unique<Cnn>(backend, sizes, max_batch);
  return std::make_unique<Mlp>(backend, sizes, max_batch);
}

std::vector<float> InitialParameters(const std::vector<int>& sizes, uint64_t seed) {
  size_t count = 0;
  for (size_t l = 0; l + 1 < sizes.size(); ++l) {
    count += static_cast<size_t>(sizes[l]) * sizes[l + 1] + static_cast<size_t>(sizes[l + 1]);
  }
  std::vector<float> host(count, 0.0f);
  Rng rng(MixSeed(seed, 0x1417));
  size_t offset = 0;
  for (size_t l = 0; l + 1 < sizes.size(); ++l) {
    double stddev = std::sqrt(2.0 / sizes[l]);  // He et al. 2015, for ReLU
    size_t weights = static_cast<size_t>(sizes[l]) * sizes[l + 1];
    for (size_t i = offset; i < offset + weights; ++i) {
      host[i] = static_cast<float>(stddev * rng.Normal());
    }
    offset += weights + static_cast<size_t>(sizes[l + 1]);  // the bias stays 0
  }
  return host;
}

void Mlp::Initialize(uint64_t seed) {
  std::vector<float> host = InitialParameters(sizes_, seed);
  backend_.Upload(params_.data(), host.data(), host.size());
}

BatchStats Mlp::Forward(const float* params, const float* x, const uint8_t* labels, int rows,
                        bool keep_for_backward) {
  if (rows > max_batch_) throw TrainError("internal: batch larger than the model's maximum");
  input_ = x;
  rows_ = rows;
  const float* in = x;
  for (size_t l = 0; l < layers_.size(); ++l) {
    const LayerSlice& s = layers_[l];
    float* out = activations_[l + 1].data();
    // Z = X W^T, then + b and ReLU on hidden layers.
    backend_.Gemm(false, true, rows, s.out, s.in, 1.0f, in, params + s.weight_offset, 0.0f, out);
    backend_.AddBias(out, params + s.bias_offset, rows, s.out, l + 1 < layers_.size());
    in = out;
  }
  float* dlogits = keep_for_backward ? deltas_.back().data() : nullptr;
  return backend_.SoftmaxCrossEntropy(in, labels, rows, sizes_.back(), dlogits);
}

void Mlp::Backward(const std::function<void(int layer)>& layer_done) {
  const float* params = params_.data();
  float* grads = grads_.data();
  for (int l = static_cast<int>(layers_.size()) - 1; l >= 0; --l) {
    const LayerSlice& s = layers_[l];
    const float* delta = deltas_[l + 1].data();  // rows x out
    const float* input = l == 0 ? input_ : activations_[l].data();
    // dW = delta^T X, db = column sums of delta.
    backend_.Gemm(true, false, s.out, s.in, rows_, 1.0f, delta, input, 0.0f,
                  grads + s.weight_offset);
    backend_.ColumnSums(delta, rows_, s.out, grads + s.bias_offset);
    if (layer_done) layer_done(l);
    if (l > 0) {
      // d(input) = delta W, masked by the ReLU that produced the input.
      float* below = deltas_[l].data();
      backend_.Gemm(false, false, rows_, s.in, s.out, 1.0f, delta, params + s.weight_offset, 0.0f,
                    below);
      backend_.ReluBackward(below, activations_[l].data(), static_cast<size_t>(rows_) * s.in);
    }
  }
}

SgdOptimizer::SgdOptimizer(Backend& backend, size_t n, float momentum, float weight_decay)
    : backend_(backend),
      velocity_(backend.Allocate(n)),
      momentum_(momentum),
      weight_decay_(weight_decay) {}

void SgdOptimizer::Step(float* params, const float* grads, float lr) {
  backend_.SgdStep(params, velocity_.data(), grads, velocity_.size(), lr, momentum_, weight_decay_);
}

void SgdOptimizer::StepRange(float* params, const float* grads, float lr, size_t begin,
                             size_t end) {
  backend_.SgdStep(params + begin, velocity_.data() + begin, grads + begin, end - begin, lr,
                   momentum_, weight_decay_);
}

ParameterEma::ParameterEma(Backend& backend, const float* params, size_t n, float decay)
    : backend_(backend), avg_(backend.Allocate(n)), decay_(decay) {
  backend_.Copy(avg_.data(), params, n);
}

void ParameterEma::Update(const float* params) {
  backend_.EmaUpdate(avg_.data(), params, avg_.size(), decay_);
}

void ParameterEma::UpdateRange(const float* params, size_t begin, size_t end) {
  backend_.EmaUpdate(avg_.data() + begin, params + begin, end - begin, decay_);
}

}  // namespace trainer
