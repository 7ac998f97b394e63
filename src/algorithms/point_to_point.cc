#include "algorithms/point_to_point.h"

#include "algorithms/ops.h"
#include "base/datatype.h"

namespace baton {

void BuildSend(const CollArgs& a, int peer, Schedule* out) {
  size_t bytes = a.count * DatatypeSize(a.datatype);
  if (bytes == 0) return;
  if (peer == a.rank) return;  // paired with a self-receive by the caller
  out->Add(SendOp(peer, static_cast<const uint8_t*>(a.send), bytes, -1));
}

void BuildRecv(const CollArgs& a, int peer, Schedule* out) {
  size_t bytes = a.count * DatatypeSize(a.datatype);
  if (bytes == 0) return;
  out->Add(RecvOp(a, peer, static_cast<uint8_t*>(a.recv), bytes, nullptr, 0));
}

}  // namespace baton
