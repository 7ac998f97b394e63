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

Status CheckDatatype(batonDataType_t dt);
Status CheckOp(batonRedOp_t op);
// A built-in op, or a PreMulSum op live on comm and made for dt: then
// *premul is set and *scalar filled.
Status ResolveOp(Communicator& comm, batonRedOp_t op, batonDataType_t dt, bool* premul,
                 PreMulScalar* scalar);
// `count` elements of `dt`, times `multiplier` (ranks), must fit in memory.
Status CheckCount(size_t count, batonDataType_t dt, size_t multiplier = 1);
// A buffer may be NULL only when nothing is read from or written to it.
Status CheckBuffer(const void* p, size_t count, const char* name);
Status CheckRank(int r, int nranks, const char* what);

// The front half of every communication call: the communicator must be live
// and the stream NULL, a live batonStream_t or (with a GPU) a cudaStream_t.
// On success *site describes where the call was made.
Status BeginCall(batonComm_t handle, batonStream_t stream, CallSite* site);

}  // namespace baton
