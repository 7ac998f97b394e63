// The model interface, the multilayer perceptron (ReLU hidden layers, softmax cross-entropy), its
// SGD optimizer and the exponential moving average of its parameters.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend.h"

namespace trainer {

// Where one fully connected layer's weights [out x in] and bias [out] sit in the flat vector.
struct LayerSlice {
  int in = 0;
  int out = 0;
  size_t weight_offset = 0;
  size_t bias_offset = 0;
  size_t begin() const { return weight_offset; }
  size_t end() const { return bias_offset + static_cast<size_t>(out); }
};

// What the data-parallel modes need of a model: parameters and gradients as one flat buffer
// each, in layers (consecutive ranges, for buckets and layer-wise optimizers), a forward pass that
// keeps what backward needs, and a backward pass that says when each layer's gradient is final.
// Models with running statistics (batch norm) keep them apart from the parameters (state()): they
// are not trained, but are checkpointed, broadcast and averaged where the parameters are.
class Model {
 public:
  virtual ~Model() = default;
  virtual size_t parameter_count() const = 0;
  virtual const std::vector<LayerSlice>& layers() const = 0;
  // What identifies the architecture in a checkpoint (an MLP's layer sizes; MakeModel's input).
  virtual const std::vector<int>& sizes() const = 0;
  // "784-512-256-10", for the start line.
  virtual std::string Describe() const = 0;
  virtual float* params() = 0;
  virtual float* grads() = 0;
  virtual const float* logits() const = 0;
  // Non-trained state (running mean and variance): 0 floats for the MLP.
  virtual size_t state_count() const { return 0; }
  virtual float* state() { return nullptr; }
  virtual void Initialize(uint64_t seed) = 0;
  // keep_for_backward: training (batch statistics; activations kept), else evaluation.
  virtual BatchStats Forward(const float* params, const float* x, const uint8_t* labels, int rows,
                             bool keep_for_backward) = 0;
  virtual void Backward(const std::function<void(int layer)>& layer_done) = 0;
};

// An MLP whose parameters (and gradients) are one flat buffer each, layer after layer (W1 b1 W2
// b2 ...), so a bucket of consecutive layers is one contiguous range for one allreduce and the
// whole model is one buffer for broadcasts, averaging and checkpoints.
class Mlp final : public Model {
 public:
  // sizes = {784, 512, 256, 10}; max_batch bounds the activations kept for backward.
  Mlp(Backend& backend, std::vector<int> sizes, int max_batch);

  size_t parameter_count() const override { return params_.size(); }
  const std::vector<LayerSlice>& layers() const override { return layers_; }
  const std::vector<int>& sizes() const override { return sizes_; }
  std::string Describe() const override;
  float* params() override { return params_.data(); }
  float* grads() override { return grads_.data(); }
  // The last Forward's logits (backend memory, rows x classes).
  const float* logits() const override { return activations_.back().data(); }

  // He-normal weights and zero biases from seed (the same on every rank and platform).
  void Initialize(uint64_t seed) override;

  // Forward pass of rows inputs (backend memory, rows x sizes[0]) with the given parameters
  // (params() or, for evaluation, an average of them). With keep_for_backward the activations
  // and d(loss)/d(logits) are kept for backward().
  BatchStats Forward(const float* params, const float* x, const uint8_t* labels, int rows,
                     bool keep_for_backward) override;

  // Writes grads() for the last forward(keep_for_backward = true), from the last layer to the
  // first, calling layer_done(l) as soon as layer l's weight and bias gradients are final (so
  // their allreduce can start while the layers below are still being computed).
  void Backward(const std::function<void(int layer)>& layer_done) override;

 private:
  Backend& backend_;
  std::vector<int> sizes_;
  std::vector<LayerSlice> layers_;
  int max_batch_;
  Buffer params_;
  Buffer grads_;
  std::vector<Buffer> activations_;  // activations_[0] unused (input), [l] = output of layer l-1
  std::vector<Buffer> deltas_;       // d(loss)/d(pre-activation) of each layer
  const float* input_ = nullptr;
  int rows_ = 0;
};

// The model a checkpoint's sizes describe: an MLP, or (sizes[0] == 0) the CNN (cnn.h).
std::unique_ptr<Model> MakeModel(Backend& backend, const std::vector<int>& sizes, int max_batch);

// He-normal weights and zero biases for a model of these layer sizes, in the Mlp's layout, from
// a fully specified generator: the same values on every rank and platform.
std::vector<float> InitialParameters(const std::vector<int>& sizes, uint64_t seed);

// SGD with momentum and weight decay over a flat parameter vector.
class SgdOptimizer {
 public:
  SgdOptimizer(Backend& backend, size_t n, float momentum, float weight_decay);
  void Step(float* params, const float* grads, float lr);
  // The same update on elements [begin, end) only (a parameter server's shard): per element it
  // is the same arithmetic, so the shards of a sharded server give Step's bits.
  void StepRange(float* params, const float* grads, float lr, size_t begin, size_t end);
  float* momentum_buffer() { return velocity_.data(); }
  size_t size() const { return velocity_.size(); }

 private:
  Backend& backend_;
  Buffer velocity_;
  float momentum_;
  float weight_decay_;
};

// Exponential moving average of the parameters (Polyak averaging), evaluated alongside them.
class ParameterEma {
 public:
  ParameterEma(Backend& backend, const float* params, size_t n, float decay);
  void Update(const float* params);
  // Elements [begin, end) only (a parameter server's shard).
  void UpdateRange(const float* params, size_t begin, size_t end);
  float* data() { return avg_.data(); }

 private:
  Backend& backend_;
  Buffer avg_;
  float decay_;
};

}  // namespace trainer
