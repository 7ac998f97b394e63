// Where the buffers of a device call that CUDA IPC cannot share go in one
// scratch allocation (cuda/ipc_bounce.h), and what is copied in before the
// call and out after it. Pure, so the host tests run the IPC plans through it
// (tests/unit/ipc_plan_test.cc).
#pragma once

#include <algorithm>
#include <cstddef>

namespace baton {

struct IpcBounceLayout {
  bool send = false;  // the send buffer is replaced by scratch + send_offset
  bool recv = false;  // the receive buffer by scratch + recv_offset
  size_t send_offset = 0, recv_offset = 0;
  size_t bytes = 0;          // the scratch the call needs
  size_t copy_in_send = 0;   // bytes copied from the send buffer to its stand-in
  size_t copy_in_recv = 0;   // bytes copied from the receive buffer to its stand-in
  size_t copy_out_recv = 0;  // bytes copied back into the receive buffer after
};

// send_bytes / recv_bytes: what the call reads and writes (0: that buffer is
// not used); same_pointer: one pointer for both (in place; the sizes may
// differ, as at rank 0 of an allgather or reduce-scatter in place);
// bounce_send / bounce_recv: which of them IPC cannot share (both, when one
// pointer); preserve_recv: the call writes only parts of the receive buffer
// (v-collectives with gaps), so the rest must come back unchanged. A send
// buffer that lies inside the receive buffer without starting it (allgather
// in place at rank r > 0) gets its own region: the call then runs out of
// place, which gives the same result.
inline IpcBounceLayout PlanIpcBounce(size_t send_bytes, size_t recv_bytes, bool same_pointer,
                                     bool bounce_send, bool bounce_recv, bool preserve_recv) {
  constexpr size_t kAlign = 256;  // cudaMalloc's alignment, kept for the second region
  IpcBounceLayout l;
  l.send = bounce_send && send_bytes > 0;
  l.recv = bounce_recv && recv_bytes > 0;
  if (same_pointer && (l.send || l.recv)) {
    // One region for both: the input in, the output out.
    l.send = send_bytes > 0;
    l.recv = recv_bytes > 0;
    l.bytes = std::max(send_bytes, recv_bytes);
    l.copy_in_send = preserve_recv ? l.bytes : send_bytes;
    l.copy_out_recv = recv_bytes;
    return l;
  }
  if (l.send) {
    l.copy_in_send = send_bytes;
    l.bytes = (send_bytes + kAlign - 1) / kAlign * kAlign;
  }
  if (l.recv) {
    l.recv_offset = l.bytes;
    l.bytes += recv_bytes;
    l.copy_in_recv = preserve_recv ? recv_bytes : 0;
    l.copy_out_recv = recv_bytes;
  }
  return l;
}

}  // namespace baton
