// PreMulSum (batonRedOpCreatePreMulSum) with the scaling fused into the
// schedule: the algorithm builds a plain sum, and the steps that read this
// rank's own input are marked to multiply it as they read it.
#pragma once

#include "algorithms/collective.h"
#include "algorithms/schedule.h"
#include "comm/red_ops.h"
#include "tuning/select.h"

namespace baton {

// Appends the schedule of a PreMulSum `collective` (allreduce, reduce or
// reduce-scatter) to *s: build(a with op = sum), then every step that reads
// this rank's input before anything has written those bytes (the order of
// the ops: dependencies point backwards) gets the scalar. A reducing
// receive then scales its local operand in the reduction (Op::scale), a
// copy scales as it copies, and a send of raw input sends a scaled copy made
// now into schedule memory (only those chunks). Output bytes that still
// hold input and no step writes (one rank, in place) are scaled in place.
// A schedule whose reads of the input do not fall on such boundaries is
// built the old way instead: the whole input scaled first, then the sum.
// A device scalar is read now; a failure goes to s->build_error. Returns
// whether the scaling was fused (false: the whole-input pass ran).
bool BuildPreMulSum(Collective collective, const PreMulScalar& scalar, BuildFn build,
                    const CollArgs& a, Schedule* s);

}  // namespace baton
