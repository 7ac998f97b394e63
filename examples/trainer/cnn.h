// A LeNet-5-size CNN on square one-channel images (NHWC activations, host memory):
//   conv 5x5 6 (pad 2) [-> batch norm] -> ReLU -> max pool 2
//   -> conv 5x5 16 [-> batch norm] -> ReLU -> max pool 2 -> fc 120 -> ReLU -> fc 84 -> ReLU -> fc
// Convolutions are im2col (conv.h) and one sgemm over the whole batch. Parameters and gradients
// are one flat buffer each (conv W b, [bn gamma beta], ..., fc W b), like the MLP's, so every
// data-parallel mode, checkpoints and the EMA take it unchanged.
#pragma once

#include <string>
#include <vector>

#include "conv.h"
#include "model.h"

namespace trainer {

class Cnn final : public Model {
 public:
  // The sizes that describe it in a checkpoint: {0, batch_norm, side, classes}.
  static std::vector<int> Sizes(bool batch_norm, int side, int classes) {
    return {0, batch_norm ? 1 : 0, side, classes};
  }
  // Why images of `features` pixels do not fit (empty: they do).
  static std::string Unsupported(size_t features);

  Cnn(Backend& backend, std::vector<int> sizes, int max_batch);

  size_t parameter_count() const override { return params_.size(); }
  const std::vector<LayerSlice>& layers() const override { return layers_; }
  const std::vector<int>& sizes() const override { return sizes_; }
  std::string Describe() const override;
  float* params() override { return params_.data(); }
  float* grads() override { return grads_.data(); }
  const float* logits() const override { return fc_act_[2].data(); }
  size_t state_count() const override { return state_.size(); }
  float* state() override { return state_.data(); }
  void Initialize(uint64_t seed) override;
  BatchStats Forward(const float* params, const float* x, const uint8_t* labels, int rows,
                     bool keep_for_backward) override;
  void Backward(const std::function<void(int layer)>& layer_done) override;

  // --sync-bn: the batch statistics summed across the data-parallel ranks.
  void SetStatSum(StatSum sum) { stat_sum_ = std::move(sum); }

 private:
  // One conv [-> bn] -> ReLU -> pool block.
  struct Block {
    ConvShape shape;  // n set per batch
    int out = 0;
    int conv_layer = 0;
    int bn_layer = -1;
    size_t state_offset = 0;  // running mean, then running variance
    std::vector<float> cols, z, xhat, act, pooled, dact, dz;
    std::vector<int> argmax;
    BatchNormCache cache;
  };
  void AddLayer(int in, int out);
  void BlockForward(Block& b, const float* params, const float* in, int rows, bool train);
  // d(pooled) in b.pooled's shape -> gradients; dinput (the block below's pooled) when not null.
  void BlockBackward(Block& b, const float* dpooled, float* dinput,
                     const std::function<void(int layer)>& layer_done);

  Backend& backend_;
  std::vector<int> sizes_;
  bool batch_norm_;
  int classes_;
  int max_batch_;
  std::vector<LayerSlice> layers_;
  Block blocks_[2];
  int fc_first_layer_ = 0;
  int flat_ = 0;
  Buffer params_, grads_;
  std::vector<float> state_;
  std::vector<float> fc_act_[3], fc_delta_[3];
  std::vector<float> dflat_;
  const float* input_ = nullptr;
  int rows_ = 0;
  StatSum stat_sum_;
};

}  // namespace trainer
