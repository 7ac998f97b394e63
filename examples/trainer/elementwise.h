// The per-element formulas of the trainer's math, shared by the CPU backend's loops
// (cpu_backend.cc, g++) and the CUDA backend's kernels (cuda_kernels.cu, nvcc), so that both
// compute every element with the same operations in the same order. The CPU backend's results
// are those it gave before these functions existed, bit for bit (trainer_elementwise_test).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define TRAINER_HD __host__ __device__
#else
#define TRAINER_HD
#endif

namespace trainer {

// nvcc contracts a * b + c into one fused multiply-add by default (--fmad=true), which rounds
// once where g++ for x86-64 (no FMA in the baseline ISA) rounds twice. These helpers round every
// step on the device too (the _rn intrinsics are never contracted), so a kernel gives the same
// bits as the CPU loop for the same inputs.
TRAINER_HD inline float MulRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

TRAINER_HD inline float AddRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

TRAINER_HD inline float SubRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

// y + bias, then max(., 0) when relu (a negative zero stays as it is, as before).
TRAINER_HD inline float BiasRelu(float y, float bias, bool relu) {
  float v = AddRn(y, bias);
  return relu && v < 0.0f ? 0.0f : v;
}

// The derivative of ReLU applied to delta: 0 where the activation was not positive.
TRAINER_HD inline float ReluGrad(float delta, float activation) {
  return activation <= 0.0f ? 0.0f : delta;
}

// One row's softmax cross-entropy: the loss, whether the arg max is the label, and (when d is
// not null) d(mean loss)/d(logits) = (softmax - onehot) / rows. The max is subtracted before
// exp and the sums are in double, so large logits neither overflow nor lose the small terms.
struct RowLoss {
  double loss;
  bool correct;
};

TRAINER_HD inline RowLoss SoftmaxCrossEntropyRow(const float* z, int classes, int label, float* d,
                                                 int rows) {
  int best = 0;
  float zmax = z[0];
  for (int c = 1; c < classes; ++c) {
    if (z[c] > zmax) {
      zmax = z[c];
      best = c;
    }
  }
  // ::exp and ::log of a double are glibc's on the host (what std::exp and std::log call) and
  // CUDA's double-precision functions on the device.
  double sum = 0;
  for (int c = 0; c < classes; ++c) sum += ::exp(static_cast<double>(SubRn(z[c], zmax)));
  double log_sum = ::log(sum);
  RowLoss row{log_sum - static_cast<double>(SubRn(z[label], zmax)), best == label};
  if (d != nullptr) {
    for (int c = 0; c < classes; ++c) {
      double p = ::exp(static_cast<double>(SubRn(z[c], zmax)) - log_sum);
      d[c] = static_cast<float>((p - (c == label ? 1.0 : 0.0)) / rows);
    }
  }
  return row;
}

// SGD with momentum and (L2) weight decay, PyTorch's formulation:
//   v = momentum * v + (g + weight_decay * w);  w -= lr * v
TRAINER_HD inline void SgdUpdate(float& w, float& v, float g, float lr, float momentum,
                                 float weight_decay) {
  v = AddRn(MulRn(momentum, v), AddRn(g, MulRn(weight_decay, w)));
  w = SubRn(w, MulRn(lr, v));
}

// decay * avg + (1 - decay) * w
TRAINER_HD inline float EmaValue(float avg, float w, float decay) {
  return AddRn(MulRn(decay, avg), MulRn(SubRn(1.0f, decay), w));
}

TRAINER_HD inline float ScaleValue(float x, float s) {
  return MulRn(x, s);
}

TRAINER_HD inline float SumValue(float x, float y) {
  return AddRn(x, y);
}

// Bit casts that compile on both sides (std::memcpy is host code; the device has intrinsics).
TRAINER_HD inline uint32_t FloatBits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

TRAINER_HD inline float BitsFloat(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// IEEE 754 binary16 conversions, round to nearest even (as F16C and _Float16 do), by bit
// manipulation: GCC's _Float16 conversions go through libgcc on CPUs built without F16C and
// made --fp16-allreduce ten times slower than fp32.
TRAINER_HD inline uint16_t FloatToHalf(float f) {
  uint32_t x = FloatBits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  x &= 0x7fffffffu;
  if (x >= 0x7f800000u) return static_cast<uint16_t>(sign | (x > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (x >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to infinity
  if (x < 0x38800000u) {
    // Below the smallest normal half: adding 0.5 puts the half's subnormal ulp (2^-24) at the
    // float's last mantissa bit, so the FPU rounds to nearest even for us.
    uint32_t bits = FloatBits(AddRn(BitsFloat(x), 0.5f));
    return static_cast<uint16_t>(sign | (bits - 0x3f000000u));
  }
  uint32_t odd = (x >> 13) & 1u;
  x += 0xc8000fffu + odd;  // rebias the exponent (127 - 15) and round to nearest even
  return static_cast<uint16_t>(sign | (x >> 13));
}

TRAINER_HD inline float HalfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t em = h & 0x7fffu;
  uint32_t bits;
  if (em >= 0x7c00u) {
    bits = sign | 0x7f800000u | ((em & 0x3ffu) << 13);
  } else if (em < 0x400u) {
    bits = FloatBits(MulRn(static_cast<float>(em), 0x1p-24f)) | sign;  // exact: em < 2^10
  } else {
    bits = sign | ((em << 13) + 0x38000000u);
  }
  return BitsFloat(bits);
}

}  // namespace trainer
