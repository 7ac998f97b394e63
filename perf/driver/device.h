// Device memory for the perf driver's -B cuda: the measured buffers in CUDA device memory and
// the calls on a cudaStream_t, as nccl-tests runs NCCL. The driver fills and checks through
// host copies; Baton sees only device pointers and the CUDA stream.
//
// Built from device_cuda.cc when Baton is built with CUDA, else from device_none.cc, whose
// functions all fail with "built without CUDA". Every function returns batonSuccess or an error
// whose text LastDeviceError() gives.
#pragma once

#include <cstddef>
#include <string>

#include "baton.h"

namespace baton_perf {

// Whether this build can use device memory at all (false: device_none.cc).
bool DeviceBuild();

// Makes GPU `local_rank` modulo the number of visible GPUs current for this thread; *device is its
// index and *description says what it is, as nccl-tests' "Using devices" lines do:
// "[0000:19:00.0] NVIDIA H100 80GB HBM3".
batonResult_t SelectDevice(int local_rank, int* device, std::string* description);

// cudaMalloc'd memory, zeroed; *out is null on failure.
batonResult_t DeviceAlloc(size_t bytes, void** out);
void DeviceFree(void* p);
// Copies between host and device memory and cudaMemset(p, 0, bytes), each complete on the device
// when it returns.
batonResult_t CopyToDevice(void* dst, const void* src, size_t bytes);
batonResult_t CopyToHost(void* dst, const void* src, size_t bytes);
batonResult_t DeviceZero(void* p, size_t bytes);

// A non-blocking cudaStream_t, passed to Baton as its batonStream_t.
batonResult_t DeviceStreamCreate(batonStream_t* stream);
batonResult_t DeviceStreamSynchronize(batonStream_t stream);
void DeviceStreamDestroy(batonStream_t stream);

// What the last failing call of this thread said.
std::string LastDeviceError();

}  // namespace baton_perf
