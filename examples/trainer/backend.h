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
  ~Buffer() { Reset(); }

  float* data() { return data_; }
  const float* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  void Reset();
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
// device; synchronize() waits for all of them and for the work queued on comm_stream() (before
// host reads, and before collectives that are not ordered on comm_stream()). Calls may come from
// several threads (the asynchronous parameter server's), one at a time.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;

  // n zeroed floats of backend memory.
  virtual Buffer Allocate(size_t n) = 0;
  // As Allocate, for buffers that collectives read and write (the gradients): host memory that
  // the other ranks of this host can map (batonMemAlloc), so that calls on it registered with
  // batonCommRegister read the peers' buffers in place. Device memory as Allocate's.
  virtual Buffer AllocateShared(size_t n) { return Allocate(n); }
  // Host <-> backend copies; each returns once the host memory may be reused (upload) or holds
  // the values of the work queued before it (download).
  virtual void Upload(float* dst, const float* host, size_t n) = 0;
  virtual void Download(float* host, const float* src, size_t n) = 0;
  virtual void Copy(float* dst, const float* src, size_t n) = 0;
  virtual void Synchronize() {}

  // C[m x n] = alpha * op(A) * op(B) + beta * C, op(A) is m x k, op(B) is k x n.
  virtual void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                    const float* b, float beta, float* c) = 0;
  // y[r][c] += bias[c], then y = max(y, 0) when relu.
  virtual void AddBias(float* y, const float* bias, int rows, int cols, bool relu) = 0;
  // out[c] = sum over r of m[r][c].
  virtual void ColumnSums(const float* m, int rows, int cols, float* out) = 0;
  // delta[i] = 0 where activation[i] <= 0 (the derivative of ReLU).
  virtual void ReluBackward(float* delta, const float* activation, size_t n) = 0;
  // Softmax cross-entropy of logits[rows x classes] against host labels. When dlogits is not
  // null it receives d(mean loss)/d(logits) = (softmax - onehot) / rows.
  virtual BatchStats SoftmaxCrossEntropy(const float* logits, const uint8_t* labels, int rows,
                                         int classes, float* dlogits) = 0;
  // SGD with momentum and (L2) weight decay, PyTorch's formulation:
  //   v = momentum * v + (g + weight_decay * w);  w -= lr * v
  virtual void SgdStep(float* w, float* v, const float* g, size_t n, float lr, float momentum,
                       float weight_decay) = 0;
  // avg = decay * avg + (1 - decay) * w
  virtual void EmaUpdate(float* avg, const float* w, size_t n, float decay) = 0;
  // x *= s
  virtual void Scale(float* x, size_t n, float s) = 0;
  // x += y
  virtual void Add(float* x, const float* y, size_t n) = 0;
  // dst = IEEE binary16 of src (round to nearest even), and back; dst and src do not overlap.
  virtual void ToHalf(uint16_t* dst, const float* src, size_t n) = 0;
  virtual void FromHalf(float* dst, const uint16_t* src, size_t n) = 0;

  // ---- communication with device buffers ----
  // True when Buffers are device memory the host cannot read (Baton takes them as device
  // buffers, docs/cuda.md).
  virtual bool device_memory() const { return false; }
  // A device stream of its own for Baton's stream-ordered collectives (a cudaStream_t passed as
  // batonStream_t), so that they run beside the math instead of behind it; null for host
  // backends, which use Baton host streams. Work on it is ordered with the math only through
  // the two calls below (and synchronize(), which waits for both streams).
  virtual void* comm_stream() { return nullptr; }
  // What is queued on comm_stream() from now on runs after the math queued so far.
  virtual void CommAfterCompute() {}
  // The math queued from now on runs after what is queued on comm_stream() so far. Device
  // backends also time how long the math would wait here: from the moment the math queued so
  // far is done to the moment comm_stream()'s work is, 0 when that finished first.
  virtual void ComputeAfterComm() {}
  // The seconds of those waits completed since the last call (with wait = true: of all of them,
  // waiting for them). Host backends: 0.
  virtual double CommSeconds(bool /*wait*/) { return 0; }

 private:
  friend class Buffer;
  virtual void Release(float* data) = 0;
};

// The host backend: CBLAS (OpenBLAS) sgemm and plain loops. blas_threads <= 0 leaves OpenBLAS's
// own setting alone.
std::unique_ptr<Backend> MakeCpuBackend(int blas_threads);

// The CUDA backend (cuda_backend.cc) on GPU local_rank % (visible GPUs), cuBLAS loaded at run
// time. Throws TrainError with the reason when there is no usable GPU, no cuBLAS, or (built
// without CUDA: no_cuda_backend.cc) always.
std::unique_ptr<Backend> MakeCudaBackend(int local_rank);
// Whether this build has the CUDA backend (for --help and the tests).
bool cudaBackendBuilt();

}  // namespace trainer
