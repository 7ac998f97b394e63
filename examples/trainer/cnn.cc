#include "cnn.h"

#include <algorithm>
#include <cmath>

#include "util.h"

namespace trainer {

namespace {
constexpr int kFc[2] = {120, 84};

int SideOf(size_t features) {
  int side = static_cast<int>(std::lround(std::sqrt(static_cast<double>(features))));
  return static_cast<size_t>(side) * static_cast<size_t>(side) == features ? side : 0;
}
}  // namespace

std::string Cnn::Unsupported(size_t features) {
  const int side = SideOf(features);
  if (side == 0) {
    return "--model cnn needs square images (" + std::to_string(features) + " pixels is not)";
  }
  if (side < 12) return "--model cnn needs images of at least 12x12 pixels";
  return "";
}

void Cnn::AddLayer(int in, int out) {
  LayerSlice s;
  s.in = in;
  s.out = out;
  s.weight_offset = layers_.empty() ? 0 : layers_.back().end();
  s.bias_offset = s.weight_offset + static_cast<size_t>(in) * out;
  layers_.push_back(s);
}

Cnn::Cnn(Backend& backend, std::vector<int> sizes, int max_batch)
    : backend_(backend),
      sizes_(std::move(sizes)),
      batch_norm_(sizes_.size() == 4 && sizes_[1] != 0),
      classes_(sizes_.size() == 4 ? sizes_[3] : 0),
      max_batch_(max_batch) {
  if (sizes_.size() != 4 || sizes_[0] != 0 || sizes_[2] < 12 || classes_ < 1) {
    throw TrainError("internal: not a CNN's sizes");
  }
  if (backend_.device_memory()) {
    throw UsageError("--model cnn runs on the CPU backend only (--device cpu)");
  }
  const int side = sizes_[2];
  const int channels[3] = {1, 6, 16};
  int h = side;
  for (int i = 0; i < 2; ++i) {
    Block& b = blocks_[i];
    b.shape = ConvShape{0, h, h, channels[i], 5, i == 0 ? 2 : 0};
    b.out = channels[i + 1];
    b.conv_layer = static_cast<int>(layers_.size());
    AddLayer(b.shape.window(), b.out);
    if (batch_norm_) {
      // gamma as a "weight" of one input per channel, beta as its bias.
      b.bn_layer = static_cast<int>(layers_.size());
      AddLayer(1, b.out);
      b.state_offset = state_.size();
      state_.resize(state_.size() + 2 * static_cast<size_t>(b.out));
    }
    ConvShape full = b.shape;
    full.n = max_batch_;
    const size_t pixels = full.rows();
    b.cols.resize(pixels * full.window());
    b.z.resize(pixels * b.out);
    b.act.resize(pixels * b.out);
    b.dact.resize(pixels * b.out);
    if (batch_norm_) {
      b.xhat.resize(pixels * b.out);
      b.dz.resize(pixels * b.out);
    }
    const size_t pooled =
        static_cast<size_t>(max_batch_) * (full.ho() / 2) * (full.wo() / 2) * b.out;
    b.pooled.resize(pooled);
    b.argmax.resize(pooled);
    h = full.ho() / 2;
  }
  flat_ = h * h * blocks_[1].out;
  fc_first_layer_ = static_cast<int>(layers_.size());
  const int fc_sizes[4] = {flat_, kFc[0], kFc[1], classes_};
  for (int i = 0; i < 3; ++i) {
    AddLayer(fc_sizes[i], fc_sizes[i + 1]);
    fc_act_[i].resize(static_cast<size_t>(max_batch_) * fc_sizes[i + 1]);
    fc_delta_[i].resize(static_cast<size_t>(max_batch_) * fc_sizes[i + 1]);
  }
  dflat_.resize(static_cast<size_t>(max_batch_) * flat_);
  params_ = backend_.Allocate(layers_.back().end());
  grads_ = backend_.AllocateShared(layers_.back().end());
}

std::string Cnn::Describe() const {
  return "cnn " + std::to_string(sizes_[2]) + "x" + std::to_string(sizes_[2]) + "-c6-" +
         (batch_norm_ ? "bn-" : "") + "p2-c16-" + (batch_norm_ ? "bn-" : "") + "p2-" +
         std::to_string(kFc[0]) + "-" + std::to_string(kFc[1]) + "-" + std::to_string(classes_);
}

void Cnn::Initialize(uint64_t seed) {
  std::vector<float> host(parameter_count(), 0.0f);
  Rng rng(MixSeed(seed, 0x1417));
  for (size_t l = 0; l < layers_.size(); ++l) {
    const LayerSlice& s = layers_[l];
    const bool bn =
        (static_cast<int>(l) == blocks_[0].bn_layer || static_cast<int>(l) == blocks_[1].bn_layer);
    const double stddev = std::sqrt(2.0 / s.in);  // He et al. 2015, for ReLU
    for (size_t i = s.weight_offset; i < s.bias_offset; ++i) {
      host[i] = bn ? 1.0f : static_cast<float>(stddev * rng.Normal());
    }
  }
  backend_.Upload(params_.data(), host.data(), host.size());
  for (const Block& b : blocks_) {
    if (b.bn_layer < 0) continue;
    for (int c = 0; c < b.out; ++c) {
      state_[b.state_offset + c] = 0.0f;          // running mean
      state_[b.state_offset + b.out + c] = 1.0f;  // running variance
    }
  }
}

void Cnn::BlockForward(Block& b, const float* params, const float* in, int rows, bool train) {
  b.shape.n = rows;
  const LayerSlice& conv = layers_[b.conv_layer];
  const size_t pixels = b.shape.rows();
  Im2col(in, b.shape, b.cols.data());
  // Z = cols W^T (+ b): one product for the whole batch.
  backend_.Gemm(false, true, static_cast<int>(pixels), b.out, b.shape.window(), 1.0f, b.cols.data(),
                params + conv.weight_offset, 0.0f, b.z.data());
  if (!batch_norm_) {
    backend_.AddBias(b.z.data(), params + conv.bias_offset, static_cast<int>(pixels), b.out, true);
    std::copy(b.z.begin(), b.z.begin() + pixels * b.out, b.act.begin());
  } else {
    backend_.AddBias(b.z.data(), params + conv.bias_offset, static_cast<int>(pixels), b.out, false);
    const LayerSlice& bn = layers_[b.bn_layer];
    float* mean = state_.data() + b.state_offset;
    float* var = mean + b.out;
    if (train) {
      BatchNormTrain(b.z.data(), pixels, b.out, params + bn.weight_offset, params + bn.bias_offset,
                     b.act.data(), b.xhat.data(), &b.cache, mean, var, stat_sum_);
    } else {
      BatchNormEval(b.z.data(), pixels, b.out, params + bn.weight_offset, params + bn.bias_offset,
                    mean, var, b.act.data());
    }
    for (size_t i = 0; i < pixels * b.out; ++i) b.act[i] = std::max(b.act[i], 0.0f);
  }
  MaxPool2(b.act.data(), rows, b.shape.ho(), b.shape.wo(), b.out, b.pooled.data(), b.argmax.data());
}

BatchStats Cnn::Forward(const float* params, const float* x, const uint8_t* labels, int rows,
                        bool keep_for_backward) {
  if (rows > max_batch_) throw TrainError("internal: batch larger than the model's maximum");
  input_ = x;
  rows_ = rows;
  BlockForward(blocks_[0], params, x, rows, keep_for_backward);
  BlockForward(blocks_[1], params, blocks_[0].pooled.data(), rows, keep_for_backward);
  const float* in = blocks_[1].pooled.data();
  for (int i = 0; i < 3; ++i) {
    const LayerSlice& s = layers_[fc_first_layer_ + i];
    float* out = fc_act_[i].data();
    backend_.Gemm(false, true, rows, s.out, s.in, 1.0f, in, params + s.weight_offset, 0.0f, out);
    backend_.AddBias(out, params + s.bias_offset, rows, s.out, i < 2);
    in = out;
  }
  return backend_.SoftmaxCrossEntropy(in, labels, rows, classes_,
                                      keep_for_backward ? fc_delta_[2].data() : nullptr);
}

void Cnn::BlockBackward(Block& b, const float* dpooled, float* dinput,
                        const std::function<void(int layer)>& layer_done) {
  const float* params = params_.data();
  float* grads = grads_.data();
  const size_t pixels = b.shape.rows();
  const size_t count = pixels * b.out;
  MaxPool2Backward(dpooled, b.argmax.data(),
                   static_cast<size_t>(rows_) * (b.shape.ho() / 2) * (b.shape.wo() / 2) * b.out,
                   count, b.dact.data());
  backend_.ReluBackward(b.dact.data(), b.act.data(), count);
  const float* dz = b.dact.data();
  if (batch_norm_) {
    const LayerSlice& bn = layers_[b.bn_layer];
    BatchNormBackward(b.dact.data(), b.xhat.data(), b.cache, pixels, b.out,
                      params + bn.weight_offset, grads + bn.weight_offset, grads + bn.bias_offset,
                      b.dz.data(), stat_sum_);
    if (layer_done) layer_done(b.bn_layer);
    dz = b.dz.data();
  }
  const LayerSlice& conv = layers_[b.conv_layer];
  // dW = dZ^T cols, db = column sums of dZ.
  backend_.Gemm(true, false, b.out, b.shape.window(), static_cast<int>(pixels), 1.0f, dz,
                b.cols.data(), 0.0f, grads + conv.weight_offset);
  backend_.ColumnSums(dz, static_cast<int>(pixels), b.out, grads + conv.bias_offset);
  if (layer_done) layer_done(b.conv_layer);
  if (dinput == nullptr) return;
  // d(cols) = dZ W, then back onto the pixels each window read.
  backend_.Gemm(false, false, static_cast<int>(pixels), b.shape.window(), b.out, 1.0f, dz,
                params + conv.weight_offset, 0.0f, b.cols.data());
  Col2im(b.cols.data(), b.shape, dinput);
}

void Cnn::Backward(const std::function<void(int layer)>& layer_done) {
  const float* params = params_.data();
  float* grads = grads_.data();
  for (int i = 2; i >= 0; --i) {
    const int l = fc_first_layer_ + i;
    const LayerSlice& s = layers_[l];
    const float* delta = fc_delta_[i].data();
    const float* input = i == 0 ? blocks_[1].pooled.data() : fc_act_[i - 1].data();
    backend_.Gemm(true, false, s.out, s.in, rows_, 1.0f, delta, input, 0.0f,
                  grads + s.weight_offset);
    backend_.ColumnSums(delta, rows_, s.out, grads + s.bias_offset);
    if (layer_done) layer_done(l);
    // d(input) = delta W; the ReLU's mask for the hidden fc layers (the pooled input's mask is
    // applied at the block's activations, before pooling).
    float* below = i == 0 ? dflat_.data() : fc_delta_[i - 1].data();
    backend_.Gemm(false, false, rows_, s.in, s.out, 1.0f, delta, params + s.weight_offset, 0.0f,
                  below);
    if (i > 0)
      backend_.ReluBackward(below, fc_act_[i - 1].data(), static_cast<size_t>(rows_) * s.in);
  }
  // The first block's pooled output is overwritten by its gradient (forward is done with it).
  BlockBackward(blocks_[1], dflat_.data(), blocks_[0].pooled.data(), layer_done);
  BlockBackward(blocks_[0], blocks_[0].pooled.data(), nullptr, layer_done);
}

}  // namespace trainer
