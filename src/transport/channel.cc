#include "transport/channel.h"

#include "kernels/cpu_reduce.h"

namespace baton {

void Deliver(const RecvTarget& t, size_t offset, const uint8_t* data, size_t len) {
  if (t.reduce_with == nullptr) {
    CopyOut(t.dst + offset, data, len, t.non_temporal);
    return;
  }
  const uint8_t* local = t.reduce_with + offset;
  if (t.scale != nullptr) [[unlikely]] {
    // Scaled where the cached copy goes, streamed on from there.
    uint8_t* first = t.copy_to != nullptr ? t.copy_to + offset : t.dst + offset;
    ScaleReduce(first, local, data, len / t.elem_size, t.datatype, t.scale, !t.incoming_first);
    if (t.copy_to != nullptr) CopyOut(t.dst + offset, first, len, t.non_temporal);
    return;
  }
  ReduceInto(t.dst + offset, t.incoming_first ? data : local, t.incoming_first ? local : data,
             len / t.elem_size, t.datatype, t.op, t.post_divisor, t.non_temporal,
             t.copy_to != nullptr ? t.copy_to + offset : nullptr);
}

}  // namespace baton

namespace baton {

Status Channel::PeekOpening(bool* ready, bool* tagged, CallDescriptor* /*tag*/) {
  *ready = false;
  *tagged = false;
  return InvalidUsage(
      "an any-source receive (batonRecvAny) cannot look ahead on an RDMA connection; "
      "use batonRecv with the peer, or BATON_TRANSPORT=tcp between these hosts");
}

}  // namespace baton
