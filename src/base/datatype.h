// Sizes and names of the API's datatypes and reduction ops.
#pragma once

#include <baton.h>

#include <cstddef>

namespace baton {

// Bytes per element; 0 for an invalid datatype.
size_t DatatypeSize(batonDataType_t dt);
// nccl-tests names ("int8", ..., "bfloat16"); "invalid" when out of range.
const char* DatatypeName(batonDataType_t dt);
// "sum", "prod", "max", "min", "avg"; "premulsum" from batonNumOps on (user
// ops); "invalid" when negative.
const char* RedOpName(batonRedOp_t op);

}  // namespace baton
