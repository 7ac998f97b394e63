// An emulated libcublas.so.13 for trainer_cuda_emulated (see emulated_cuda.cc): the entry points
// cuda_backend.cc looks up with dlsym, the sgemm through CBLAS's column-major sgemm after the
// handle's stream (a Baton host stream in the emulation) has run what was queued before it.
#include <baton.h>
#include <cblas.h>
#include <cublas_v2.h>

#include <map>
#include <memory>
#include <mutex>

struct cublasContext {
  cudaStream_t stream = nullptr;
};

namespace {
std::mutex mu;
std::map<cublasHandle_t, std::unique_ptr<cublasContext>> handles;
}  // namespace

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  auto h = std::make_unique<cublasContext>();
  *handle = h.get();
  std::lock_guard<std::mutex> lock(mu);
  handles[*handle] = std::move(h);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  std::lock_guard<std::mutex> lock(mu);
  handles.erase(handle);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasGetStatusString(cublasStatus_t status) {
  return status == CUBLAS_STATUS_SUCCESS ? "CUBLAS_STATUS_SUCCESS" : "emulated cuBLAS failure";
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa,
                              cublasOperation_t transb, int m, int n, int k, const float* alpha,
                              const float* a, int lda, const float* b, int ldb, const float* beta,
                              float* c, int ldc) {
  if (handle->stream != nullptr &&
      batonStreamSynchronize(reinterpret_cast<batonStream_t>(handle->stream)) != batonSuccess) {
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  cblas_sgemm(CblasColMajor, transa == CUBLAS_OP_N ? CblasNoTrans : CblasTrans,
              transb == CUBLAS_OP_N ? CblasNoTrans : CblasTrans, m, n, k, *alpha, a, lda, b, ldb,
              *beta, c, ldc);
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
