#include "driver/buffers.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "driver/device.h"

namespace baton_perf {
namespace {

constexpr size_t kAlignment = 4096;

size_t PageRound(size_t bytes) {
  return (std::max<size_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
}

std::byte* HostAlloc(size_t size) {
  auto* p = static_cast<std::byte*>(std::aligned_alloc(kAlignment, size));
  if (p != nullptr) std::memset(p, 0, size);
  return p;
}

}  // namespace

RankBuffers::~RankBuffers() {
  Release();
}

void RankBuffers::Release() {
  const BufferSpace space = space_;
  for (std::byte** p : {&send_, &recv_}) {
    if (*p == nullptr) continue;
    if (space == BufferSpace::kCuda) {
      DeviceFree(*p);
    } else if (space == BufferSpace::kRegistered) {
      batonMemFree(*p);
    } else {
      std::free(*p);
    }
    *p = nullptr;
  }
  std::free(expected_);
  std::free(host_io_);
  expected_ = host_io_ = nullptr;
}

batonResult_t RankBuffers::Allocate(BufferSpace space, size_t bytes, size_t expected_bytes,
                                    batonComm_t comm, std::string* error) {
  Release();
  space_ = space;
  bytes_ = PageRound(bytes);
  for (std::byte** p : {&send_, &recv_}) {
    if (space == BufferSpace::kCuda) {
      void* d = nullptr;
      if (DeviceAlloc(bytes_, &d) != batonSuccess) {
        *error = LastDeviceError();
        return batonUnhandledCudaError;
      }
      *p = static_cast<std::byte*>(d);
    } else if (space == BufferSpace::kRegistered) {
      void* m = nullptr;
      void* handle = nullptr;
      if (batonMemAlloc(&m, bytes_) != batonSuccess) {
        *error = std::string("batonMemAlloc: ") + batonGetLastError(nullptr);
        return batonSystemError;
      }
      *p = static_cast<std::byte*>(m);
      if (batonCommRegister(comm, m, bytes_, &handle) != batonSuccess) {
        *error = std::string("batonCommRegister: ") + batonGetLastError(comm);
        return batonSystemError;
      }
      std::memset(m, 0, bytes_);
    } else if ((*p = HostAlloc(bytes_)) == nullptr) {
      *error = "cannot allocate " + std::to_string(bytes_) + " bytes";
      return batonSystemError;
    }
  }
  if (expected_bytes > 0 && (expected_ = HostAlloc(PageRound(expected_bytes))) == nullptr) {
    *error = "cannot allocate " + std::to_string(expected_bytes) + " bytes";
    return batonSystemError;
  }
  if (space == BufferSpace::kCuda && (host_io_ = HostAlloc(bytes_)) == nullptr) {
    *error = "cannot allocate " + std::to_string(bytes_) + " bytes of host memory";
    return batonSystemError;
  }
  return batonSuccess;
}

batonResult_t RankBuffers::Zero(std::byte* at, size_t bytes, std::string* error) {
  if (space_ != BufferSpace::kCuda) {
    std::memset(at, 0, bytes);
    return batonSuccess;
  }
  if (bytes == 0) return batonSuccess;
  const batonResult_t r = DeviceZero(at, bytes);
  if (r != batonSuccess) *error = LastDeviceError();
  return r;
}

std::byte* RankBuffers::HostView(std::byte* at, size_t bytes) {
  if (space_ != BufferSpace::kCuda) return at;
  std::memset(host_io_, 0, std::min(bytes, bytes_));
  return host_io_;
}

batonResult_t RankBuffers::Store(std::byte* at, size_t bytes, std::string* error) {
  if (space_ != BufferSpace::kCuda || bytes == 0) return batonSuccess;
  const batonResult_t r = CopyToDevice(at, host_io_, bytes);
  if (r != batonSuccess) *error = LastDeviceError();
  return r;
}

batonResult_t RankBuffers::Load(const std::byte* at, size_t bytes, const std::byte** host,
                                std::string* error) {
  *host = at;
  if (space_ != BufferSpace::kCuda || bytes == 0) return batonSuccess;
  *host = host_io_;
  const batonResult_t r = CopyToHost(host_io_, at, bytes);
  if (r != batonSuccess) *error = LastDeviceError();
  return r;
}

}  // namespace baton_perf
