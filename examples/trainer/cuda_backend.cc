// The CUDA backend (--device cuda): every Buffer is device memory and every operation is queued
// on one CUDA stream that the backend owns (the compute stream); matrix products are cuBLAS
// sgemm, the rest are the kernels of cuda_kernels.cu. Baton's collectives take the same device
// pointers on a second stream (comm_stream()), ordered with the first by events, so gradient
// allreduces run while backward goes on (docs/trainer.md, "CUDA backend").
//
// cuBLAS is loaded with dlopen when a CUDA backend is made, not linked: baton-train then starts,
// and --device cpu runs, on machines without the CUDA libraries or driver. The CUDA runtime
// itself is libcudart_static (as in libbaton), which reports a missing driver as an error.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "backend.h"
#include "cuda_kernels.h"
#include "gemm_mapping.h"
#include "util.h"

namespace trainer {
namespace {

std::string cudaMessage(cudaError_t err) {
  return std::string(cudaGetErrorString(err)) + " (" + cudaGetErrorName(err) + ")";
}

// what is a C string so that the successful path (every kernel launch) builds no std::string.
void CheckCuda(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  cudaGetLastError();  // a non-sticky error would otherwise be reported again by the next launch
  throw TrainError(std::string(what) + ": " + cudaMessage(err));
}

// The few cuBLAS entry points the backend calls, typed from cublas_v2.h's prototypes.
struct CublasApi {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSgemm_v2) sgemm = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;  // optional (cuBLAS >= 11.4.2)
  std::string library;

  std::string Message(cublasStatus_t status) const {
    std::string code = "cuBLAS status " + std::to_string(static_cast<int>(status));
    return status_string != nullptr ? std::string(status_string(status)) + " (" + code + ")" : code;
  }
  void Check(cublasStatus_t status, const char* what) const {
    if (status != CUBLAS_STATUS_SUCCESS)
      throw TrainError(std::string(what) + ": " + Message(status));
  }
};

CublasApi LoadCublas() {
  // The versioned name first (the ABI this file was compiled against), then whatever the
  // unversioned link points to, then the toolkit's default location when it is not on the
  // loader's path.
  constexpr const char* kNames[] = {"libcublas.so.13", "libcublas.so",
                                    "/usr/local/cuda/lib64/libcublas.so.13"};
  CublasApi api;
  void* handle = nullptr;
  std::string tried;
  for (const char* name : kNames) {
    handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) {
      api.library = name;
      break;
    }
    const char* error = dlerror();
    tried += std::string("; ") + (error != nullptr ? error : name);
  }
  if (handle == nullptr) throw TrainError("cannot load cuBLAS" + tried);
  auto find = [&](auto& fn, const char* symbol, bool required) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle, symbol));
    if (fn == nullptr && required) {
      dlclose(handle);
      throw TrainError(api.library + " has no " + symbol);
    }
  };
  find(api.create, "cublasCreate_v2", true);
  find(api.destroy, "cublasDestroy_v2", true);
  find(api.set_stream, "cublasSetStream_v2", true);
  find(api.sgemm, "cublasSgemm_v2", true);
  find(api.status_string, "cublasGetStatusString", false);
  // The library stays loaded until the process exits: handles may be destroyed late in exit,
  // and unloading cuBLAS while the CUDA runtime still holds its kernels gains nothing.
  return api;
}

// Loaded once per process, at the first CUDA backend (a failed load is retried next time).
const CublasApi& cublasApi() {
  static const CublasApi api = LoadCublas();
  return api;
}

// ---- RAII for CUDA handles and memory ----

struct StreamDestroy {
  void operator()(cudaStream_t s) const { cudaStreamDestroy(s); }
};
using StreamPtr = std::unique_ptr<std::remove_pointer_t<cudaStream_t>, StreamDestroy>;

struct EventDestroy {
  void operator()(cudaEvent_t e) const { cudaEventDestroy(e); }
};
using EventPtr = std::unique_ptr<std::remove_pointer_t<cudaEvent_t>, EventDestroy>;

EventPtr MakeEvent(unsigned flags) {
  cudaEvent_t e = nullptr;
  CheckCuda(cudaEventCreateWithFlags(&e, flags), "cudaEventCreate");
  return EventPtr(e);
}

struct PinnedFree {
  void operator()(void* p) const { cudaFreeHost(p); }
};
using PinnedPtr = std::unique_ptr<void, PinnedFree>;

PinnedPtr AllocatePinned(size_t bytes) {
  void* p = nullptr;
  CheckCuda(cudaMallocHost(&p, bytes), "cudaMallocHost");
  return PinnedPtr(p);
}

// Device memory freed in stream order (cudaFreeAsync) when the device has memory pools, else
// with cudaFree. cudaFree waits for the whole device, and so for a collective still queued on
// the stream; stream-ordered frees never wait, so that unwinding after an error reaches main,
// which aborts the communicator (ending such a collective) before the backend goes.
class DeviceAllocator {
 public:
  DeviceAllocator(cudaStream_t stream, bool pools) : stream_(stream), pools_(pools) {}
  void* Allocate(size_t bytes) const {
    void* p = nullptr;
    CheckCuda(pools_ ? cudaMallocAsync(&p, bytes, stream_) : cudaMalloc(&p, bytes),
              pools_ ? "cudaMallocAsync" : "cudaMalloc");
    return p;
  }
  void Release(void* p) const noexcept {
    if (p != nullptr) (void)(pools_ ? cudaFreeAsync(p, stream_) : cudaFree(p));
  }

 private:
  cudaStream_t stream_;
  bool pools_;
};

// Device scratch that grows on demand (labels, per-row results).
class DeviceScratch {
 public:
  explicit DeviceScratch(const DeviceAllocator& allocator) : allocator_(allocator) {}
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;
  ~DeviceScratch() { allocator_.Release(data_); }
  void* Reserve(size_t bytes) {
    if (bytes > capacity_) {
      void* p = allocator_.Allocate(bytes);
      allocator_.Release(data_);  // in stream order: after the work queued on the old memory
      data_ = p;
      capacity_ = bytes;
    }
    return data_;
  }

 private:
  const DeviceAllocator& allocator_;
  void* data_ = nullptr;
  size_t capacity_ = 0;
};

// Host-to-device copies through pinned memory. cudaMemcpyAsync from pageable memory is
// synchronous or staged depending on the driver and system (with HMM the GPU may read pageable
// memory later); copying into pinned memory first frees the caller's buffer at once everywhere
// (the trainer refills its batch buffer right away) and keeps the transfer itself asynchronous.
// One pinned buffer, reused once the previous transfer out of it completed.
class UploadStaging {
 public:
  void Upload(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
    if (bytes == 0) return;
    std::lock_guard<std::mutex> lock(mu_);  // the asynchronous parameter server's threads
    if (!done_) done_ = MakeEvent(cudaEventDisableTiming);
    CheckCuda(cudaEventSynchronize(done_.get()), "cudaEventSynchronize (upload staging)");
    if (bytes > capacity_) {
      memory_.reset();
      memory_ = AllocatePinned(bytes);
      capacity_ = bytes;
    }
    std::memcpy(memory_.get(), src, bytes);
    CheckCuda(cudaMemcpyAsync(dst, memory_.get(), bytes, cudaMemcpyHostToDevice, stream),
              "cudaMemcpyAsync (host to device)");
    CheckCuda(cudaEventRecord(done_.get(), stream), "cudaEventRecord (upload staging)");
  }

 private:
  std::mutex mu_;
  PinnedPtr memory_;
  size_t capacity_ = 0;
  EventPtr done_;  // recorded after the last transfer out of memory_
};

struct CublasDestroy {
  const CublasApi* api = nullptr;
  void operator()(cublasHandle_t h) const {
    if (api != nullptr) api->destroy(h);
  }
};

// A pair of timing events for one ComputeAfterComm(): start on the compute stream (the math
// queued before it is done), stop on the communication stream (its work is done).
struct Timer {
  EventPtr start;
  EventPtr stop;
};

StreamPtr MakeStream() {
  // Blocking streams (not cudaStreamNonBlocking): Baton's synchronous device path copies on the
  // legacy default stream, which then also waits for the work queued on these.
  cudaStream_t stream = nullptr;
  CheckCuda(cudaStreamCreate(&stream), "cudaStreamCreate");
  return StreamPtr(stream);
}

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, int device_count, const CublasApi& blas) : device_(device), blas_(blas) {
    Bind();
    cudaDeviceProp prop{};
    CheckCuda(cudaGetDeviceProperties(&prop, device_), "cudaGetDeviceProperties");
    int pools = 0;
    CheckCuda(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device_),
              "cudaDeviceGetAttribute");
    stream_ = MakeStream();
    comm_stream_ = MakeStream();
    compute_done_ = MakeEvent(cudaEventDisableTiming);
    allocator_ = std::make_unique<DeviceAllocator>(stream_.get(), pools != 0);
    cublasHandle_t handle = nullptr;
    blas_.Check(blas_.create(&handle), "cublasCreate");
    handle_.get_deleter().api = &blas_;
    handle_.reset(handle);
    blas_.Check(blas_.set_stream(handle_.get(), stream_.get()), "cublasSetStream");
    labels_ = std::make_unique<DeviceScratch>(*allocator_);
    rows_ = std::make_unique<DeviceScratch>(*allocator_);
    stats_ = std::make_unique<DeviceScratch>(*allocator_);
    stats_->Reserve(2 * sizeof(double));
    stats_host_ = AllocatePinned(2 * sizeof(double));
    description_ = "cuda (" + std::string(prop.name) + ", GPU " + std::to_string(device_) + " of " +
                   std::to_string(device_count) + ", sm_" + std::to_string(prop.major) +
                   std::to_string(prop.minor) + ", " + blas_.library + ")";
  }

  ~CudaBackend() override {
    // Work still queued reads the scratch freed below; wait for it (errors were reported, or
    // are being, by whoever queued it).
    cudaSetDevice(device_);
    if (comm_stream_) cudaStreamSynchronize(comm_stream_.get());
    if (stream_) cudaStreamSynchronize(stream_.get());
  }

  std::string name() const override { return description_; }

  Buffer Allocate(size_t n) override {
    Bind();
    size_t bytes = std::max<size_t>(n, 1) * sizeof(float);
    void* p = allocator_->Allocate(bytes);
    if (cudaError_t err = cudaMemsetAsync(p, 0, bytes, stream_.get()); err != cudaSuccess) {
      allocator_->Release(p);
      CheckCuda(err, "cudaMemsetAsync");
    }
    return Buffer(this, static_cast<float*>(p), n);
  }

  void Upload(float* dst, const float* host, size_t n) override {
    Bind();
    staging_.Upload(dst, host, n * sizeof(float), stream_.get());
  }

  void Download(float* host, const float* src, size_t n) override {
    if (n == 0) return;
    Bind();
    CheckCuda(cudaMemcpyAsync(host, src, n * sizeof(float), cudaMemcpyDeviceToHost, stream_.get()),
              "cudaMemcpyAsync (device to host)");
    WaitForCompute();
  }

  void Copy(float* dst, const float* src, size_t n) override {
    if (dst == src || n == 0) return;
    Bind();
    CheckCuda(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, stream_.get()),
              "cudaMemcpyAsync (device to device)");
  }

  void Synchronize() override {
    Bind();
    CheckCuda(cudaStreamSynchronize(comm_stream_.get()),
              "cudaStreamSynchronize (communication stream)");
    WaitForCompute();
  }

  void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
            const float* b, float beta, float* c) override {
    Bind();
    const ColumnMajorGemm g = ToColumnMajor(trans_a, trans_b, m, n, k, a, b);
    blas_.Check(blas_.sgemm(handle_.get(), g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                            g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, g.m, g.n, g.k, &alpha, g.a,
                            g.lda, g.b, g.ldb, &beta, c, g.ldc),
                "cublasSgemm");
  }

  void AddBias(float* y, const float* bias, int rows, int cols, bool relu) override {
    Bind();
    CheckCuda(cuda::AddBias(y, bias, rows, cols, relu, stream_.get()), "bias kernel launch");
  }

  void ColumnSums(const float* m, int rows, int cols, float* out) override {
    Bind();
    CheckCuda(cuda::ColumnSums(m, rows, cols, out, stream_.get()), "column sums kernel launch");
  }

  void ReluBackward(float* delta, const float* activation, size_t n) override {
    Bind();
    CheckCuda(cuda::ReluBackward(delta, activation, n, stream_.get()),
              "ReLU backward kernel launch");
  }

  // The labels go up with the batch, the loss and correct count are reduced on the device, and
  // two doubles come back: this is the one point per step where the host waits for the device.
  BatchStats SoftmaxCrossEntropy(const float* logits, const uint8_t* labels, int rows, int classes,
                                 float* dlogits) override {
    Bind();
    size_t count = static_cast<size_t>(std::max(rows, 0));
    auto* device_labels = static_cast<uint8_t*>(labels_->Reserve(std::max<size_t>(count, 1)));
    label_staging_.Upload(device_labels, labels, count, stream_.get());
    // Per-row scratch: the losses (doubles) first, then the correct flags (ints).
    auto* row_loss = static_cast<double*>(rows_->Reserve(std::max<size_t>(count, 1) * 16));
    auto* row_correct = reinterpret_cast<int*>(row_loss + count);
    auto* stats = static_cast<double*>(stats_->Reserve(2 * sizeof(double)));
    CheckCuda(cuda::SoftmaxCrossEntropy(logits, device_labels, rows, classes, dlogits, row_loss,
                                        row_correct, stats, stream_.get()),
              "softmax cross-entropy kernel launch");
    CheckCuda(cudaMemcpyAsync(stats_host_.get(), stats, 2 * sizeof(double), cudaMemcpyDeviceToHost,
                              stream_.get()),
              "cudaMemcpyAsync (loss to host)");
    WaitForCompute();
    const auto* sums = static_cast<const double*>(stats_host_.get());
    BatchStats result;
    result.loss_sum = sums[0];
    result.correct = sums[1];
    result.samples = rows;
    return result;
  }

  void SgdStep(float* w, float* v, const float* g, size_t n, float lr, float momentum,
               float weight_decay) override {
    Bind();
    CheckCuda(cuda::SgdStep(w, v, g, n, lr, momentum, weight_decay, stream_.get()),
              "SGD kernel launch");
  }

  void EmaUpdate(float* avg, const float* w, size_t n, float decay) override {
    Bind();
    CheckCuda(cuda::EmaUpdate(avg, w, n, decay, stream_.get()), "EMA kernel launch");
  }

  void Scale(float* x, size_t n, float s) override {
    Bind();
    CheckCuda(cuda::Scale(x, n, s, stream_.get()), "scale kernel launch");
  }

  void Add(float* x, const float* y, size_t n) override {
    Bind();
    CheckCuda(cuda::Add(x, y, n, stream_.get()), "add kernel launch");
  }

  void ToHalf(uint16_t* dst, const float* src, size_t n) override {
    Bind();
    CheckCuda(cuda::ToHalf(dst, src, n, stream_.get()), "fp16 conversion kernel launch");
  }

  void FromHalf(float* dst, const uint16_t* src, size_t n) override {
    Bind();
    CheckCuda(cuda::FromHalf(dst, src, n, stream_.get()), "fp16 conversion kernel launch");
  }

  bool device_memory() const override { return true; }
  void* comm_stream() override { return comm_stream_.get(); }

  void CommAfterCompute() override {
    Bind();
    CheckCuda(cudaEventRecord(compute_done_.get(), stream_.get()), "cudaEventRecord");
    CheckCuda(cudaStreamWaitEvent(comm_stream_.get(), compute_done_.get(), 0),
              "cudaStreamWaitEvent (communication after compute)");
  }

  void ComputeAfterComm() override {
    Bind();
    if (idle_timers_.empty()) {
      idle_timers_.push_back({MakeEvent(cudaEventDefault), MakeEvent(cudaEventDefault)});
    }
    Timer t = std::move(idle_timers_.back());
    idle_timers_.pop_back();
    CheckCuda(cudaEventRecord(t.start.get(), stream_.get()), "cudaEventRecord");
    CheckCuda(cudaEventRecord(t.stop.get(), comm_stream_.get()), "cudaEventRecord");
    CheckCuda(cudaStreamWaitEvent(stream_.get(), t.stop.get(), 0),
              "cudaStreamWaitEvent (compute after communication)");
    running_timers_.push_back(std::move(t));
  }

  double CommSeconds(bool wait) override {
    Bind();
    double seconds = 0;
    while (!running_timers_.empty()) {
      Timer& t = running_timers_.front();
      if (wait) {
        CheckCuda(cudaEventSynchronize(t.stop.get()), "cudaEventSynchronize");
      } else if (cudaError_t err = cudaEventQuery(t.stop.get()); err == cudaErrorNotReady) {
        cudaGetLastError();  // "not ready" is no error, but the runtime records it as the last one
        break;
      } else {
        CheckCuda(err, "cudaEventQuery");
      }
      // Negative when the communication finished before the math reached the wait: no wait.
      float ms = 0;
      CheckCuda(cudaEventElapsedTime(&ms, t.start.get(), t.stop.get()), "cudaEventElapsedTime");
      seconds += 1e-3 * std::max(ms, 0.0f);
      idle_timers_.push_back(std::move(t));
      running_timers_.pop_front();
    }
    return seconds;
  }

 private:
  // A copy to the host on the compute stream needs only that stream: whatever the
  // communication stream computed is joined to it (ComputeAfterComm) before anything reads it.
  void WaitForCompute() {
    CheckCuda(cudaStreamSynchronize(stream_.get()), "cudaStreamSynchronize");
  }

  // The current device is per thread, and the asynchronous parameter server calls the backend
  // from threads of its own: every entry point makes this backend's GPU current first (a
  // thread-local check, so the usual case costs no CUDA call).
  void Bind() {
    thread_local int bound = -1;
    if (bound != device_) {
      CheckCuda(cudaSetDevice(device_), "cudaSetDevice");
      bound = device_;
    }
  }

  void Release(float* data) override {
    cudaSetDevice(device_);  // never throws: Buffers free themselves in destructors
    allocator_->Release(data);
  }

  int device_;
  const CublasApi& blas_;
  std::string description_;
  // Declared first so that they are destroyed last: everything below queues work on them.
  StreamPtr stream_;       // the math
  StreamPtr comm_stream_;  // Baton's collectives on the gradients (comm_stream())
  EventPtr compute_done_;  // CommAfterCompute()'s record on stream_
  std::unique_ptr<DeviceAllocator> allocator_;
  std::unique_ptr<std::remove_pointer_t<cublasHandle_t>, CublasDestroy> handle_;
  std::unique_ptr<DeviceScratch> labels_;
  std::unique_ptr<DeviceScratch> rows_;
  std::unique_ptr<DeviceScratch> stats_;
  PinnedPtr stats_host_;
  UploadStaging staging_;
  UploadStaging label_staging_;
  std::vector<Timer> idle_timers_;
  std::deque<Timer> running_timers_;  // recorded, oldest first
};

}  // namespace

std::unique_ptr<Backend> MakeCudaBackend(int local_rank) {
  // BATON_CUDA=0 turns Baton's device path off: it would then read device pointers as host
  // memory (parsed as Baton parses it: a whole integer, any base).
  if (const char* v = std::getenv("BATON_CUDA"); v != nullptr && v[0] != '\0') {
    char* end = nullptr;
    if (std::strtoll(v, &end, 0) == 0 && *end == '\0') {
      throw TrainError("--device cuda: BATON_CUDA=" + std::string(v) +
                       " turns off Baton's CUDA device buffers, which --device cuda hands it");
    }
  }
  int count = 0;
  if (cudaError_t err = cudaGetDeviceCount(&count); err != cudaSuccess) {
    cudaGetLastError();
    throw TrainError("--device cuda: no CUDA device: cudaGetDeviceCount: " + cudaMessage(err));
  }
  if (count <= 0) throw TrainError("--device cuda: no CUDA device: cudaGetDeviceCount found none");
  const int device = std::max(local_rank, 0) % count;
  try {
    return std::make_unique<CudaBackend>(device, count, cublasApi());
  } catch (const TrainError& e) {
    throw TrainError("--device cuda (GPU " + std::to_string(device) + "): " + e.what());
  }
}

bool cudaBackendBuilt() {
  return true;
}

}  // namespace trainer
