// One rank's part of the MLP in the model-parallel modes: the layers of its pipeline stage, each
// split over its tensor group the way Megatron-LM splits a transformer's MLP (Shoeybi et al.
// 2019): a column-parallel layer (each rank holds a slice of the outputs) followed by a
// row-parallel one (each rank holds the matching slice of the inputs), so that the activation
// between the two never travels; the row layer's partial sums are allreduced in forward (Megatron's
// g), and the column layer's input gradient in backward (its f). A last layer left without a
// row partner is column-parallel over the classes and its logits are allgathered. With a tensor
// group of one every layer is whole and the math is the Mlp's (model.cc), operation for
// operation.
//
// A stage keeps the activations of several micro-batches at once (slots: all M with gpipe, at
// most S - s with 1f1b and pipedream) and, for pipedream, a copy of the weights each in-flight
// micro-batch's forward used (weight stashing).
#pragma once

#include <baton.h>

#include <functional>
#include <vector>

#include "backend.h"
#include "layout.h"
#include "model.h"

namespace trainer {

// What this rank's communication cost: time blocked in Baton's calls, and bytes sent, counted as a
// ring sends them (allreduce of N bytes over n ranks 2(n-1)/n N, allgather all blocks but the
// successor's, send/recv exactly), so that the figure does not depend on which algorithm Baton
// picked (docs/trainer.md compares it with the trace's counts).
struct CommCounters {
  double wait_s = 0;
  double bytes_sent = 0;
};

// One layer as this rank holds it.
struct ShardLayer {
  int index = 0;  // in the whole model
  TpSplit split = TpSplit::kNone;
  bool hidden = true;  // ReLU after it (all but the model's last layer)
  int in = 0;          // whole sizes
  int out = 0;
  int in_width = 0;     // columns of its input on this rank: in / T for a row layer, else in
  int out_width = 0;    // columns of its output here: out / T for a column layer, else out
  int shard_begin = 0;  // first output (column layers) or input (row layer) this rank holds
  LayerSlice slice;     // its weights [slice.out x slice.in] and bias in this rank's buffers
};

class Stage {
 public:
  // Stage `stage` of `layout` (sizes: the whole model's layer sizes) for this rank's tensor index;
  // tensor: the tensor group (null for a group of one). slots micro-batches of at most max_rows
  // rows can be in flight.
  Stage(Backend& backend, const Layout& layout, const std::vector<int>& sizes, int stage,
        batonComm_t tensor, int slots, int max_rows, CommCounters* counters);
  Stage(const Stage&) = delete;
  Stage& operator=(const Stage&) = delete;

  const std::vector<ShardLayer>& layers() const { return layers_; }
  // The layers' weight and bias ranges in params()/grads(), for the data-parallel buckets.
  const std::vector<LayerSlice>& slices() const { return slices_; }
  size_t parameter_count() const { return params_.size(); }
  float* params() { return params_.data(); }
  float* grads() { return grads_.data(); }
  bool first() const { return layers_.front().index == 0; }
  bool last() const { return layers_.back().index == model_layers_ - 1; }
  int input_width() const { return layers_.front().in_width; }
  int output_width() const { return layers_.back().out_width; }
  int slots() const { return static_cast<int>(slots_.size()); }
  int max_rows() const { return max_rows_; }

  // Takes this rank's part of the whole model's parameters (host, the Mlp's layout).
  void SetParameters(const std::vector<float>& whole);
  // Writes this rank's part into the whole model's layout (host); a bias held whole by every
  // rank of the tensor group is written by tensor index 0 only, so that the parts of all ranks,
  // summed, give the model.
  void AddTo(std::vector<float>* whole);

  // Where a micro-batch's input goes (the batch on the first stage, the received activation
  // elsewhere): rows x input_width().
  float* input(int slot) { return slots_[slot].input.data(); }
  // The stage's output for the micro-batch in `slot` (after Forward): rows x output_width().
  const float* output(int slot) const { return slots_[slot].acts.back().data(); }
  // Where the gradient of the stage's output arrives (not the last stage): rows x output_width().
  float* output_grad() { return deltas_.back().data(); }
  // The gradient of the stage's input after Backward (not the first stage): rows x input_width().
  const float* input_grad() const { return input_grad_.data(); }

  // Forward of the micro-batch in `slot` (rows rows) with the given weights (params() or a
  // stashed copy).
  void Forward(int slot, int rows, const float* params);
  // Last stage: loss and accuracy of the slot's logits; with train, keeps d(loss)/d(logits)
  // scaled by grad_scale (a micro-batch's share of the batch) for Backward.
  BatchStats Loss(int slot, const uint8_t* labels, int rows, bool train, float grad_scale);
  // Backward of the slot's micro-batch with the weights its forward used; adds to grads() when
  // accumulate, else overwrites them. layer_done(i) is called once layers()[i]'s gradients are
  // written (the data-parallel buckets start their allreduce then).
  void Backward(int slot, int rows, const float* params, bool accumulate,
                const std::function<void(int)>& layer_done);

  // Weight stashing: room for a copy of the weights per slot (allocated now, so that the memory
  // report counts it); Stash copies the current weights for the micro-batch in `slot` and
  // returns them.
  void EnableStash();
  const float* Stash(int slot);
  const float* stashed(int slot) const { return stash_[slot].data(); }

  // Bytes of the activations kept for backward (all slots) and of the weight stash.
  size_t activation_bytes() const;
  size_t stash_bytes() const;

 private:
  struct Slot {
    Buffer input;
    std::vector<Buffer> acts;  // acts[i]: the output of layers_[i], rows x out_width
    Buffer dlogits;            // last stage: d(loss)/d(logits)
  };
  void LayerForward(const ShardLayer& l, const float* in, float* out, int rows,
                    const float* params);
  void LayerBackward(const ShardLayer& l, const float* delta, const float* in, float* below,
                     int rows, const float* params, bool accumulate, size_t index,
                     const std::function<void(int)>& layer_done);
  void AllReduce(float* x, size_t n, const char* what);

  Backend& backend_;
  batonComm_t tensor_;
  int tp_ = 1;
  int tensor_index_ = 0;
  int model_layers_ = 0;
  int max_rows_ = 0;
  CommCounters* counters_;
  std::vector<LayerSlice> whole_;  // the whole model's layout (SetParameters, AddTo)
  std::vector<ShardLayer> layers_;
  std::vector<LayerSlice> slices_;
  Buffer params_;
  Buffer grads_;
  std::vector<Slot> slots_;
  std::vector<Buffer> deltas_;  // d(loss)/d(pre-activation) of each layer (one micro-batch)
  Buffer input_grad_;
  Buffer bias_sums_;  // one micro-batch's bias gradient, before it is added
  // The gathered output layer: its logits transposed ([classes x rows], each rank's classes a
  // contiguous block, so one allgatherv assembles them), an identity and a row of ones for
  // transposing and adding the bias with Gemm (exact: every product is x * 1 or x * 0), and the
  // whole transposed gradient.
  Buffer gathered_;
  Buffer identity_;
  Buffer ones_;
  Buffer gathered_grad_;
  std::vector<size_t> class_counts_;  // classes per tensor index
  std::vector<Buffer> stash_;
};

// The bytes a ring allreduce of `bytes` over `ranks` ranks sends from each rank.
inline double RingAllReduceBytes(double bytes, int ranks) {
  return ranks > 1 ? 2.0 * (ranks - 1) / ranks * bytes : 0;
}

}  // namespace trainer
