// The device path in a build without CUDA: there is no device, so every call
// takes the host path (see cuda_device.h).
#include "cuda/cuda_device.h"

#include <cstring>

namespace baton {

Status ReadScalarAtCall(const void* ptr, void* out, size_t bytes) {
  memcpy(out, ptr, bytes);
  return Status::Ok();
}

bool CudaDeviceAvailable() {
  return false;
}

std::string CudaCurrentDevicePciBusId() {
  return "";
}

CudaRoute CudaTryLaunch(const std::shared_ptr<Communicator>&, batonStream_t, bool, bool,
                        const CudaCallBuffers&, const StagedBuilder&, const IpcCall*, Status*) {
  return CudaRoute::kHost;
}

Status CudaLaunchGroup(const std::shared_ptr<Communicator>&, batonStream_t,
                       std::vector<StagedPart>) {
  return InternalError("device calls in a build without CUDA");
}

}  // namespace baton
