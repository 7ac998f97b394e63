// MakeCudaBackend in builds without CUDA (no nvcc, or -Dcuda=disabled): --device cuda says so.
#include "backend.h"
#include "util.h"

namespace trainer {

std::unique_ptr<Backend> MakeCudaBackend(int /*local_rank*/) {
  throw TrainError(
      "--device cuda: this baton-train was built without CUDA support (configure Baton with "
      "-Dcuda=enabled on a machine with the CUDA toolkit)");
}

bool cudaBackendBuilt() {
  return false;
}

}  // namespace trainer
