// The per-call mailboxes of registered collectives and the lines of small
// allreduces; see channel_set.h, ShmCallMailbox and ShmLines in shm.h.
#include <algorithm>
#include <cstring>

#include "transport/channel_set.h"
#include "transport/doorbell.h"
#include "transport/shm.h"

namespace baton {

namespace {

static_assert(sizeof(CallDescriptor) % 8 == 0 && sizeof(CallDescriptor) <= 8 * 7,
              "a descriptor is whole words in the state's line");

// The seqlock's writer: `bytes` of `src` into the mailbox's words between
// kMailboxWriting and `kind`. Word by word with 8-byte loads: a caller may
// have just stored `src` as words, and a wider load across two of them
// would wait for both stores.
[[gnu::always_inline]] inline void WriteMailbox(ShmCallMailbox* box, uint64_t call, uint64_t kind,
                                                const void* src, size_t bytes) {
  box->state.store(call << 2 | kMailboxWriting, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  const auto* p = static_cast<const uint8_t*>(src);
  for (size_t w = 0; w * 8 < bytes && w < kShmMailboxWords; ++w) {
    uint64_t v = 0;
    std::memcpy(&v, p + w * 8, std::min<size_t>(8, bytes - w * 8));
    box->words[w].store(v, std::memory_order_relaxed);
  }
  box->state.store(call << 2 | kind, std::memory_order_release);
}

// The reader: copies `bytes` of the words into `dst`; whether the state
// (`state`, which the caller loaded with acquire) held throughout.
bool ReadMailbox(const ShmCallMailbox* box, uint64_t state, void* dst, size_t bytes) {
  auto* p = static_cast<uint8_t*>(dst);
  for (size_t w = 0; w * 8 < bytes && w < kShmMailboxWords; ++w) {
    const uint64_t v = box->words[w].load(std::memory_order_relaxed);
    std::memcpy(p + w * 8, &v, std::min<size_t>(8, bytes - w * 8));
  }
  std::atomic_thread_fence(std::memory_order_acquire);
  return box->state.load(std::memory_order_relaxed) == state;
}

}  // namespace

void ChannelSet::PublishCall(uint64_t call, const CallDescriptor& first) {
  // Written as a record is, though only an error reads it; no doorbell.
  WriteMailbox(own_segment_->mailbox(), call, kMailboxNoRecord, &first, sizeof(first));
}

void ChannelSet::PublishCall(uint64_t call, const void* record, size_t bytes) {
  WriteMailbox(own_segment_->mailbox(), call, kMailboxRecord, record, bytes);
  // Only records ring: a record-less state is published on every ordinary
  // call's latency path, and a peer waiting for one wakes by its timeout.
  RingMappedPeers();
}

ChannelSet::PeerCall ChannelSet::ReadPeerCall(int peer, uint64_t call, void* record,
                                              size_t bytes) const {
  const ShmCallMailbox* box = peer_segments_[peer]->mailbox();
  const uint64_t s = box->state.load(std::memory_order_acquire);
  if ((s >> 2) < call || s == (call << 2 | kMailboxWriting)) return PeerCall::kNotYet;
  if (s != (call << 2 | kMailboxRecord)) return PeerCall::kNoRecord;
  // Rewritten meanwhile: the peer left this call without the registered
  // path (it would have waited for us otherwise).
  return ReadMailbox(box, s, record, bytes) ? PeerCall::kRecord : PeerCall::kNoRecord;
}

bool ChannelSet::ReadPeerDescriptor(int peer, uint64_t call, CallDescriptor* first) const {
  const ShmCallMailbox* box = peer_segments_[peer]->mailbox();
  const uint64_t s = box->state.load(std::memory_order_acquire);
  CallDescriptor read;
  if (s != (call << 2 | kMailboxNoRecord) || !ReadMailbox(box, s, &read, sizeof(read)))
    return false;
  *first = read;
  return true;
}

void ChannelSet::PublishProgress(uint64_t steps) {
  own_segment_->mailbox()->progress.store(steps, std::memory_order_release);
  RingMappedPeers();
}

void ChannelSet::RingMappedPeers() {
  // A fence and one load per peer when nobody sleeps (RingDoorbell).
  for (const auto& seg : peer_segments_)
    if (seg) RingDoorbell(&seg->header()->bell);
}

void ChannelSet::SleepOnDoorbell(uint32_t seq, int timeout_ms) {
  if (!aborted()) WaitDoorbell(bell_, seq, timeout_ms);
  CancelSleep();
}

uint64_t ChannelSet::PeerProgress(int peer) const {
  return peer_segments_[peer]->mailbox()->progress.load(std::memory_order_acquire);
}

ShmLines* ChannelSet::OwnLines() const {
  return own_segment_->lines();
}

const ShmLines* ChannelSet::PeerLines(int peer) const {
  return peer_segments_[peer]->lines();
}

void ChannelSet::PublishLine(ShmLineBuffer* line, uint64_t call) {
  line->call.store(call, std::memory_order_release);
  RingMappedPeers();
}

bool ChannelSet::PeerReached(int peer, uint64_t call) const {
  const uint64_t s = peer_segments_[peer]->mailbox()->state.load(std::memory_order_acquire);
  return (s >> 2) >= call;
}

}  // namespace baton
