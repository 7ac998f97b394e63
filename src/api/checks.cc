#include "api/checks.h"

#include <cstdint>
#include <string>

#include "api/handles.h"
#include "base/datatype.h"
#include "cuda/cuda_device.h"

namespace baton {

Status CheckDatatype(batonDataType_t dt) {
  if (static_cast<int>(dt) < 0 || static_cast<int>(dt) >= batonNumTypes)
    return InvalidArgument("invalid datatype " + std::to_string(static_cast<int>(dt)));
  return Status::Ok();
}

Status CheckOp(batonRedOp_t op) {
  if (static_cast<int>(op) < 0 || static_cast<int>(op) >= batonNumOps)
    return InvalidArgument("invalid reduction op " + std::to_string(static_cast<int>(op)));
  return Status::Ok();
}

Status ResolveOp(Communicator& comm, batonRedOp_t op, batonDataType_t dt, bool* premul,
                 PreMulScalar* scalar) {
  *premul = false;
  if (static_cast<int>(op) < batonNumOps) return CheckOp(op);
  BATON_RETURN_IF_ERROR(comm.red_ops().Find(op, scalar));
  if (scalar->datatype != dt)
    return InvalidArgument("reduction op " + std::to_string(static_cast<int>(op)) +
                           " was created for " + DatatypeName(scalar->datatype) +
                           ", not for this call's " + DatatypeName(dt));
  *premul = true;
  return Status::Ok();
}

Status CheckCount(size_t count, batonDataType_t dt, size_t multiplier) {
  const size_t limit = static_cast<size_t>(PTRDIFF_MAX);
  size_t es = DatatypeSize(dt);
  if (multiplier == 0 || count > limit / es / multiplier)
    return InvalidArgument("count " + std::to_string(count) + " of " + DatatypeName(dt) +
                           " overflows the address space");
  return Status::Ok();
}

Status CheckBuffer(const void* p, size_t count, const char* name) {
  if (p == nullptr && count > 0) return InvalidArgument(std::string(name) + " is NULL");
  return Status::Ok();
}

Status CheckRank(int r, int nranks, const char* what) {
  if (r < 0 || r >= nranks)
    return InvalidArgument(std::string(what) + " " + std::to_string(r) + " out of range [0, " +
                           std::to_string(nranks) + ")");
  return Status::Ok();
}

Status BeginCall(batonComm_t handle, batonStream_t stream, CallSite* site) {
  if (handle == nullptr) return InvalidArgument("comm is NULL");
  site->comm = LookupComm(handle);
  if (!site->comm)
    return InvalidArgument("comm is not a live communicator (destroyed, or never created)");
  site->stream = stream;
  site->host_stream = stream != nullptr && StreamIsLive(stream);
  // With a GPU, a foreign handle may be a cudaStream_t: the device path
  // decides (CudaTryLaunch).
  if (stream != nullptr && !site->host_stream && !CudaDeviceAvailable())
    return InvalidArgument(
        "stream is not a live batonStream_t from batonStreamCreate (CUDA streams need a "
        "CUDA build and device buffers)");
  return Status::Ok();
}

}  // namespace baton
