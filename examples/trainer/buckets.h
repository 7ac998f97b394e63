// Gradient averaging for synchronous data parallelism, the way PyTorch DDP does it: gradients
// are grouped into buckets in reverse layer order (the order backward produces them), and each
// bucket's allreduce is launched on a host stream as soon as backward has finished its layers,
// so communication overlaps the rest of backward; the step waits for all of them before the
// optimizer update.
#pragma once

#include <baton.h>

#include <vector>

#include "backend.h"
#include "model.h"

namespace trainer {

// IEEE 754 binary16 conversions, round to nearest even (as F16C and _Float16 do).
uint16_t floatToHalf(float f);
float halfToFloat(uint16_t h);

// A contiguous range of the flat gradient vector holding whole layers [first_layer, last_layer].
struct GradientBucket {
  size_t begin = 0;
  size_t end = 0;
  int first_layer = 0;  // lowest layer index; the bucket is ready once backward has done it
  int last_layer = 0;
};

// Buckets in reverse layer order: the first holds at most first_cap_bytes, the others at most
// cap_bytes, except that a layer larger than the cap gets a bucket of its own. DDP adds
// parameters until a bucket reaches its cap (for this 2 MiB model: one bucket, no overlap); we
// close a bucket before the layer that would overflow it, and keep whole layers together since a
// layer is what backward completes at once.
std::vector<GradientBucket> assignBuckets(const std::vector<LayerSlice>& layers,
                                          size_t first_cap_bytes, size_t cap_bytes);

// Averages a model's gradients across the communicator, bucketed and overlapped with backward
// (overlap = true) or as one allreduce after backward (overlap = false). With fp16 the gradients
// travel as IEEE half precision (half the bytes, about 3 decimal digits).
class GradientAverager {
 public:
  GradientAverager(batonComm_t comm, Backend& backend, Mlp& model, size_t first_cap_bytes,
                   size_t cap_bytes, bool overlap, bool fp16);
  ~GradientAverager();
  GradientAverager(const GradientAverager&) = delete;
  GradientAverager& operator=(const GradientAverager&) = delete;

  // Backward's per-layer callback: launches every bucket whose layers are now all done.
  void layerDone(int layer);
  // After backward: launches what is left (everything without overlap), waits for all of it and
  // returns the seconds spent waiting.
  double finish();

  const std::vector<GradientBucket>& buckets() const { return buckets_; }

 private:
  void launch(size_t bucket);
  void toHalf(size_t begin, size_t end);
  void fromHalf(size_t begin, size_t end);

  batonComm_t comm_;
  Backend& backend_;
  Mlp& model_;
  bool overlap_;
  bool fp16_;
  std::vector<GradientBucket> buckets_;
  size_t launched_ = 0;  // buckets launched this step, in order
  batonStream_t stream_ = nullptr;
  std::vector<uint16_t> half_;  // fp16 staging, same layout as the gradients
};

}  // namespace trainer
