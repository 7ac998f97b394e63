// Words for a call descriptor (base/call_descriptor.h): "allreduce #17
// (4096 x float, sum)". Header-only, so batonrun can print what its ranks'
// flight recorders hold without the library's internals.
#pragma once

#include <baton.h>

#include <cstdint>
#include <cstdio>
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
// "allgatherv #5 (100 x int32 in all, counts #3fa2c1)", "alltoallv #6 (int8)",
// "send/recv #4 (16 x float64)", "barrier #9".
inline std::string DescribeCall(const CallDescriptor& call) {
  std::string out = std::string(CallKindName(call.kind)) + " #" + std::to_string(call.seq);
  if (call.kind == kCallKindBarrier || call.kind == kCallKindInternal) return out;
  const auto c = static_cast<Collective>(call.kind - kCallKindCollectiveBase);
  const bool collective = IsCollectiveCall(call.kind);
  const char* type = DatatypeName(static_cast<batonDataType_t>(call.datatype));
  if (collective && c == Collective::kAlltoAllV) {
    out += std::string(" (") + type;  // the counts differ per rank
  } else {
    out += " (" + std::to_string(call.count) + " x " + type;
  }
  if (collective && HasVariableCounts(c) && c != Collective::kAlltoAllV) {
    char hash[16];
    snprintf(hash, sizeof(hash), "%06x",
             call.counts_hash[0] | call.counts_hash[1] << 8 | call.counts_hash[2] << 16);
    out += std::string(" in all, counts #") + hash;
  }
  if (collective && Reduces(c))
    out += std::string(", ") + RedOpName(static_cast<batonRedOp_t>(call.op));
  if (collective && HasRoot(c)) out += ", root " + std::to_string(call.root);
  return out + ")";
}

}  // namespace baton
