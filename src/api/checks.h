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
