// The perf driver's view of the datatypes: nccl-tests' names and what it
// takes for a reduction over them to stay exact, and the comparison of an
// output with its expected values.
#pragma once

#include <cstddef>
#include <cstdint>

#include "baton.h"

namespace baton_perf {

struct TypeProps {
  const char* name;  // nccl-tests name, also accepted by -d
  size_t size;
  bool is_float;
  bool is_signed;
  // Largest magnitude up to which every integer is exact and fits: a sum over all ranks must stay
  // within it for the reduction to be exact in any order.
  int64_t exact_limit;
  // Most factors of 2 a product may contain without overflowing the type.
  int max_doublings;
  // Relative error allowed for avg, whose final division rounds (floating types only).
  double avg_tolerance;
};

// The properties of a valid `type`.
const TypeProps& Props(batonDataType_t type);

// Writes `value` as one element of `type` at `out` (8 bytes hold any type).
void StoreInt(batonDataType_t type, int64_t value, void* out);

// How many of `count` elements of `got` differ from `expected`; exact but for
// avg on floating types, whose division may round (TypeProps::avg_tolerance).
int64_t CountWrong(const void* got, const void* expected, size_t count, batonDataType_t type,
                   batonRedOp_t op);

}  // namespace baton_perf
