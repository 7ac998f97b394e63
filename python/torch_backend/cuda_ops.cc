// The torch backend's calls on CUDA tensors: Baton's device-buffer support
// (docs/cuda.md) takes a cudaStream_t as the call's batonStream_t.
#include "backend.h"
#include "tensors.h"

#ifdef BATON_TORCH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace baton_torch {

#ifdef BATON_TORCH_CUDA
extern const bool kCudaTensors = true;
#else
extern const bool kCudaTensors = false;
#endif

c10::intrusive_ptr<c10d::Work> BatonBackend::LaunchOnStream(
    c10d::OpType type, std::vector<at::Tensor> outputs, const at::Tensor& like,
    const std::function<void(batonStream_t)>& job) {
#ifdef BATON_TORCH_CUDA
  collectives_.fetch_add(1, std::memory_order_relaxed);
  runner_->Drain();
  c10::cuda::CUDAGuard guard(like.device());
  c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream(like.device().index());
  auto work = c10::make_intrusive<BatonWork>(getRank(), type, std::move(outputs),
                                             std::vector<c10::Device>{like.device()});
  std::exception_ptr error;
  try {
    job(reinterpret_cast<batonStream_t>(stream.stream()));
  } catch (const std::exception& e) {
    error = BackendError(e.what());
  }
  work->Complete(error);  // a CUDA future: events recorded on the current stream
  return work;
#else
  (void)outputs;
  (void)job;
  TORCH_CHECK(false, "baton backend: ", c10d::opTypeToString(type), " on ", like.device(),
              ": this backend was built without CUDA");
#endif
}

}  // namespace baton_torch
