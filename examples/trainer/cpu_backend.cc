// The host backend: CBLAS for the matrix products, straightforward loops for the rest.
#include <baton.h>
#include <cblas.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_set>

#include "backend.h"
#include "elementwise.h"
#include "util.h"

namespace trainer {

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    Reset();
    owner_ = other.owner_;
    data_ = other.data_;
    size_ = other.size_;
    other.owner_ = nullptr;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

void Buffer::Reset() {
  if (owner_ != nullptr && data_ != nullptr) owner_->Release(data_);
  owner_ = nullptr;
  data_ = nullptr;
  size_ = 0;
}

namespace {

// Host memory, 64-byte aligned for the BLAS kernels; math through CBLAS.
class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int blas_threads) {
    if (blas_threads > 0) openblas_set_num_threads(blas_threads);
  }

  std::string name() const override {
    return "cpu (OpenBLAS, " + std::to_string(openblas_get_num_threads()) + " thread(s))";
  }

  Buffer Allocate(size_t n) override {
    size_t bytes = ((std::max<size_t>(n, 1) * sizeof(float) + 63) / 64) * 64;
    auto* p = static_cast<float*>(std::aligned_alloc(64, bytes));
    if (p == nullptr)
      throw TrainError("out of memory allocating " + std::to_string(bytes) + " bytes");
    std::memset(p, 0, bytes);
    return Buffer(this, p, n);
  }
  Buffer AllocateShared(size_t n) override {
    void* p = nullptr;
    // Page-aligned and zeroed.
    if (batonResult_t r = batonMemAlloc(&p, std::max<size_t>(n, 1) * sizeof(float));
        r != batonSuccess)
      throw TrainError(std::string("batonMemAlloc of ") + std::to_string(n) +
                       " floats: " + batonGetErrorString(r));
    std::lock_guard<std::mutex> lock(shared_mutex_);
    shared_.insert(static_cast<float*>(p));
    return Buffer(this, static_cast<float*>(p), n);
  }
  void Upload(float* dst, const float* host, size_t n) override { Copy(dst, host, n); }
  void Download(float* host, const float* src, size_t n) override { Copy(host, src, n); }
  void Copy(float* dst, const float* src, size_t n) override {
    if (dst != src && n > 0) std::memcpy(dst, src, n * sizeof(float));
  }

  void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
            const float* b, float beta, float* c) override {
    int lda = trans_a ? m : k;
    int ldb = trans_b ? k : n;
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, n);
  }

  void AddBias(float* y, const float* bias, int rows, int cols, bool relu) override {
    for (int r = 0; r < rows; ++r) {
      float* row = y + static_cast<size_t>(r) * cols;
      for (int c = 0; c < cols; ++c) row[c] = BiasRelu(row[c], bias[c], relu);
    }
  }

  void ColumnSums(const float* m, int rows, int cols, float* out) override {
    std::fill(out, out + cols, 0.0f);
    for (int r = 0; r < rows; ++r) {
      const float* row = m + static_cast<size_t>(r) * cols;
      for (int c = 0; c < cols; ++c) out[c] += row[c];
    }
  }

  void ReluBackward(float* delta, const float* activation, size_t n) override {
    for (size_t i = 0; i < n; ++i) delta[i] = ReluGrad(delta[i], activation[i]);
  }

  BatchStats SoftmaxCrossEntropy(const float* logits, const uint8_t* labels, int rows, int classes,
                                 float* dlogits) override {
    BatchStats stats;
    stats.samples = rows;
    for (int r = 0; r < rows; ++r) {
      size_t offset = static_cast<size_t>(r) * classes;
      RowLoss row = SoftmaxCrossEntropyRow(logits + offset, classes, labels[r],
                                           dlogits != nullptr ? dlogits + offset : nullptr, rows);
      stats.loss_sum += row.loss;
      stats.correct += row.correct ? 1 : 0;
    }
    return stats;
  }

  void SgdStep(float* w, float* v, const float* g, size_t n, float lr, float momentum,
               float weight_decay) override {
    for (size_t i = 0; i < n; ++i) SgdUpdate(w[i], v[i], g[i], lr, momentum, weight_decay);
  }

  void EmaUpdate(float* avg, const float* w, size_t n, float decay) override {
    for (size_t i = 0; i < n; ++i) avg[i] = EmaValue(avg[i], w[i], decay);
  }

  void Scale(float* x, size_t n, float s) override {
    for (size_t i = 0; i < n; ++i) x[i] = ScaleValue(x[i], s);
  }

  void Add(float* x, const float* y, size_t n) override {
    for (size_t i = 0; i < n; ++i) x[i] = SumValue(x[i], y[i]);
  }

  void ToHalf(uint16_t* dst, const float* src, size_t n) override {
    for (size_t i = 0; i < n; ++i) dst[i] = FloatToHalf(src[i]);
  }

  void FromHalf(float* dst, const uint16_t* src, size_t n) override {
    for (size_t i = 0; i < n; ++i) dst[i] = HalfToFloat(src[i]);
  }

 private:
  void Release(float* data) override {
    {
      std::lock_guard<std::mutex> lock(shared_mutex_);
      if (shared_.erase(data) == 0) {
        std::free(data);
        return;
      }
    }
    // (Refused only while a live communicator still has it registered, a bug of the caller's:
    // the memory then stays.)
    batonMemFree(data);
  }

  std::mutex shared_mutex_;
  std::unordered_set<float*> shared_;  // from AllocateShared (batonMemFree)
};

}  // namespace

std::unique_ptr<Backend> MakeCpuBackend(int blas_threads) {
  return std::make_unique<CpuBackend>(blas_threads);
}

}  // namespace trainer
