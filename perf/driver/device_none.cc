// -B cuda in a build without CUDA: every call fails and says why.
#include "driver/device.h"

namespace baton_perf {
namespace {

batonResult_t NoCuda() {
  return batonInvalidUsage;
}

}  // namespace

bool DeviceBuild() {
  return false;
}
batonResult_t SelectDevice(int, int*, std::string*) {
  return NoCuda();
}
batonResult_t DeviceAlloc(size_t, void** out) {
  *out = nullptr;
  return NoCuda();
}
void DeviceFree(void*) {}
batonResult_t CopyToDevice(void*, const void*, size_t) {
  return NoCuda();
}
batonResult_t CopyToHost(void*, const void*, size_t) {
  return NoCuda();
}
batonResult_t DeviceZero(void*, size_t) {
  return NoCuda();
}
batonResult_t DeviceStreamCreate(batonStream_t* stream) {
  *stream = nullptr;
  return NoCuda();
}
batonResult_t DeviceStreamSynchronize(batonStream_t) {
  return NoCuda();
}
void DeviceStreamDestroy(batonStream_t) {}
std::string LastDeviceError() {
  return "this Baton was built without CUDA (meson setup -Dcuda=enabled needs nvcc)";
}

}  // namespace baton_perf
