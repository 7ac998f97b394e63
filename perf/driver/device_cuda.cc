// -B cuda: the driver's device memory through the CUDA runtime (device.h).
#include <cuda_runtime_api.h>

#include <cstdio>
#include <string>

#include "driver/device.h"

namespace baton_perf {
namespace {

thread_local std::string last_error;

batonResult_t Fail(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return batonSuccess;
  last_error = std::string(what) + ": " + cudaGetErrorName(err) + ": " + cudaGetErrorString(err);
  cudaGetLastError();  // a sticky error stays; a launch error is cleared for the next call
  return batonUnhandledCudaError;
}

cudaStream_t AsCuda(batonStream_t stream) {
  return reinterpret_cast<cudaStream_t>(stream);
}

}  // namespace

bool DeviceBuild() {
  return true;
}

batonResult_t SelectDevice(int local_rank, int* device_out, std::string* description) {
  int count = 0;
  if (batonResult_t r = Fail(cudaGetDeviceCount(&count), "cudaGetDeviceCount"); r != batonSuccess)
    return r;
  if (count == 0) {
    last_error = "cudaGetDeviceCount: no CUDA device is visible";
    return batonUnhandledCudaError;
  }
  const int device = local_rank % count;
  *device_out = device;
  if (batonResult_t r = Fail(cudaSetDevice(device), "cudaSetDevice"); r != batonSuccess) return r;
  cudaDeviceProp prop = {};
  if (batonResult_t r = Fail(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
      r != batonSuccess)
    return r;
  char bus[32];
  std::snprintf(bus, sizeof(bus), "%04x:%02x:%02x.0", prop.pciDomainID, prop.pciBusID,
                prop.pciDeviceID);
  *description = std::string("[") + bus + "] " + prop.name;
  return batonSuccess;
}

batonResult_t DeviceAlloc(size_t bytes, void** out) {
  *out = nullptr;
  void* p = nullptr;
  if (batonResult_t r = Fail(cudaMalloc(&p, bytes), "cudaMalloc"); r != batonSuccess) return r;
  if (batonResult_t r = Fail(cudaMemset(p, 0, bytes), "cudaMemset"); r != batonSuccess) {
    cudaFree(p);
    return r;
  }
  *out = p;
  return batonSuccess;
}

void DeviceFree(void* p) {
  if (p != nullptr) cudaFree(p);
}

batonResult_t CopyToDevice(void* dst, const void* src, size_t bytes) {
  if (batonResult_t r =
          Fail(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy (to device)");
      r != batonSuccess)
    return r;
  // From pageable memory cudaMemcpy may return once the data is staged, before the DMA into the
  // device has ended, and the collective runs on a non-blocking stream that does not wait for
  // the legacy stream: without this, a peer could read the input before it is there.
  return Fail(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

batonResult_t CopyToHost(void* dst, const void* src, size_t bytes) {
  return Fail(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy (to host)");
}

batonResult_t DeviceZero(void* p, size_t bytes) {
  if (batonResult_t r = Fail(cudaMemset(p, 0, bytes), "cudaMemset"); r != batonSuccess) return r;
  return Fail(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

batonResult_t DeviceStreamCreate(batonStream_t* stream) {
  cudaStream_t s = nullptr;
  *stream = nullptr;
  if (batonResult_t r =
          Fail(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
      r != batonSuccess)
    return r;
  *stream = reinterpret_cast<batonStream_t>(s);
  return batonSuccess;
}

batonResult_t DeviceStreamSynchronize(batonStream_t stream) {
  return Fail(cudaStreamSynchronize(AsCuda(stream)), "cudaStreamSynchronize");
}

void DeviceStreamDestroy(batonStream_t stream) {
  if (stream != nullptr) cudaStreamDestroy(AsCuda(stream));
}

std::string LastDeviceError() {
  return last_error;
}

}  // namespace baton_perf
