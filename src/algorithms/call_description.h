// Words for a call descriptor (base/call_descriptor.h): "allreduce #17
// (4096 x float, sum)". Header-only, so batonrun can print what its ranks'
// flight recorders hold without the library's internals.
#pragma once

#include <baton.h>

#include <cstdint>
#include <string>

#include "algorithms/collective.h"
#include "base/call_descriptor.h"
#include "base/datatype.h"

namespace baton {

inline bool IsCollectiveCall(uint8_t kind) {
  const int c = kind - kCallKindCollectiveBase;
  return c >= 0 && c < kNumCollectives;
}

inline const char* CallKindName(uint8_t kind) {
  switch (kind) {
    case kCallKindBarrier:
      return "barrier";
    case kCallKindInternal:
      return "Baton's internal exchange";
    case kCallKindPointToPoint:
      return "send/recv";
    default:
      break;
  }
  return IsCollectiveCall(kind)
             ? CollectiveName(static_cast<Collective>(kind - kCallKindCollectiveBase))
             : "?";
}

// "allreduce #17 (4096 x float, max)", "broadcast #3 (10 x int8, root 2)",
// "send/recv #4 (16 x float64)", "barrier #9".
inline std::string DescribeCall(const CallDescriptor& call) {
  std::string out = std::string(CallKindName(call.kind)) + " #" + std::to_string(call.seq);
  if (call.kind == kCallKindBarrier || call.kind == kCallKindInternal) return out;
  out += " (" + std::to_string(call.count) + " x " +
         DatatypeName(static_cast<batonDataType_t>(call.datatype));
  const int c = call.kind - kCallKindCollectiveBase;
  const bool has_op = c == static_cast<int>(Collective::kAllReduce) ||
                      c == static_cast<int>(Collective::kReduce) ||
                      c == static_cast<int>(Collective::kReduceScatter);
  const bool has_root =
      c == static_cast<int>(Collective::kBroadcast) || c == static_cast<int>(Collective::kReduce);
  if (has_op) out += std::string(", ") + RedOpName(static_cast<batonRedOp_t>(call.op));
  if (has_root) out += ", root " + std::to_string(call.root);
  return out + ")";
}

}  // namespace baton
