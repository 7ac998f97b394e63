// Argument checks shared by the entry points: every user mistake becomes
// batonInvalidArgument (or batonInvalidUsage) with a message naming it.
#pragma once

#include <baton.h>

#include <cstddef>
#include <memory>

#include "base/status.h"
#include "comm/comm.h"
#include "launch/call.h"

namespace baton {

// The checks every call makes are inline for their passing case, which is
// on the latency path of every call; the messages are built out of line.
[[gnu::cold]] Status DatatypeError(batonDataType_t dt);
[[gnu::cold]] Status OpError(batonRedOp_t op);
Status CheckLargeCount(size_t count, batonDataType_t dt, size_t multiplier);
[[gnu::cold]] Status BufferError(const char* name);
// A PreMulSum op (or a bad op) of ResolveOp.
Status ResolveUserOp(Communicator& comm, batonRedOp_t op, batonDataType_t dt, bool* premul,
                     PreMulScalar* scalar);

inline Status CheckDatatype(batonDataType_t dt) {
  if (static_cast<unsigned>(dt) < static_cast<unsigned>(batonNumTypes)) [[likely]]
    return Status::Ok();
  return DatatypeError(dt);
}
inline Status CheckOp(batonRedOp_t op) {
  if (static_cast<unsigned>(op) < static_cast<unsigned>(batonNumOps)) [[likely]]
    return Status::Ok();
  return OpError(op);
}
// A built-in op, or a PreMulSum op live on comm and made for dt: then
// *premul is set and *scalar filled.
inline Status ResolveOp(Communicator& comm, batonRedOp_t op, batonDataType_t dt, bool* premul,
                        PreMulScalar* scalar) {
  *premul = false;
  if (static_cast<unsigned>(op) < static_cast<unsigned>(batonNumOps)) [[likely]]
    return Status::Ok();
  return ResolveUserOp(comm, op, dt, premul, scalar);
}
// `count` elements of `dt`, times `multiplier` (ranks), must fit in memory
// (dt already checked).
inline Status CheckCount(size_t count, batonDataType_t dt, size_t multiplier = 1) {
  // Counts below 2^32 fit whatever the type and rank count (multiplier is
  // an int's worth at most); the exact test is for the rest.
  if (count < (size_t{1} << 32) && multiplier != 0 && multiplier < (size_t{1} << 20)) [[likely]]
    return Status::Ok();
  return CheckLargeCount(count, dt, multiplier);
}
// A buffer may be NULL only when nothing is read from or written to it.
inline Status CheckBuffer(const void* p, size_t count, const char* name) {
  if (p != nullptr || count == 0) [[likely]]
    return Status::Ok();
  return BufferError(name);
}
Status CheckRank(int r, int nranks, const char* what);

// The blocks of a variable-count collective: counts[r] elements of `dt` at
// displs[r] (elements) for r < nranks, as named in the call (`counts_name`,
// `displs_name`). Neither array may be NULL, no block may end past the
// address space, and (`disjoint`) no two non-empty blocks may overlap. On
// success *extent is the bytes up to the farthest block's end.
Status CheckBlocks(const size_t* counts, const char* counts_name, const size_t* displs,
                   const char* displs_name, int nranks, batonDataType_t dt, bool disjoint,
                   size_t* extent);
// The same for blocks back to back in rank order (no displacements):
// *total is their bytes.
Status CheckPackedBlocks(const size_t* counts, const char* counts_name, int nranks,
                         batonDataType_t dt, size_t* total);
// Two buffers of a call either do not overlap or (where the call has an
// in-place form) `inner` is exactly `in_place_at`: anything else would have
// the call read bytes it is overwriting.
Status CheckOverlap(const void* outer, size_t outer_bytes, const char* outer_name,
                    const void* inner, size_t inner_bytes, const char* inner_name,
                    const void* in_place_at);

// The front half of every communication call: the communicator must be live
// and the stream NULL, a live batonStream_t or (with a GPU) a cudaStream_t.
// On success *site describes where the call was made.
Status BeginCall(batonComm_t handle, batonStream_t stream, CallSite* site);

}  // namespace baton
