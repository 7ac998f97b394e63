// A communicator's user reduction ops (batonRedOpCreatePreMulSum): each
// handle names a scalar and its datatype. Handles are unique in the
// process (never reused, never shared between communicators), so a
// destroyed op or one made on another communicator is always recognised
// as such instead of silently naming another op.
#pragma once

#include <baton.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>

#include "base/status.h"

namespace baton {

// What a PreMulSum op multiplies by: the value itself (host immediate, read
// at creation) or where to read it when each call runs (device residence).
struct PreMulScalar {
  batonDataType_t datatype = batonFloat32;
  batonScalarResidence_t residence = batonScalarHostImmediate;
  uint64_t value = 0;             // host immediate: the scalar's bytes
  const void* pointer = nullptr;  // device residence: read at each call
};

// dst[i] = src[i] * *scalar for i < count (one element of dt each): the
// pre-multiplication, through the reduce-copy core (kernels/cpu_reduce.h),
// for the layers above that may not use the kernels directly.
void PreMultiply(void* dst, const void* src, size_t count, batonDataType_t dt, const void* scalar);

class RedOpTable {
 public:
  // Makes a new op. scalar holds one element of datatype (checked by the
  // caller); host immediate copies it now.
  Status Create(const void* scalar, batonDataType_t datatype, batonScalarResidence_t residence,
                batonRedOp_t* op);
  // InvalidArgument when op is not a live op of this table.
  Status Destroy(batonRedOp_t op);
  // The op's scalar; InvalidArgument (with a message) when op is a user op
  // value that this table does not hold: destroyed, or from another
  // communicator.
  Status Find(batonRedOp_t op, PreMulScalar* out) const;

 private:
  mutable std::mutex mu_;
  std::unordered_map<int, PreMulScalar> ops_;
};

}  // namespace baton
