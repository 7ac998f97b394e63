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

#include "base/call_descriptor.h"
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
  // dst may be written with streaming stores (Op::stream_dst).
  bool non_temporal = false;
  // A reduction's result is also written here, with cached stores
  // (Op::copy_to); null: only dst.
  uint8_t* copy_to = nullptr;
  // PreMulSum: reduce_with is this rank's own input, multiplied by *scale
  // (one element of datatype) in the same pass (op is a sum).
  const uint8_t* scale = nullptr;
  // This message opens this rank's call `*opens` on the connection: it must
  // start with the peer's descriptor of the same call. Null: the message
  // continues the call, and must not start another.
  const CallDescriptor* opens = nullptr;
  // The receiver has nothing else to do: the channel may poll a little
  // longer for a piece about to come (ShmChannel samples its line
  // transfers so). An executor clears it while its pass over the queues
  // moves anything: a send that became ready in that pass (the step after
  // this receive's reduction) must not wait behind that poll, or both ranks
  // of a pair poll for each other's pieces (docs/performance.md, "A sample
  // must not hold up a send").
  bool idle = true;
};

// What a receiver found at the start of a message that does not belong to
// the call it is in (the channel then fails with batonInvalidUsage).
struct CallMismatch {
  enum class Kind : uint8_t {
    kNone,
    kOtherCall,     // the peer's descriptor differs from this rank's
    kNoDescriptor,  // this rank opens a call; the peer sent data of another step
    kNewCall,       // this rank continues a call; the peer opened another
    kSize,          // the message is larger (TCP: or smaller) than this rank's
  };
  Kind kind = Kind::kNone;
  CallDescriptor theirs;     // kOtherCall, kNewCall
  uint64_t their_bytes = 0;  // kSize: the peer's message size (0: unknown)
};

// Applies `len` incoming bytes that belong at byte `offset` of the target.
// For reductions len must be a multiple of the element size.
void Deliver(const RecvTarget& target, size_t offset, const uint8_t* data, size_t len);

// One full-duplex connection to a peer. Both calls are non-blocking: they
// move what they can and advance *done. A message is a run of `bytes` on each
// side; matching schedules agree on the sizes and the order, and the
// descriptors catch schedules that do not match (different calls).
class Channel {
 public:
  enum class Kind { kShm, kTcp, kRdma };
  virtual ~Channel() = default;
  virtual Kind kind() const = 0;
  // `tag`, when the message opens a call on this connection: the call's
  // descriptor, which travels with the message's first bytes.
  virtual Status ProgressSend(const uint8_t* src, size_t bytes, const CallDescriptor* tag,
                              size_t* done) = 0;
  virtual Status ProgressRecv(const RecvTarget& target, size_t bytes, size_t* done) = 0;
  // After ProgressRecv failed with batonInvalidUsage: what arrived instead.
  const CallMismatch& mismatch() const { return mismatch_; }
  // Any-source receives (batonRecvAny), between calls only (no message of
  // this channel half received): whether the peer's next message has begun
  // to arrive and, when it opens a call, its descriptor (*tagged). Consumes
  // nothing. A peer that left with nothing pending is an error. Transports
  // that cannot look ahead refuse (batonInvalidUsage).
  virtual Status PeekOpening(bool* ready, bool* tagged, CallDescriptor* tag);
  // Adds the sockets the current send (or receive) waits on; nothing for
  // shared memory, which waits on the doorbell.
  virtual void AddWaitFds(bool /*sending*/, int /*peer*/, struct WaitSet* /*ws*/) const {}
  // Whether the call that opened last on this channel's sending side is
  // timed (a flag, so that the executor's check costs small calls no
  // virtual call); if so, the executor calls CallEnded as it completes the
  // run that call was part of.
  bool timing_call() const { return timing_call_; }
  virtual void CallEnded() { timing_call_ = false; }
  // The run that just completed sent on this channel, and its next send
  // comes with a later run: a hint to get ready for it.
  virtual void SendsEnded() {}

 protected:
  bool timing_call_ = false;
  // Records a mismatch and returns the error for it.
  Status Mismatch(CallMismatch::Kind kind, const CallDescriptor* theirs, uint64_t their_bytes) {
    mismatch_.kind = kind;
    if (theirs != nullptr) mismatch_.theirs = *theirs;
    mismatch_.their_bytes = their_bytes;
    return InvalidUsage("the ranks called different collectives");
  }
  // At the start of a message: checks the descriptor it came with (null:
  // none) against what `target` expects.
  Status CheckOpening(const RecvTarget& target, const CallDescriptor* theirs) {
    if (target.opens != nullptr && theirs == nullptr)
      return Mismatch(CallMismatch::Kind::kNoDescriptor, nullptr, 0);
    if (target.opens == nullptr && theirs != nullptr)
      return Mismatch(CallMismatch::Kind::kNewCall, theirs, 0);
    if (theirs != nullptr && *theirs != *target.opens)
      return Mismatch(CallMismatch::Kind::kOtherCall, theirs, 0);
    return Status::Ok();
  }

 private:
  CallMismatch mismatch_;
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
