#include "tensor_parallel.h"

#include <algorithm>

#include "util.h"

namespace trainer {
namespace {

// Where each layer's weights and bias start in the whole model's flat vector (the Mlp's layout).
std::vector<LayerSlice> WholeLayout(const std::vector<int>& sizes) {
  std::vector<LayerSlice> out;
  size_t offset = 0;
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    LayerSlice s;
    s.in = sizes[i];
    s.out = sizes[i + 1];
    s.weight_offset = offset;
    offset += static_cast<size_t>(s.in) * s.out;
    s.bias_offset = offset;
    offset += static_cast<size_t>(s.out);
    out.push_back(s);
  }
  return out;
}

size_t Count(int rows, int cols) {
  return static_cast<size_t>(rows) * static_cast<size_t>(cols);
}

}  // namespace

Stage::Stage(Backend& backend, const Layout& layout, const std::vector<int>& sizes, int stage,
             batonComm_t tensor, int slots, int max_rows, CommCounters* counters)
    : backend_(backend),
      tensor_(tensor),
      tp_(layout.tp),
      tensor_index_(layout.tensor),
      model_layers_(layout.layers),
      max_rows_(max_rows),
      counters_(counters),
      whole_(WholeLayout(sizes)) {
  size_t offset = 0;
  int widest = 1;
  for (int i = layout.stage_begin[stage]; i < layout.stage_begin[stage + 1]; ++i) {
    ShardLayer l;
    l.index = i;
    l.split = layout.SplitOf(i);
    l.hidden = i + 1 < model_layers_;
    l.in = l.in_width = sizes[i];
    l.out = l.out_width = sizes[i + 1];
    LayerSlice& s = l.slice;
    s.in = l.in;
    s.out = l.out;
    switch (l.split) {
      case TpSplit::kNone:
        break;
      case TpSplit::kColumn:
        s.out = l.out_width = l.out / tp_;
        l.shard_begin = tensor_index_ * s.out;
        break;
      case TpSplit::kRow:
        s.in = l.in_width = l.in / tp_;
        l.shard_begin = tensor_index_ * s.in;
        break;
      case TpSplit::kGatheredColumn:
        // Classes need not divide: the first out % T ranks take one more.
        for (int t = 0; t < tp_; ++t) {
          class_counts_.push_back(static_cast<size_t>(l.out / tp_ + (t < l.out % tp_ ? 1 : 0)));
          if (t < tensor_index_) l.shard_begin += static_cast<int>(class_counts_.back());
        }
        s.out = static_cast<int>(class_counts_[tensor_index_]);
        break;
    }
    s.weight_offset = offset;
    offset += Count(s.out, s.in);
    s.bias_offset = offset;
    offset += static_cast<size_t>(s.out);
    widest = std::max(widest, l.out);
    layers_.push_back(l);
    slices_.push_back(s);
  }
  params_ = backend_.Allocate(offset);
  grads_ = backend_.AllocateShared(offset);
  const int classes = sizes.back();
  slots_.resize(static_cast<size_t>(slots));
  for (Slot& slot : slots_) {
    slot.input = backend_.Allocate(Count(max_rows, input_width()));
    for (const ShardLayer& l : layers_)
      slot.acts.push_back(backend_.Allocate(Count(max_rows, l.out_width)));
    if (last()) slot.dlogits = backend_.Allocate(Count(max_rows, classes));
  }
  for (const ShardLayer& l : layers_)
    deltas_.push_back(backend_.Allocate(Count(max_rows, l.out_width)));
  if (!first()) input_grad_ = backend_.Allocate(Count(max_rows, input_width()));
  bias_sums_ = backend_.Allocate(static_cast<size_t>(widest));
  if (layers_.back().split == TpSplit::kGatheredColumn) {
    gathered_ = backend_.Allocate(Count(classes, max_rows));
    gathered_grad_ = backend_.Allocate(Count(classes, max_rows));
    std::vector<float> host(Count(classes, classes), 0.0f);
    for (int c = 0; c < classes; ++c) host[Count(c, classes) + static_cast<size_t>(c)] = 1.0f;
    identity_ = backend_.Allocate(host.size());
    backend_.Upload(identity_.data(), host.data(), host.size());
    host.assign(static_cast<size_t>(max_rows), 1.0f);
    ones_ = backend_.Allocate(host.size());
    backend_.Upload(ones_.data(), host.data(), host.size());
  }
}

void Stage::SetParameters(const std::vector<float>& whole) {
  std::vector<float> mine(params_.size());
  for (const ShardLayer& l : layers_) {
    const LayerSlice& s = l.slice;
    const LayerSlice& w = whole_[static_cast<size_t>(l.index)];
    // Row r of this rank's W is whole row (first + r), whole columns from `column` on.
    const int first = l.split == TpSplit::kRow ? 0 : l.shard_begin;
    const int column = l.split == TpSplit::kRow ? l.shard_begin : 0;
    for (int r = 0; r < s.out; ++r) {
      const float* src = whole.data() + w.weight_offset + Count(first + r, w.in) + column;
      std::copy_n(src, s.in, mine.data() + s.weight_offset + Count(r, s.in));
      mine[s.bias_offset + static_cast<size_t>(r)] =
          whole[w.bias_offset + static_cast<size_t>(first + r)];
    }
  }
  backend_.Upload(params_.data(), mine.data(), mine.size());
}

void Stage::AddTo(std::vector<float>* whole) {
  std::vector<float> mine(params_.size());
  backend_.Synchronize();
  backend_.Download(mine.data(), params_.data(), mine.size());
  for (const ShardLayer& l : layers_) {
    const LayerSlice& s = l.slice;
    const LayerSlice& w = whole_[static_cast<size_t>(l.index)];
    const int first = l.split == TpSplit::kRow ? 0 : l.shard_begin;
    const int column = l.split == TpSplit::kRow ? l.shard_begin : 0;
    // A row-parallel layer's bias is whole on every rank of the group: counted once.
    const bool bias = l.split != TpSplit::kRow || tensor_index_ == 0;
    for (int r = 0; r < s.out; ++r) {
      float* dst = whole->data() + w.weight_offset + Count(first + r, w.in) + column;
      const float* src = mine.data() + s.weight_offset + Count(r, s.in);
      for (int c = 0; c < s.in; ++c) dst[c] += src[c];
      if (bias)
        (*whole)[w.bias_offset + static_cast<size_t>(first + r)] +=
            mine[s.bias_offset + static_cast<size_t>(r)];
    }
  }
}

void Stage::AllReduce(float* x, size_t n, const char* what) {
  // Baton reads the buffer now (a synchronous call): the backend's math must be done.
  backend_.Synchronize();
  double t0 = NowSeconds();
  CheckBaton(batonAllReduce(x, x, n, batonFloat, batonSum, tensor_, nullptr), tensor_, what);
  counters_->wait_s += NowSeconds() - t0;
  counters_->bytes_sent += RingAllReduceBytes(static_cast<double>(n) * sizeof(float), tp_);
}

void Stage::LayerForward(const ShardLayer& l, const float* in, float* out, int rows,
                         const float* params) {
  const LayerSlice& s = l.slice;
  const float* w = params + s.weight_offset;
  const float* b = params + s.bias_offset;
  switch (l.split) {
    case TpSplit::kNone:
    case TpSplit::kColumn:
      // Z = X W^T + b: for a column layer, this rank's outputs only, from the whole input.
      backend_.Gemm(false, true, rows, s.out, s.in, 1.0f, in, w, 0.0f, out);
      backend_.AddBias(out, b, rows, s.out, l.hidden);
      break;
    case TpSplit::kRow:
      // This rank's inputs' share of every output, summed over the group; the bias once, after.
      backend_.Gemm(false, true, rows, s.out, s.in, 1.0f, in, w, 0.0f, out);
      AllReduce(out, Count(rows, s.out), "row-parallel forward allreduce");
      backend_.AddBias(out, b, rows, s.out, l.hidden);
      break;
    case TpSplit::kGatheredColumn: {
      // This rank's classes transposed, Z_t^T = W_t X^T + b_t 1^T, written at its block of the
      // gathered [classes x rows] buffer, so that the allgather puts the blocks in place.
      float* mine = gathered_.data() + Count(l.shard_begin, rows);
      backend_.Gemm(false, true, s.out, rows, s.in, 1.0f, w, in, 0.0f, mine);
      backend_.Gemm(false, false, s.out, rows, 1, 1.0f, b, ones_.data(), 1.0f, mine);
      std::vector<size_t> counts(class_counts_.size());
      std::vector<size_t> displs(class_counts_.size());
      size_t total = 0;
      for (size_t t = 0; t < counts.size(); ++t) {
        counts[t] = class_counts_[t] * static_cast<size_t>(rows);
        displs[t] = total;
        total += counts[t];
      }
      backend_.Synchronize();
      double t0 = NowSeconds();
      CheckBaton(batonAllGatherV(mine, counts[tensor_index_], gathered_.data(), counts.data(),
                                 displs.data(), batonFloat, tensor_, nullptr),
                 tensor_, "output layer allgather");
      counters_->wait_s += NowSeconds() - t0;
      // A ring forwards every block but the one of the rank after it.
      counters_->bytes_sent +=
          static_cast<double>(total - counts[(tensor_index_ + 1) % tp_]) * sizeof(float);
      // Back to rows x classes: Z = (Z^T)^T I.
      backend_.Gemm(true, false, rows, l.out, l.out, 1.0f, gathered_.data(), identity_.data(), 0.0f,
                    out);
      break;
    }
  }
}

void Stage::Forward(int slot, int rows, const float* params) {
  Slot& sl = slots_[static_cast<size_t>(slot)];
  const float* in = sl.input.data();
  for (size_t i = 0; i < layers_.size(); ++i) {
    LayerForward(layers_[i], in, sl.acts[i].data(), rows, params);
    in = sl.acts[i].data();
  }
}

BatchStats Stage::Loss(int slot, const uint8_t* labels, int rows, bool train, float grad_scale) {
  Slot& sl = slots_[static_cast<size_t>(slot)];
  const int classes = layers_.back().out;
  float* dlogits = train ? sl.dlogits.data() : nullptr;
  BatchStats stats = backend_.SoftmaxCrossEntropy(output(slot), labels, rows, classes, dlogits);
  // The loss is a mean over the micro-batch; the step's gradient is the mean over the batch.
  if (train && grad_scale != 1.0f) backend_.Scale(dlogits, Count(rows, classes), grad_scale);
  return stats;
}

void Stage::LayerBackward(const ShardLayer& l, const float* delta, const float* in, float* below,
                          int rows, const float* params, bool accumulate, size_t index,
                          const std::function<void(int)>& layer_done) {
  const LayerSlice& s = l.slice;
  const float* w = params + s.weight_offset;
  float* dw = grads_.data() + s.weight_offset;
  float* db = grads_.data() + s.bias_offset;
  const float beta = accumulate ? 1.0f : 0.0f;
  const float* mine = nullptr;  // gathered layer: this rank's classes of the transposed gradient
  if (l.split == TpSplit::kGatheredColumn) {
    // Every rank of the group computed the same loss, so each holds the whole gradient of the
    // logits: the allgather's adjoint (a reduce-scatter of identical copies, averaged) is this
    // rank's block of it, no communication. Transposed with the identity: I delta^T.
    backend_.Gemm(false, true, l.out, rows, l.out, 1.0f, identity_.data(), delta, 0.0f,
                  gathered_grad_.data());
    mine = gathered_grad_.data() + Count(l.shard_begin, rows);
    backend_.Gemm(false, false, s.out, s.in, rows, 1.0f, mine, in, beta, dw);
    backend_.ColumnSums(delta, rows, l.out, bias_sums_.data());
    if (accumulate) {
      backend_.Add(db, bias_sums_.data() + l.shard_begin, static_cast<size_t>(s.out));
    } else {
      backend_.Copy(db, bias_sums_.data() + l.shard_begin, static_cast<size_t>(s.out));
    }
  } else {
    // dW = delta^T X, db = column sums of delta (the Mlp's, on this rank's part).
    backend_.Gemm(true, false, s.out, s.in, rows, 1.0f, delta, in, beta, dw);
    if (accumulate) {
      backend_.ColumnSums(delta, rows, s.out, bias_sums_.data());
      backend_.Add(db, bias_sums_.data(), static_cast<size_t>(s.out));
    } else {
      backend_.ColumnSums(delta, rows, s.out, db);
    }
  }
  if (layer_done) layer_done(static_cast<int>(index));
  if (below == nullptr) return;
  // d(input) = delta W. A row layer's rank holds the gradient of its own inputs, complete (the
  // delta is whole); a column layer's ranks each hold a partial sum over their outputs.
  if (l.split == TpSplit::kGatheredColumn) {
    backend_.Gemm(true, false, rows, s.in, s.out, 1.0f, mine, w, 0.0f, below);
  } else {
    backend_.Gemm(false, false, rows, s.in, s.out, 1.0f, delta, w, 0.0f, below);
  }
  if (l.split == TpSplit::kColumn || l.split == TpSplit::kGatheredColumn) {
    AllReduce(below, Count(rows, s.in), "column-parallel backward allreduce");
  }
}

void Stage::Backward(int slot, int rows, const float* params, bool accumulate,
                     const std::function<void(int)>& layer_done) {
  Slot& sl = slots_[static_cast<size_t>(slot)];
  const float* delta = sl.dlogits.data();
  if (!last()) {
    // The received gradient of this stage's output, through its ReLU.
    float* d = deltas_.back().data();
    backend_.ReluBackward(d, sl.acts.back().data(), Count(rows, output_width()));
    delta = d;
  }
  for (size_t i = layers_.size(); i-- > 0;) {
    const float* in = i == 0 ? sl.input.data() : sl.acts[i - 1].data();
    float* below = i > 0 ? deltas_[i - 1].data() : (first() ? nullptr : input_grad_.data());
    LayerBackward(layers_[i], delta, in, below, rows, params, accumulate, i, layer_done);
    if (i > 0) {
      // The input was a hidden activation: through its ReLU (the previous stage does this for
      // the gradient it receives).
      backend_.ReluBackward(below, sl.acts[i - 1].data(), Count(rows, layers_[i - 1].out_width));
      delta = below;
    }
  }
}

void Stage::EnableStash() {
  stash_.resize(slots_.size());
  for (Buffer& b : stash_) {
    if (b.size() == 0) b = backend_.Allocate(params_.size());
  }
}

const float* Stage::Stash(int slot) {
  if (stash_.empty()) EnableStash();
  Buffer& b = stash_[static_cast<size_t>(slot)];
  backend_.Copy(b.data(), params_.data(), params_.size());
  return b.data();
}

size_t Stage::activation_bytes() const {
  size_t n = 0;
  for (const Slot& s : slots_) {
    n += s.input.size() + s.dlogits.size();
    for (const Buffer& a : s.acts) n += a.size();
  }
  return n * sizeof(float);
}

size_t Stage::stash_bytes() const {
  size_t n = 0;
  for (const Buffer& b : stash_) n += b.size();
  return n * sizeof(float);
}

}  // namespace trainer
