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

unsigned blocksFor(size_t n) {
  return static_cast<unsigned>(std::min<size_t>((n + kThreads - 1) / kThreads, kMaxBlocks));
}

__device__ size_t firstIndex() {
  return static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

__device__ size_t gridStride() {
  return static_cast<size_t>(blockDim.x) * gridDim.x;
}

__global__ void addBiasKernel(float* y, const float* bias, size_t total, int cols, bool relu) {
  for (size_t i = firstIndex(); i < total; i += gridStride()) {
    y[i] = biasRelu(y[i], bias[i % static_cast<size_t>(cols)], relu);
  }
}

// One thread per column, adding the rows in order as the CPU backend does, so the sums are the
// same bits for the same matrix (adjacent threads read adjacent columns: coalesced).
__global__ void columnSumsKernel(const float* m, int rows, int cols, float* out) {
  for (size_t c = firstIndex(); c < static_cast<size_t>(cols); c += gridStride()) {
    float s = 0.0f;
    for (int r = 0; r < rows; ++r) s = addRn(s, m[static_cast<size_t>(r) * cols + c]);
    out[c] = s;
  }
}

__global__ void reluBackwardKernel(float* delta, const float* activation, size_t n) {
  for (size_t i = firstIndex(); i < n; i += gridStride())
    delta[i] = reluGrad(delta[i], activation[i]);
}

// One thread per row: the rows are short (10 classes) and there are at most a few hundred.
__global__ void softmaxRowsKernel(const float* logits, const uint8_t* labels, int rows, int classes,
                                  float* dlogits, double* row_loss, int* row_correct) {
  for (size_t r = firstIndex(); r < static_cast<size_t>(rows); r += gridStride()) {
    size_t offset = r * static_cast<size_t>(classes);
    RowLoss row = softmaxCrossEntropyRow(logits + offset, classes, labels[r],
                                         dlogits != nullptr ? dlogits + offset : nullptr, rows);
    row_loss[r] = row.loss;
    row_correct[r] = row.correct ? 1 : 0;
  }
}

// Sums of the rows' results in one block: strided partial sums, then a tree, always in the same
// order (atomicAdd on doubles would make the reported loss vary in its last bits between runs).
__global__ void reduceStatsKernel(const double* row_loss, const int* row_correct, int rows,
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

__global__ void sgdKernel(float* w, float* v, const float* g, size_t n, float lr, float momentum,
                          float weight_decay) {
  for (size_t i = firstIndex(); i < n; i += gridStride()) {
    sgdUpdate(w[i], v[i], g[i], lr, momentum, weight_decay);
  }
}

__global__ void emaKernel(float* avg, const float* w, size_t n, float decay) {
  for (size_t i = firstIndex(); i < n; i += gridStride()) avg[i] = emaValue(avg[i], w[i], decay);
}

__global__ void scaleKernel(float* x, size_t n, float s) {
  for (size_t i = firstIndex(); i < n; i += gridStride()) x[i] = scaleValue(x[i], s);
}

__global__ void addKernel(float* x, const float* y, size_t n) {
  for (size_t i = firstIndex(); i < n; i += gridStride()) x[i] = sumValue(x[i], y[i]);
}

__global__ void toHalfKernel(uint16_t* dst, const float* src, size_t n) {
  for (size_t i = firstIndex(); i < n; i += gridStride()) dst[i] = floatToHalf(src[i]);
}

__global__ void fromHalfKernel(float* dst, const uint16_t* src, size_t n) {
  for (size_t i = firstIndex(); i < n; i += gridStride()) dst[i] = halfToFloat(src[i]);
}

// Launches a grid-stride kernel over n items on stream (nothing when n is 0) and returns the
// launch error. The arguments are converted to the kernel's parameter types.
template <typename... Params, typename... Args>
cudaError_t launchOver(size_t n, cudaStream_t stream, void (*kernel)(Params...), Args... args) {
  static_assert(sizeof...(Params) == sizeof...(Args), "one argument per kernel parameter");
  if (n == 0) return cudaSuccess;
  kernel<<<blocksFor(n), kThreads, 0, stream>>>(static_cast<Params>(args)...);
  return cudaGetLastError();
}

}  // namespace

cudaError_t addBias(float* y, const float* bias, int rows, int cols, bool relu,
                    cudaStream_t stream) {
  size_t total = static_cast<size_t>(rows) * static_cast<size_t>(cols);
  return launchOver(total, stream, addBiasKernel, y, bias, total, cols, relu);
}

cudaError_t columnSums(const float* m, int rows, int cols, float* out, cudaStream_t stream) {
  return launchOver(static_cast<size_t>(std::max(cols, 0)), stream, columnSumsKernel, m, rows, cols,
                    out);
}

cudaError_t reluBackward(float* delta, const float* activation, size_t n, cudaStream_t stream) {
  return launchOver(n, stream, reluBackwardKernel, delta, activation, n);
}

cudaError_t softmaxCrossEntropy(const float* logits, const uint8_t* labels, int rows, int classes,
                                float* dlogits, double* row_loss, int* row_correct, double* stats,
                                cudaStream_t stream) {
  if (cudaError_t err =
          launchOver(static_cast<size_t>(std::max(rows, 0)), stream, softmaxRowsKernel, logits,
                     labels, rows, classes, dlogits, row_loss, row_correct);
      err != cudaSuccess) {
    return err;
  }
  // Also for 0 rows, so that stats always holds this call's (zero) sums.
  reduceStatsKernel<<<1, kReduceThreads, 0, stream>>>(row_loss, row_correct, rows, stats);
  return cudaGetLastError();
}

cudaError_t sgdStep(float* w, float* v, const float* g, size_t n, float lr, float momentum,
                    float weight_decay, cudaStream_t stream) {
  return launchOver(n, stream, sgdKernel, w, v, g, n, lr, momentum, weight_decay);
}

cudaError_t emaUpdate(float* avg, const float* w, size_t n, float decay, cudaStream_t stream) {
  return launchOver(n, stream, emaKernel, avg, w, n, decay);
}

cudaError_t scale(float* x, size_t n, float s, cudaStream_t stream) {
  return launchOver(n, stream, scaleKernel, x, n, s);
}

cudaError_t add(float* x, const float* y, size_t n, cudaStream_t stream) {
  return launchOver(n, stream, addKernel, x, y, n);
}

cudaError_t toHalf(uint16_t* dst, const float* src, size_t n, cudaStream_t stream) {
  return launchOver(n, stream, toHalfKernel, dst, src, n);
}

cudaError_t fromHalf(float* dst, const uint16_t* src, size_t n, cudaStream_t stream) {
  return launchOver(n, stream, fromHalfKernel, dst, src, n);
}

}  // namespace trainer::cuda
