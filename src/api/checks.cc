#include "api/checks.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "api/handles.h"
#include "base/datatype.h"
#include "cuda/cuda_device.h"

namespace baton {

Status DatatypeError(batonDataType_t dt) {
  return InvalidArgument("invalid datatype " + std::to_string(static_cast<int>(dt)));
}

Status OpError(batonRedOp_t op) {
  return InvalidArgument("invalid reduction op " + std::to_string(static_cast<int>(op)));
}

Status ResolveUserOp(Communicator& comm, batonRedOp_t op, batonDataType_t dt, bool* premul,
                     PreMulScalar* scalar) {
  *premul = false;
  if (static_cast<int>(op) < batonNumOps) return OpError(op);  // negative
  BATON_RETURN_IF_ERROR(comm.red_ops().Find(op, scalar));
  if (scalar->datatype != dt)
    return InvalidArgument("reduction op " + std::to_string(static_cast<int>(op)) +
                           " was created for " + DatatypeName(scalar->datatype) +
                           ", not for this call's " + DatatypeName(dt));
  *premul = true;
  return Status::Ok();
}

Status CheckLargeCount(size_t count, batonDataType_t dt, size_t multiplier) {
  const size_t limit = static_cast<size_t>(PTRDIFF_MAX);
  size_t es = DatatypeSize(dt);
  if (multiplier == 0 || count > limit / es / multiplier)
    return InvalidArgument("count " + std::to_string(count) + " of " + DatatypeName(dt) +
                           " overflows the address space");
  return Status::Ok();
}

Status BufferError(const char* name) {
  return InvalidArgument(std::string(name) + " is NULL");
}

Status CheckRank(int r, int nranks, const char* what) {
  if (r < 0 || r >= nranks)
    return InvalidArgument(std::string(what) + " " + std::to_string(r) + " out of range [0, " +
                           std::to_string(nranks) + ")");
  return Status::Ok();
}

Status CheckBlocks(const size_t* counts, const char* counts_name, const size_t* displs,
                   const char* displs_name, int nranks, batonDataType_t dt, bool disjoint,
                   size_t* extent) {
  if (counts == nullptr) return InvalidArgument(std::string(counts_name) + " is NULL");
  if (displs == nullptr) return InvalidArgument(std::string(displs_name) + " is NULL");
  const size_t limit = static_cast<size_t>(PTRDIFF_MAX) / DatatypeSize(dt);
  size_t end = 0;
  std::vector<int> used;  // ranks with a non-empty block
  for (int r = 0; r < nranks; ++r) {
    if (counts[r] == 0) continue;
    if (counts[r] > limit || displs[r] > limit - counts[r])
      return InvalidArgument(std::string(displs_name) + "[" + std::to_string(r) + "] + " +
                             counts_name + "[" + std::to_string(r) + "] = " +
                             std::to_string(displs[r]) + " + " + std::to_string(counts[r]) +
                             " elements of " + DatatypeName(dt) + " overflows the address space");
    end = std::max(end, displs[r] + counts[r]);
    used.push_back(r);
  }
  *extent = end * DatatypeSize(dt);
  if (!disjoint) return Status::Ok();
  std::sort(used.begin(), used.end(), [&](int x, int y) { return displs[x] < displs[y]; });
  for (size_t i = 1; i < used.size(); ++i) {
    const int x = used[i - 1], y = used[i];
    if (displs[x] + counts[x] <= displs[y]) continue;
    auto range = [&](int r) {
      return "rank " + std::to_string(r) + "'s [" + std::to_string(displs[r]) + ", " +
             std::to_string(displs[r] + counts[r]) + ")";
    };
    return InvalidArgument(std::string("the blocks of ") + counts_name + " at " + displs_name +
                           " overlap: " + range(x) + " and " + range(y));
  }
  return Status::Ok();
}

Status CheckPackedBlocks(const size_t* counts, const char* counts_name, int nranks,
                         batonDataType_t dt, size_t* total) {
  if (counts == nullptr) return InvalidArgument(std::string(counts_name) + " is NULL");
  const size_t limit = static_cast<size_t>(PTRDIFF_MAX) / DatatypeSize(dt);
  size_t sum = 0;
  for (int r = 0; r < nranks; ++r) {
    if (counts[r] > limit - sum)
      return InvalidArgument("the sum of " + std::string(counts_name) + " (" +
                             std::to_string(counts[r]) + " at rank " + std::to_string(r) +
                             ") overflows the address space for " + DatatypeName(dt));
    sum += counts[r];
  }
  *total = sum * DatatypeSize(dt);
  return Status::Ok();
}

Status CheckOverlap(const void* outer, size_t outer_bytes, const char* outer_name,
                    const void* inner, size_t inner_bytes, const char* inner_name,
                    const void* in_place_at) {
  if (outer_bytes == 0 || inner_bytes == 0 || inner == in_place_at) return Status::Ok();
  const auto o = reinterpret_cast<uintptr_t>(outer), i = reinterpret_cast<uintptr_t>(inner);
  if (i + inner_bytes <= o || o + outer_bytes <= i) return Status::Ok();
  return InvalidArgument(std::string(inner_name) + " overlaps " + outer_name +
                         (in_place_at != nullptr
                              ? " but is not where the in-place form puts it"
                              : " (the call has no in-place form for these arguments)"));
}

Status BeginCall(batonComm_t handle, batonStream_t stream, CallSite* site) {
  if (handle == nullptr) return InvalidArgument("comm is NULL");
  if (!LookupReadyComm(handle, &site->comm)) [[unlikely]] {
    // Not live, or a creation: collected now if it is over, else why not.
    const CommLookup lookup = LookupCommState(handle);
    site->comm = lookup.comm;
    if (!site->comm) return NotLiveError(lookup);
  }
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
