// Host kernels of the CNN (cnn.h) on NHWC activations: im2col and its adjoint, 2x2 max pooling,
// and batch normalisation (per channel, over the batch and the pixels) with an optional sum
// across ranks (SyncBN).
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

namespace trainer {

// Sums values[0..n) in place across the data-parallel ranks (SyncBN); empty: this rank alone.
using StatSum = std::function<void(double* values, size_t n)>;

// Shape of a square-kernel convolution's input (n x h x w x c, NHWC) and output (n x ho x wo).
struct ConvShape {
  int n = 0, h = 0, w = 0, c = 0, k = 0, pad = 0;
  int ho() const { return h + 2 * pad - k + 1; }
  int wo() const { return w + 2 * pad - k + 1; }
  // Rows of the column matrix (output pixels) and its columns (one kernel window: ky, kx, c).
  size_t rows() const { return static_cast<size_t>(n) * ho() * wo(); }
  int window() const { return k * k * c; }
};

// cols[rows x window] of x (zero outside the image): the convolution becomes cols * W^T.
void Im2col(const float* x, const ConvShape& s, float* cols);
// The adjoint: dx (n x h x w x c) = the sum of dcols over the windows each pixel appears in.
void Col2im(const float* dcols, const ConvShape& s, float* dx);

// y (n x h/2 x w/2 x c) = the maximum of each 2x2 block; argmax: the index into x of each.
void MaxPool2(const float* x, int n, int h, int w, int c, float* y, int* argmax);
// dx (n x h x w x c, zeroed here) receives dy at argmax.
void MaxPool2Backward(const float* dy, const int* argmax, size_t out_count, size_t in_count,
                      float* dx);

// What a training-mode batch norm keeps for backward: 1/sqrt(var + eps) per channel and the
// number of rows the statistics came from (over every rank with SyncBN).
struct BatchNormCache {
  std::vector<double> invstd;
  double count = 0;
};

// Batch normalisation of x[rows x c] per channel, as torch's BatchNorm2d (eps 1e-5, momentum 0.1,
// running variance unbiased). Training: batch statistics (summed across ranks by sum when set),
// xhat and invstd kept for backward, the running statistics updated.
void BatchNormTrain(const float* x, size_t rows, int c, const float* gamma, const float* beta,
                    float* y, float* xhat, BatchNormCache* cache, float* running_mean,
                    float* running_var, const StatSum& sum);
void BatchNormEval(const float* x, size_t rows, int c, const float* gamma, const float* beta,
                   const float* running_mean, const float* running_var, float* y);
// dgamma, dbeta: this rank's (the gradient allreduce averages them); dx uses the reductions over
// the whole (synchronised) batch, as torch's SyncBatchNorm.
void BatchNormBackward(const float* dy, const float* xhat, const BatchNormCache& cache, size_t rows,
                       int c, const float* gamma, float* dgamma, float* dbeta, float* dx,
                       const StatSum& sum);

}  // namespace trainer
