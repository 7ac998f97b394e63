// The math the trainer needs, behind one interface, so that where the numbers live (host memory
// with CBLAS, or CUDA device memory with cuBLAS) is one object's business. The model, the
// optimizer and the communication code only see opaque float pointers from Buffer; Baton's
// collectives take those same pointers (host buffers, or CUDA device buffers: docs/cuda.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace trainer {

class Backend;

// Floats owned by a backend (host or device memory); movable, frees itself.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Backend* owner, float* data, size_t size) : owner_(owner), data_(data), size_(size) {}
  Buffer(Buffer&& other) noexcept { *this = std::move(other); }
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { reset(); }

  float* data() { return data_; }
  const float* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  void reset();
  Backend* owner_ = nullptr;
  float* data_ = nullptr;
  size_t size_ = 0;
};

// Loss and accuracy of one batch, summed (not averaged) so batches and ranks add up.
struct BatchStats {
  double loss_sum = 0;
  double correct = 0;
  double samples = 0;
};

// Dense math on backend memory; matrices are row-major. Every call may run asynchronously on a
// device; synchronize() waits for all of them and for the work queued on commStream() (before
// host reads, and before collectives that are not ordered on commStream()). Calls may come from
// several threads (the asynchronous parameter server's), one at a time.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;

  // n zeroed floats of backend memory.
  virtual Buffer allocate(size_t n) = 0;
  // Host <-> backend copies; each returns once the host memory may be reused (upload) or holds
  // the values of the work queued before it (download).
  virtual void upload(float* dst, const float* host, size_t n) = 0;
  virtual void download(float* host, const float* src, size_t n) = 0;
  virtual void copy(float* dst, const float* src, size_t n) = 0;
  virtual void synchronize() {}

  // C[m x n] = alpha * op(A) * op(B) + beta * C, op(A) is m x k, op(B) is k x n.
  virtual void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                    const float* b, float beta, float* c) = 0;
  // y[r][c] += bias[c], then y = max(y, 0) when relu.
  virtual void addBias(float* y, const float* bias, int rows, int cols, bool relu) = 0;
  // out[c] = sum over r of m[r][c].
  virtual void columnSums(const float* m, int rows, int cols, float* out) = 0;
  // delta[i] = 0 where activation[i] <= 0 (the derivative of ReLU).
  virtual void reluBackward(float* delta, const float* activation, size_t n) = 0;
  // Softmax cross-entropy of logits[rows x classes] against host labels. When dlogits is not
  // null it receives d(mean loss)/d(logits) = (softmax - onehot) / rows.
  virtual BatchStats softmaxCrossEntropy(const float* logits, const uint8_t* labels, int rows,
                                         int classes, float* dlogits) = 0;
  // SGD with momentum and (L2) weight decay, PyTorch's formulation:
  //   v = momentum * v + (g + weight_decay * w);  w -= lr * v
  virtual void sgdStep(float* w, float* v, const float* g, size_t n, float lr, float momentum,
                       float weight_decay) = 0;
  // avg = decay * avg + (1 - decay) * w
  virtual void emaUpdate(float* avg, const float* w, size_t n, float decay) = 0;
  // x *= s
  virtual void scale(float* x, size_t n, float s) = 0;
  // x += y
  virtual void add(float* x, const float* y, size_t n) = 0;
  // dst = IEEE binary16 of src (round to nearest even), and back; dst and src do not overlap.
  virtual void toHalf(uint16_t* dst, const float* src, size_t n) = 0;
  virtual void fromHalf(float* dst, const uint16_t* src, size_t n) = 0;

  // ---- communication with device buffers ----
  // True when Buffers are device memory the host cannot read (Baton takes them as device
  // buffers, docs/cuda.md).
  virtual bool deviceMemory() const { return false; }
  // A device stream of its own for Baton's stream-ordered collectives (a cudaStream_t passed as
  // batonStream_t), so that they run beside the math instead of behind it; null for host
  // backends, which use Baton host streams. Work on it is ordered with the math only through
  // the two calls below (and synchronize(), which waits for both streams).
  virtual void* commStream() { return nullptr; }
  // What is queued on commStream() from now on runs after the math queued so far.
  virtual void commAfterCompute() {}
  // The math queued from now on runs after what is queued on commStream() so far. Device
  // backends also time how long the math would wait here: from the moment the math queued so
  // far is done to the moment commStream()'s work is, 0 when that finished first.
  virtual void computeAfterComm() {}
  // The seconds of those waits completed since the last call (with wait = true: of all of them,
  // waiting for them). Host backends: 0.
  virtual double commSeconds(bool /*wait*/) { return 0; }

 private:
  friend class Buffer;
  virtual void release(float* data) = 0;
};

// The host backend: CBLAS (OpenBLAS) sgemm and plain loops. blas_threads <= 0 leaves OpenBLAS's
// own setting alone.
std::unique_ptr<Backend> makeCpuBackend(int blas_threads);

// The CUDA backend (cuda_backend.cc) on GPU local_rank % (visible GPUs), cuBLAS loaded at run
// time. Throws TrainError with the reason when there is no usable GPU, no cuBLAS, or (built
// without CUDA: no_cuda_backend.cc) always.
std::unique_ptr<Backend> makeCudaBackend(int local_rank);
// Whether this build has the CUDA backend (for --help and the tests).
bool cudaBackendBuilt();

}  // namespace trainer
