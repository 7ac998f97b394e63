// Gradient averaging for synchronous data parallelism, the way PyTorch DDP does it: gradients
// are grouped into buckets in reverse layer order (the order backward produces them), and each
// bucket's allreduce is launched as soon as backward has finished its layers, so communication
// overlaps the rest of backward: on a host stream with a host backend, and the step waits for
// all of them before the optimizer update; on the device backend's communication stream with a
// device backend, after the kernels that computed the bucket, and the optimizer's kernels wait
// for all of them on the device (docs/trainer.md).
#pragma once

#include <baton.h>

#include <vector>

#include "backend.h"
#include "model.h"
#include "timeline.h"

namespace trainer {

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
std::vector<GradientBucket> AssignBuckets(const std::vector<LayerSlice>& layers,
                                          size_t first_cap_bytes, size_t cap_bytes);

// Averages a model's gradients across the communicator, bucketed and overlapped with backward
// (overlap = true) or as one allreduce after backward (overlap = false). With fp16 the gradients
// travel as IEEE half precision (half the bytes, about 3 decimal digits), converted by the
// backend (a kernel on a device).
class GradientAverager {
 public:
  // layers: where each layer's gradients sit in grads (count floats in all); layer_done(l) is
  // called with indices into it (the Mlp's layers, or a model-parallel stage's).
  GradientAverager(batonComm_t comm, Backend& backend, const std::vector<LayerSlice>& layers,
                   float* grads, size_t count, size_t first_cap_bytes, size_t cap_bytes,
                   bool overlap, bool fp16, Timeline* timeline = nullptr);
  ~GradientAverager();
  GradientAverager(const GradientAverager&) = delete;
  GradientAverager& operator=(const GradientAverager&) = delete;

  // Backward's per-layer callback: launches every bucket whose layers are now all done.
  void LayerDone(int layer);
  // After backward: launches what is left (everything without overlap), waits for all of it and
  // returns the seconds spent waiting. With a device backend nothing waits on the host: the
  // optimizer's kernels wait for the allreduces on the device, and the seconds are those of the
  // device's waits completed so far (Backend::ComputeAfterComm; CollectWait() returns the rest).
  double Finish();
  // Device backend: waits for the outstanding allreduces and returns the seconds of the
  // device's waits not yet counted by finish() (host backend: 0).
  double CollectWait();

  const std::vector<GradientBucket>& buckets() const { return buckets_; }

 private:
  void Launch(size_t bucket);
  void Register(void* buffer, size_t bytes);
  uint16_t* half() { return reinterpret_cast<uint16_t*>(half_.data()); }

  batonComm_t comm_;
  Backend& backend_;
  float* grads_;
  size_t count_;
  bool overlap_;
  bool fp16_;
  std::vector<GradientBucket> buckets_;
  size_t launched_ = 0;  // buckets launched this step, in order
  bool device_ = false;  // the backend's stream orders the allreduces (a cudaStream_t)
  // Where the allreduces go: the backend's device stream, a Baton host stream made here (host
  // backend with overlap), or null (host backend without overlap: synchronous calls).
  batonStream_t stream_ = nullptr;
  Timeline* timeline_;  // --trace: each bucket's launch (null: none)
  Buffer half_;  // fp16 staging in backend memory, same layout as the gradients (2 per float)
  std::vector<void*> registrations_;  // batonCommRegister handles of the host buffers
};

}  // namespace trainer
