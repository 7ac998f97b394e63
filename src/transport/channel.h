// Channel: one full-duplex connection to a peer, moving an ordered byte
// stream with two non-blocking calls. The executor drives every channel of a
// communicator from one loop; RecvTarget says whether received bytes are
// copied or reduced into place.
#pragma once

#include <baton.h>

#include <poll.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/status.h"

namespace baton {

// Where the bytes of a receive go: copied to dst, or reduced with a local
// operand (dst = reduce_with op incoming), optionally divided (avg's last step).
struct RecvTarget {
  uint8_t* dst = nullptr;
  const uint8_t* reduce_with = nullptr;
  batonDataType_t datatype = batonUint8;
  batonRedOp_t op = batonSum;
  uint32_t post_divisor = 0;
  uint32_t elem_size = 1;
  bool incoming_first = false;  // dst = incoming op reduce_with
};

// Applies `len` incoming bytes that belong at byte `offset` of the target.
// For reductions len must be a multiple of the element size.
void Deliver(const RecvTarget& target, size_t offset, const uint8_t* data, size_t len);

// One full-duplex connection to a peer. Both calls are non-blocking: they
// move what they can and advance *done. A message is a run of `bytes` on each
// side; the schedules guarantee both sides agree on the sizes and the order.
class Channel {
 public:
  enum class Kind { kShm, kTcp };
  virtual ~Channel() = default;
  virtual Kind kind() const = 0;
  virtual Status ProgressSend(const uint8_t* src, size_t bytes, size_t* done) = 0;
  virtual Status ProgressRecv(const RecvTarget& target, size_t bytes, size_t* done) = 0;
  // Adds the sockets the current send (or receive) waits on; nothing for
  // shared memory, which waits on the doorbell.
  virtual void AddWaitFds(bool /*sending*/, int /*peer*/, struct WaitSet* /*ws*/) const {}
};

// The watchdog's epoll key of socket `index` to `peer`.
inline uint64_t WatchKey(int peer, int index) {
  return uint64_t(peer) * 256 + uint64_t(index);
}
constexpr int kMaxSocketsPerPeer = 16;

// What the executor waits for: channels whose next operation is stalled.
struct WaitSet {
  bool any_shm = false;
  std::vector<pollfd> tcp;         // fd + POLLIN/POLLOUT
  std::vector<uint64_t> tcp_keys;  // WatchKey of each entry of `tcp`
  void Clear() {
    any_shm = false;
    tcp.clear();
    tcp_keys.clear();
  }
};

}  // namespace baton
