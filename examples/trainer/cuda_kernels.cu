// The CUDA backend's element-wise kernels. Each is a grid-stride loop around a function of
// elementwise.h, the same one the CPU backend's loops call, so the two back ends differ only in
// the matrix products (cuBLAS vs OpenBLAS) and in the double-precision exp/log of the softmax.
#include "cuda_kernels.h"

#include <algorithm>

#include "elementwise.h"

namespace trainer::cuda {
namespace {

constexpr int kThreads = 256;
// Enough blocks to fill any current GPU several times over; a grid-stride loop covers the rest.
constexpr size_t kMaxBlocks = 4096;
// The stats reduction runs in one block of this many threads (a power of two for the tree).
constexpr int kReduceThreads = 256;

unsigned BlocksFor(size_t n) {
  return static_cast<unsigned>(std::min<size_t>((n + kThreads - 1) / kThreads, kMaxBlocks));
}

__device__ size_t FirstIndex() {
  return static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

__device__ size_t GridStride() {
  return static_cast<size_t>(blockDim.x) * gridDim.x;
}

__global__ void AddBiasKernel(float* y, const float* bias, size_t total, int cols, bool relu) {
  for (size_t i = FirstIndex(); i < total; i += GridStride()) {
    y[i] = BiasRelu(y[i], bias[i % static_cast<size_t>(cols)], relu);
  }
}

// One thread per column, adding the rows in order as the CPU backend does, so the sums are the
// same bits for the same matrix (adjacent threads read adjacent columns: coalesced).
__global__ void ColumnSumsKernel(const float* m, int rows, int cols, float* out) {
  for (size_t c = FirstIndex(); c < static_cast<size_t>(cols); c += GridStride()) {
    float s = 0.0f;
    for (int r = 0; r < rows; ++r) s = AddRn(s, m[static_cast<size_t>(r) * cols + c]);
    out[c] = s;
  }
}

__global__ void ReluBackwardKernel(float* delta, const float* activation, size_t n) {
  for (size_t i = FirstIndex(); i < n; i += GridStride())
    delta[i] = ReluGrad(delta[i], activation[i]);
}

// One thread per row: the rows are short (10 classes) and there are at most a few hundred.
__global__ void SoftmaxRowsKernel(const float* logits, const uint8_t* labels, int rows, int classes,
                                  float* dlogits, double* row_loss, int* row_correct) {
  for (size_t r = FirstIndex(); r < static_cast<size_t>(rows); r += GridStride()) {
    size_t offset = r * static_cast<size_t>(classes);
    RowLoss row = SoftmaxCrossEntropyRow(logits + offset, classes, labels[r],
                                         dlogits != nullptr ? dlogits + offset : nullptr, rows);
    row_loss[r] = row.loss;
    row_correct[r] = row.correct ? 1 : 0;
  }
}

// Sums of the rows' results in one block: strided partial sums, then a tree, always in the same
// order (atomicAdd on doubles would make the reported loss vary in its last bits between runs).
__global__ void ReduceStatsKernel(const double* row_loss, const int* row_correct, int rows,
                                  double* stats) {
  __shared__ double loss[kReduceThreads];
  __shared__ double correct[kReduceThreads];
  const int t = static_cast<int>(threadIdx.x);
  double l = 0;
  double c = 0;
  for (int r = t; r < rows; r += kReduceThreads) {
    l += row_loss[r];
    c += row_correct[r];
  }
  loss[t] = l;
  correct[t] = c;
  __syncthreads();
  for (int half = kReduceThreads / 2; half > 0; half /= 2) {
    if (t < half) {
      loss[t] += loss[t + half];
      correct[t] += correct[t + half];
    }
    __syncthreads();
  }
  if (t == 0) {
    stats[0] = loss[0];
    stats[1] = correct[0];
  }
}

__global__ void SgdKernel(float* w, float* v, const float* g, size_t n, float lr, float momentum,
                          float weight_decay) {
  for (size_t i = FirstIndex(); i < n; i += GridStride()) {
    SgdUpdate(w[i], v[i], g[i], lr, momentum, weight_decay);
  }
}

__global__ void EmaKernel(float* avg, const float* w, size_t n, float decay) {
  for (size_t i = FirstIndex(); i < n; i += GridStride()) avg[i] = EmaValue(avg[i], w[i], decay);
}

__global__ void ScaleKernel(float* x, size_t n, float s) {
  for (size_t i = FirstIndex(); i < n; i += GridStride()) x[i] = ScaleValue(x[i], s);
}

__global__ void AddKernel(float* x, const float* y, size_t n) {
  for (size_t i = FirstIndex(); i < n; i += GridStride()) x[i] = SumValue(x[i], y[i]);
}

__global__ void ToHalfKernel(uint16_t* dst, const float* src, size_t n) {
  for (size_t i = FirstIndex(); i < n; i += GridStride()) dst[i] = FloatToHalf(src[i]);
}

__global__ void FromHalfKernel(float* dst, const uint16_t* src, size_t n) {
  for (size_t i = FirstIndex(); i < n; i += GridStride()) dst[i] = HalfToFloat(src[i]);
}

// Launches a grid-stride kernel over n items on stream (nothing when n is 0) and returns the
// launch error. The arguments are converted to the kernel's parameter types.
template <typename... Params, typename... Args>
cudaError_t LaunchOver(size_t n, cudaStream_t stream, void (*kernel)(Params...), Args... args) {
  static_assert(sizeof...(Params) == sizeof...(Args), "one argument per kernel parameter");
  if (n == 0) return cudaSuccess;
  kernel<<<BlocksFor(n), kThreads, 0, stream>>>(static_cast<Params>(args)...);
  return cudaGetLastError();
}

}  // namespace

cudaError_t AddBias(float* y, const float* bias, int rows, int cols, bool relu,
                    cudaStream_t stream) {
  size_t total = static_cast<size_t>(rows) * static_cast<size_t>(cols);
  return LaunchOver(total, stream, AddBiasKernel, y, bias, total, cols, relu);
}

cudaError_t ColumnSums(const float* m, int rows, int cols, float* out, cudaStream_t stream) {
  return LaunchOver(static_cast<size_t>(std::max(cols, 0)), stream, ColumnSumsKernel, m, rows, cols,
                    out);
}

cudaError_t ReluBackward(float* delta, const float* activation, size_t n, cudaStream_t stream) {
  return LaunchOver(n, stream, ReluBackwardKernel, delta, activation, n);
}

cudaError_t SoftmaxCrossEntropy(const float* logits, const uint8_t* labels, int rows, int classes,
                                float* dlogits, double* row_loss, int* row_correct, double* stats,
                                cudaStream_t stream) {
  if (cudaError_t err =
          LaunchOver(static_cast<size_t>(std::max(rows, 0)), stream, SoftmaxRowsKernel, logits,
                     labels, rows, classes, dlogits, row_loss, row_correct);
      err != cudaSuccess) {
    return err;
  }
  // Also for 0 rows, so that stats always holds this call's (zero) sums.
  ReduceStatsKernel<<<1, kReduceThreads, 0, stream>>>(row_loss, row_correct, rows, stats);
  return cudaGetLastError();
}

cudaError_t SgdStep(float* w, float* v, const float* g, size_t n, float lr, float momentum,
                    float weight_decay, cudaStream_t stream) {
  return LaunchOver(n, stream, SgdKernel, w, v, g, n, lr, momentum, weight_decay);
}

cudaError_t EmaUpdate(float* avg, const float* w, size_t n, float decay, cudaStream_t stream) {
  return LaunchOver(n, stream, EmaKernel, avg, w, n, decay);
}

cudaError_t Scale(float* x, size_t n, float s, cudaStream_t stream) {
  return LaunchOver(n, stream, ScaleKernel, x, n, s);
}

cudaError_t Add(float* x, const float* y, size_t n, cudaStream_t stream) {
  return LaunchOver(n, stream, AddKernel, x, y, n);
}

cudaError_t ToHalf(uint16_t* dst, const float* src, size_t n, cudaStream_t stream) {
  return LaunchOver(n, stream, ToHalfKernel, dst, src, n);
}

cudaError_t FromHalf(float* dst, const uint16_t* src, size_t n, cudaStream_t stream) {
  return LaunchOver(n, stream, FromHalfKernel, dst, src, n);
}

}  // namespace trainer::cuda
