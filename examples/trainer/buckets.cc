#include "buckets.h"

#include "util.h"

namespace trainer {

std::vector<GradientBucket> AssignBuckets(const std::vector<LayerSlice>& layers,
                                          size_t first_cap_bytes, size_t cap_bytes) {
  std::vector<GradientBucket> buckets;
  bool open = false;
  GradientBucket current;
  for (int l = static_cast<int>(layers.size()) - 1; l >= 0; --l) {
    size_t cap = buckets.empty() ? first_cap_bytes : cap_bytes;
    if (open && (current.end - layers[l].begin()) * sizeof(float) > cap) {
      buckets.push_back(current);
      open = false;
    }
    if (!open) {
      current.end = layers[l].end();
      current.last_layer = l;
      open = true;
    }
    current.begin = layers[l].begin();
    current.first_layer = l;
  }
  if (open) buckets.push_back(current);
  return buckets;
}

GradientAverager::GradientAverager(batonComm_t comm, Backend& backend,
                                   const std::vector<LayerSlice>& layers, float* grads,
                                   size_t count, size_t first_cap_bytes, size_t cap_bytes,
                                   bool overlap, bool fp16, Timeline* timeline)
    : comm_(comm),
      backend_(backend),
      grads_(grads),
      count_(count),
      overlap_(overlap),
      fp16_(fp16),
      timeline_(timeline) {
  if (void* device_stream = backend_.comm_stream(); device_stream != nullptr) {
    // Baton takes a cudaStream_t cast to batonStream_t and orders each allreduce on it
    // (docs/cuda.md); the backend orders that stream with its math (launch, finish).
    device_ = true;
    stream_ = static_cast<batonStream_t>(device_stream);
  }
  if (overlap_) {
    buckets_ = AssignBuckets(layers, first_cap_bytes, cap_bytes);
    if (!device_) CheckBaton(batonStreamCreate(&stream_), comm_, "batonStreamCreate");
  } else {
    GradientBucket all;
    all.begin = 0;
    all.end = count;
    all.first_layer = 0;
    all.last_layer = static_cast<int>(layers.size()) - 1;
    buckets_.push_back(all);
  }
  if (fp16_) half_ = backend_.AllocateShared((count + 1) / 2);
  if (!device_) {
    // Gradients the backend keeps in shareable memory (AllocateShared) then take Baton's
    // registered path between the ranks of a host: each rank reads its peers' buckets in place.
    Register(grads_, count * sizeof(float));
    if (fp16_) Register(half(), half_.size() * sizeof(float));
  }
}

void GradientAverager::Register(void* buffer, size_t bytes) {
  if (bytes == 0) return;  // (nothing to read in place; Baton refuses an empty registration)
  void* handle = nullptr;
  CheckBaton(batonCommRegister(comm_, buffer, bytes, &handle), comm_, "batonCommRegister");
  registrations_.push_back(handle);
}

GradientAverager::~GradientAverager() {
  // (An error only where the communicator is gone, its registrations with it.)
  for (void* handle : registrations_) batonCommDeregister(comm_, handle);
  if (overlap_ && !device_) batonStreamDestroy(stream_);
}

void GradientAverager::LayerDone(int layer) {
  if (!overlap_) return;
  while (launched_ < buckets_.size() && buckets_[launched_].first_layer >= layer) {
    Launch(launched_++);
  }
}

void GradientAverager::Launch(size_t b) {
  const GradientBucket& bucket = buckets_[b];
  size_t count = bucket.end - bucket.begin;
  // The allreduce itself is Baton's event, on the thread that runs it (a host stream's).
  Timeline::Scope span(
      timeline_, "launch bucket",
      timeline_ != nullptr && timeline_->on()
          ? "\"bucket\":" + std::to_string(b) + ",\"count\":" + std::to_string(count)
          : std::string());
  // A host stream or a synchronous call reads the buffer now: the backend's results must be
  // complete. On the device's communication stream the allreduce waits for them instead, while
  // the backend goes on with the layers below.
  if (!device_) backend_.Synchronize();
  float* g = grads_ + bucket.begin;
  if (fp16_) backend_.ToHalf(half() + bucket.begin, g, count);
  if (device_) backend_.CommAfterCompute();
  batonResult_t r = fp16_ ? batonAllReduce(half() + bucket.begin, half() + bucket.begin, count,
                                           batonHalf, batonAvg, comm_, stream_)
                          : batonAllReduce(g, g, count, batonFloat, batonAvg, comm_, stream_);
  CheckBaton(r, comm_, "gradient allreduce (bucket " + std::to_string(b) + ")");
}

double GradientAverager::Finish() {
  double t0 = NowSeconds();
  while (launched_ < buckets_.size()) Launch(launched_++);
  launched_ = 0;
  if (device_) {
    // The math from here on (the fp16 conversion back, the optimizer step) waits for the
    // allreduces on the device; the host does not.
    backend_.ComputeAfterComm();
    if (fp16_) backend_.FromHalf(grads_, half(), count_);
    // A stream-ordered allreduce fails after its call returned; Baton then records the error on
    // the communicator (and aborts it). Checked every step so training stops at the next one.
    batonResult_t async_error = batonSuccess;
    CheckBaton(batonCommGetAsyncError(comm_, &async_error), comm_, "batonCommGetAsyncError");
    CheckBaton(async_error, comm_, "gradient allreduce (on the device stream)");
    return backend_.CommSeconds(false);
  }
  if (overlap_) CheckBaton(batonStreamSynchronize(stream_), comm_, "gradient allreduce");
  double waited = NowSeconds() - t0;
  if (fp16_) backend_.FromHalf(grads_, half(), count_);
  return waited;
}

double GradientAverager::CollectWait() {
  return device_ ? backend_.CommSeconds(true) : 0;
}

}  // namespace trainer
