// An emulated CUDA device for testing the CUDA backend's host-side logic without a GPU
// (meson test trainer_cuda_emulated, docs/trainer.md). cuda_backend.cc is linked against this
// file instead of libcudart_static and cuda_kernels.cu: "device" memory is host memory, a
// stream is a Baton host stream, and every stream operation first waits for its stream (so it
// runs after the collectives queued on it, as on a device) and then runs at once. The kernels'
// launchers run the same elementwise.h functions on the host.
//
// What this checks: the backend's memory handling (staging, scratch, zeroing), the order of its
// operations, the gemm argument mapping as cuBLAS receives it (emulated_cublas.cc), and the
// trainer's device paths (stream-ordered bucket allreduce, fp16 through the backend, parameter
// server staging, local SGD, checkpoints), all against the CPU backend bit for bit. What it
// cannot check: the kernels as nvcc compiles them, real asynchrony, and Baton's device path.
#include <baton.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>

#include "cuda_kernels.h"
#include "elementwise.h"

namespace {

std::mutex mu;
std::set<cudaStream_t> streams;

struct Event {
  double seconds = 0;
};
std::map<cudaEvent_t, std::unique_ptr<Event>> events;

int DeviceCount() {
  const char* v = std::getenv("EMULATED_GPUS");
  return v != nullptr ? std::atoi(v) : 1;
}

// Stream order: wait for what is queued on s (all streams for the legacy default stream).
cudaError_t Order(cudaStream_t s) {
  std::set<cudaStream_t> wait;
  if (s != nullptr) {
    wait.insert(s);
  } else {
    std::lock_guard<std::mutex> lock(mu);
    wait = streams;
  }
  for (cudaStream_t x : wait) {
    if (batonStreamSynchronize(reinterpret_cast<batonStream_t>(x)) != batonSuccess) {
      return cudaErrorLaunchFailure;
    }
  }
  return cudaSuccess;
}

void* HostAllocate(size_t bytes) {
  void* p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  if (p != nullptr) std::memset(p, 0xab, bytes);  // garbage, as cudaMalloc gives
  return p;
}

}  // namespace

extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
  *count = DeviceCount();
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  return device >= 0 && device < DeviceCount() ? cudaSuccess : cudaErrorInvalidDevice;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int /*device*/) {
  std::memset(prop, 0, sizeof *prop);
  std::snprintf(prop->name, sizeof prop->name, "emulated GPU");
  prop->major = 9;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr /*attr*/, int /*device*/) {
  // Memory pools unless EMULATED_POOLS=0, to test both allocation paths.
  const char* v = std::getenv("EMULATED_POOLS");
  *value = v != nullptr ? std::atoi(v) : 1;
  return cudaSuccess;
}
const char* cudaGetErrorString(cudaError_t err) {
  return err == cudaSuccess ? "no error" : "emulated failure";
}
const char* cudaGetErrorName(cudaError_t err) {
  return err == cudaSuccess ? "cudaSuccess" : "cudaErrorEmulated";
}
cudaError_t cudaGetLastError() {
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  batonStream_t s = nullptr;
  if (batonStreamCreate(&s) != batonSuccess) return cudaErrorMemoryAllocation;
  *stream = reinterpret_cast<cudaStream_t>(s);
  std::lock_guard<std::mutex> lock(mu);
  streams.insert(*stream);
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  {
    std::lock_guard<std::mutex> lock(mu);
    streams.erase(stream);
  }
  batonStreamDestroy(reinterpret_cast<batonStream_t>(stream));
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  return Order(stream);
}

cudaError_t cudaMalloc(void** p, size_t bytes) {
  *p = HostAllocate(bytes);
  return *p != nullptr ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaMallocAsync(void** p, size_t bytes, cudaStream_t stream) {
  if (cudaError_t err = Order(stream); err != cudaSuccess) return err;
  return cudaMalloc(p, bytes);
}
cudaError_t cudaFree(void* p) {
  Order(nullptr);
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaFreeAsync(void* p, cudaStream_t stream) {
  Order(stream);
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaMallocHost(void** p, size_t bytes) {
  return cudaMalloc(p, bytes);
}
cudaError_t cudaFreeHost(void* p) {
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind /*kind*/,
                            cudaStream_t stream) {
  if (cudaError_t err = Order(stream); err != cudaSuccess) return err;
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream) {
  if (cudaError_t err = Order(stream); err != cudaSuccess) return err;
  std::memset(dst, value, bytes);
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int /*flags*/) {
  auto e = std::make_unique<Event>();
  *event = reinterpret_cast<cudaEvent_t>(e.get());
  std::lock_guard<std::mutex> lock(mu);
  events[*event] = std::move(e);
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  std::lock_guard<std::mutex> lock(mu);
  events.erase(event);
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (cudaError_t err = Order(stream); err != cudaSuccess) return err;
  reinterpret_cast<Event*>(event)->seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t /*stream*/, cudaEvent_t /*event*/,
                                unsigned int /*flags*/) {
  return cudaSuccess;  // cudaEventRecord already waited for what the event follows
}
cudaError_t cudaEventSynchronize(cudaEvent_t /*event*/) {
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t /*event*/) {
  return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  *ms = static_cast<float>(
      1e3 * (reinterpret_cast<Event*>(end)->seconds - reinterpret_cast<Event*>(start)->seconds));
  return cudaSuccess;
}

}  // extern "C"

// cuda_kernels.h's launchers, on the host.
namespace trainer::cuda {

cudaError_t AddBias(float* y, const float* bias, int rows, int cols, bool relu,
                    cudaStream_t stream) {
  if (cudaError_t err = Order(stream); err != cudaSuccess) return err;
  for (size_t i = 0; i < static_cast<size_t>(rows) * cols; ++i) {
    y[i] = BiasRelu(y[i], bias[i % static_cast<size_t>(cols)], relu);
  }
  return cudaSuccess;
}

cudaError_t ColumnSums(const float* m, int rows, int cols, float* out, cudaStream_t stream) {
  if (cudaError_t err = Order(stream); err != cudaSuccess) return err;
  for (int c = 0; c < cols; ++c) {
    float s = 0.0f;
    for (int r = 0; r < rows; ++r) s = AddRn(s, m[static_cast<size_t>(r) * cols + c]);
    out[c] = s;
  }
  return cudaSuccess;
}

cudaError_t ReluBackward(float* delta, const float* activation, size_t n, cudaStream_t stream) {
  if (cudaError_t err = Order(stream); err != cudaSuccess) return err;
  for (size_t i = 0; i < n; ++i) delta[i] = ReluGrad(delta[i], activation[i]);
  return cudaSuccess;
}

cudaError_t SoftmaxCrossEntropy(const float* logits, const uint8_t* labels, int rows, int classes,
                                float* dlogits, double* row_loss, int* row_correct, double* stats,
                                cudaStream_t stream) {
  if (cudaError_t err = Order(stream); err != cudaSuccess) return err;
  double loss = 0;
  double correct = 0;
  for (int r = 0; r < rows; ++r) {
    size_t offset = static_cast<size_t>(r) * classes;
    RowLoss row = SoftmaxCrossEntropyRow(logits + offset, classes, labels[r],
                                         dlogits != nullptr ? dlogits + offset : nullptr, rows);
    row_loss[r] = row.loss;
    row_correct[r] = row.correct ? 1 : 0;
    loss += row_loss[r];
    correct += row_correct[r];
  }
  stats[0] = loss;
  stats[1] = correct;
  return cudaSuccess;
}

cudaError_t SgdStep(float* w, float* v, const float* g, size_t n, float lr, float momentum,
                    float weight_decay, cudaStream_t stream) {
  if (cudaError_t err = Order(stream); err != cudaSuccess) return err;
  for (size_t i = 0; i < n; ++i) SgdUpdate(w[i], v[i], g[i], lr, momentum, weight_decay);
  return cudaSuccess;
}

cudaError_t EmaUpdate(float* avg, const float* w, size_t n, float decay, cudaStream_t stream) {
  if (cudaError_t err = Order(stream); err != cudaSuccess) return err;
  for (size_t i = 0; i < n; ++i) avg[i] = EmaValue(avg[i], w[i], decay);
  return cudaSuccess;
}

cudaError_t Scale(float* x, size_t n, float s, cudaStream_t stream) {
  if (cudaError_t err = Order(stream); err != cudaSuccess) return err;
  for (size_t i = 0; i < n; ++i) x[i] = ScaleValue(x[i], s);
  return cudaSuccess;
}

cudaError_t Add(float* x, const float* y, size_t n, cudaStream_t stream) {
  if (cudaError_t err = Order(stream); err != cudaSuccess) return err;
  for (size_t i = 0; i < n; ++i) x[i] = SumValue(x[i], y[i]);
  return cudaSuccess;
}

cudaError_t ToHalf(uint16_t* dst, const float* src, size_t n, cudaStream_t stream) {
  if (cudaError_t err = Order(stream); err != cudaSuccess) return err;
  for (size_t i = 0; i < n; ++i) dst[i] = FloatToHalf(src[i]);
  return cudaSuccess;
}

cudaError_t FromHalf(float* dst, const uint16_t* src, size_t n, cudaStream_t stream) {
  if (cudaError_t err = Order(stream); err != cudaSuccess) return err;
  for (size_t i = 0; i < n; ++i) dst[i] = HalfToFloat(src[i]);
  return cudaSuccess;
}

}  // namespace trainer::cuda
