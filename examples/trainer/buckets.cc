#include "buckets.h"

#include <cstring>

#include "util.h"

namespace trainer {

std::vector<GradientBucket> assignBuckets(const std::vector<LayerSlice>& layers,
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

GradientAverager::GradientAverager(batonComm_t comm, Backend& backend, Mlp& model,
                                   size_t first_cap_bytes, size_t cap_bytes, bool overlap,
                                   bool fp16)
    : comm_(comm), backend_(backend), model_(model), overlap_(overlap), fp16_(fp16) {
  if (overlap_) {
    buckets_ = assignBuckets(model.layers(), first_cap_bytes, cap_bytes);
    checkBaton(batonStreamCreate(&stream_), comm_, "batonStreamCreate");
  } else {
    GradientBucket all;
    all.begin = 0;
    all.end = model.parameterCount();
    all.first_layer = 0;
    all.last_layer = static_cast<int>(model.layers().size()) - 1;
    buckets_.push_back(all);
  }
  if (fp16_) half_.resize(model.parameterCount());
}

GradientAverager::~GradientAverager() {
  if (stream_ != nullptr) batonStreamDestroy(stream_);
}

void GradientAverager::layerDone(int layer) {
  if (!overlap_) return;
  while (launched_ < buckets_.size() && buckets_[launched_].first_layer >= layer) {
    launch(launched_++);
  }
}

void GradientAverager::launch(size_t b) {
  const GradientBucket& bucket = buckets_[b];
  size_t count = bucket.end - bucket.begin;
  batonStream_t stream = overlap_ ? stream_ : nullptr;
  // The backend's results must be complete before Baton reads the buffer.
  backend_.synchronize();
  batonResult_t r;
  if (fp16_) {
    toHalf(bucket.begin, bucket.end);
    r = batonAllReduce(half_.data() + bucket.begin, half_.data() + bucket.begin, count, batonHalf,
                       batonAvg, comm_, stream);
  } else {
    float* g = model_.grads() + bucket.begin;
    r = batonAllReduce(g, g, count, batonFloat, batonAvg, comm_, stream);
  }
  checkBaton(r, comm_, "gradient allreduce (bucket " + std::to_string(b) + ")");
}

double GradientAverager::finish() {
  double t0 = nowSeconds();
  while (launched_ < buckets_.size()) launch(launched_++);
  if (overlap_) checkBaton(batonStreamSynchronize(stream_), comm_, "gradient allreduce");
  launched_ = 0;
  double waited = nowSeconds() - t0;
  if (fp16_) fromHalf(0, model_.parameterCount());
  return waited;
}

void GradientAverager::toHalf(size_t begin, size_t end) {
  const float* g = model_.grads();
  for (size_t i = begin; i < end; ++i) half_[i] = floatToHalf(g[i]);
}

void GradientAverager::fromHalf(size_t begin, size_t end) {
  float* g = model_.grads();
  for (size_t i = begin; i < end; ++i) g[i] = halfToFloat(half_[i]);
}

// Branch-light bit manipulation: GCC's _Float16 conversions go through libgcc on CPUs built
// without F16C and made --fp16-allreduce ten times slower than fp32. A device backend would
// convert in a kernel instead.
uint16_t floatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  uint32_t sign = (x >> 16) & 0x8000u;
  x &= 0x7fffffffu;
  if (x >= 0x7f800000u) return static_cast<uint16_t>(sign | (x > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (x >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to infinity
  if (x < 0x38800000u) {
    // Below the smallest normal half: adding 0.5 puts the half's subnormal ulp (2^-24) at the
    // float's last mantissa bit, so the FPU rounds to nearest even for us.
    float t;
    std::memcpy(&t, &x, sizeof t);
    t += 0.5f;
    uint32_t bits;
    std::memcpy(&bits, &t, sizeof bits);
    return static_cast<uint16_t>(sign | (bits - 0x3f000000u));
  }
  uint32_t odd = (x >> 13) & 1u;
  x += 0xc8000fffu + odd;  // rebias the exponent (127 - 15) and round to nearest even
  return static_cast<uint16_t>(sign | (x >> 13));
}

float halfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t em = h & 0x7fffu;
  uint32_t bits;
  if (em >= 0x7c00u) {
    bits = sign | 0x7f800000u | ((em & 0x3ffu) << 13);
  } else if (em < 0x400u) {
    float v = static_cast<float>(em) * 0x1p-24f;
    std::memcpy(&bits, &v, sizeof bits);
    bits |= sign;
  } else {
    bits = sign | ((em << 13) + 0x38000000u);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

}  // namespace trainer
