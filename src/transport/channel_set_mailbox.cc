// The per-call mailboxes of registered collectives and the lines of small
// allreduces; see channel_set.h, ShmCallMailbox and ShmLines in shm.h.
#include <cstring>
#include <iterator>

#include "transport/channel_set.h"
#include "transport/doorbell.h"
#include "transport/shm.h"

namespace baton {

static_assert(sizeof(CallDescriptor) % 8 == 0 && sizeof(CallDescriptor) <= 8 * 7,
              "a descriptor is whole words in the state's line");

void ChannelSet::PublishCall(uint64_t call, const CallDescriptor& first) {
  ShmCallMailbox* box = own_segment_->mailbox();
  // Written as a record is (a seqlock), though only an error reads it.
  box->state.store(call << 2 | kMailboxWriting, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  // Word by word: the caller has just stored the descriptor as three words,
  // and a wider load across two of them would wait for both stores.
  const auto* src = reinterpret_cast<const uint8_t*>(&first);
  for (size_t w = 0; w < sizeof(CallDescriptor) / 8; ++w) {
    uint64_t word;
    std::memcpy(&word, src + 8 * w, 8);
    box->words[w].store(word, std::memory_order_relaxed);
  }
  box->state.store(call << 2 | kMailboxNoRecord, std::memory_order_release);
}

void ChannelSet::PublishCall(uint64_t call, const void* record, size_t bytes) {
  ShmCallMailbox* box = own_segment_->mailbox();
  box->state.store(call << 2 | kMailboxWriting, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  const auto* src = static_cast<const uint8_t*>(record);
  for (size_t w = 0; w * 8 < bytes && w < kShmMailboxWords; ++w) {
    uint64_t v = 0;
    std::memcpy(&v, src + w * 8, std::min<size_t>(8, bytes - w * 8));
    box->words[w].store(v, std::memory_order_relaxed);
  }
  box->state.store(call << 2 | kMailboxRecord, std::memory_order_release);
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
  auto* dst = static_cast<uint8_t*>(record);
  for (size_t w = 0; w * 8 < bytes && w < kShmMailboxWords; ++w) {
    const uint64_t v = box->words[w].load(std::memory_order_relaxed);
    std::memcpy(dst + w * 8, &v, std::min<size_t>(8, bytes - w * 8));
  }
  std::atomic_thread_fence(std::memory_order_acquire);
  // Rewritten meanwhile: the peer left this call without the registered
  // path (it would have waited for us otherwise).
  if (box->state.load(std::memory_order_relaxed) != s) return PeerCall::kNoRecord;
  return PeerCall::kRecord;
}

bool ChannelSet::ReadPeerDescriptor(int peer, uint64_t call, CallDescriptor* first) const {
  const ShmCallMailbox* box = peer_segments_[peer]->mailbox();
  const uint64_t s = box->state.load(std::memory_order_acquire);
  if (s != (call << 2 | kMailboxNoRecord)) return false;
  uint64_t words[sizeof(CallDescriptor) / 8];
  for (size_t w = 0; w < std::size(words); ++w)
    words[w] = box->words[w].load(std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (box->state.load(std::memory_order_relaxed) != s) return false;
  std::memcpy(first, words, sizeof(words));
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
