// Host launchers of the CUDA backend's kernels (cuda_kernels.cu, compiled by nvcc; the callers in
// cuda_backend.cc are compiled by g++). Each queues its work on `stream` and returns the launch
// error (cudaSuccess when nothing needed launching); errors while the kernel runs surface at the
// next synchronizing call, as CUDA reports them.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace trainer::cuda {

// y[r][c] = BiasRelu(y[r][c], bias[c], relu)
cudaError_t AddBias(float* y, const float* bias, int rows, int cols, bool relu,
                    cudaStream_t stream);
// out[c] = sum over r (in row order) of m[r][c]
cudaError_t ColumnSums(const float* m, int rows, int cols, float* out, cudaStream_t stream);
// delta[i] = ReluGrad(delta[i], activation[i])
cudaError_t ReluBackward(float* delta, const float* activation, size_t n, cudaStream_t stream);
// Softmax cross-entropy of every row (dlogits may be null), then the sums of the rows' losses
// and correct predictions into stats[0] and stats[1], reduced in a fixed order so that the
// result does not vary from run to run. row_loss and row_correct are scratch of rows elements.
cudaError_t SoftmaxCrossEntropy(const float* logits, const uint8_t* labels, int rows, int classes,
                                float* dlogits, double* row_loss, int* row_correct, double* stats,
                                cudaStream_t stream);
cudaError_t SgdStep(float* w, float* v, const float* g, size_t n, float lr, float momentum,
                    float weight_decay, cudaStream_t stream);
cudaError_t EmaUpdate(float* avg, const float* w, size_t n, float decay, cudaStream_t stream);
cudaError_t Scale(float* x, size_t n, float s, cudaStream_t stream);
cudaError_t Add(float* x, const float* y, size_t n, cudaStream_t stream);
cudaError_t ToHalf(uint16_t* dst, const float* src, size_t n, cudaStream_t stream);
cudaError_t FromHalf(float* dst, const uint16_t* src, size_t n, cudaStream_t stream);

}  // namespace trainer::cuda
