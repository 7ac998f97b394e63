// Shared-memory transport between ranks of one host.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"
#include "transport/doorbell.h"
#include "transport/transport.h"

namespace baton {

constexpr uint32_t kShmMaxSlots = 256;

// One direction of a shared-memory connection: a ring of fixed-size slots
// that lives in the receiver's segment. The producer fills whole slots and
// publishes them by bumping `head`; the consumer reduces or copies straight
// out of the slot and frees it by bumping `tail`. Slots keep element
// boundaries aligned, so a reduction never straddles the wrap.
struct ShmRing {
  alignas(64) std::atomic<uint64_t> head;  // slots published
  alignas(64) std::atomic<uint64_t> tail;  // slots consumed
  alignas(64) uint32_t sizes[kShmMaxSlots];
};

// Header of a rank's segment: its doorbell and the layout of its rings, so
// a peer never has to trust its own settings to find them.
struct ShmSegmentHeader {
  Doorbell bell;
  uint32_t magic;
  uint32_t nrings;
  uint32_t nslots;
  uint32_t slot_bytes;
  uint64_t ring_stride;  // bytes from one ring header to the next
  uint64_t data_offset;  // from a ring header to its first slot
};

// A mapped shared-memory segment (own or a peer's). Unlinks its name on
// destruction if it created it and has not unlinked yet.
class ShmSegment {
 public:
  static Status Create(const std::string& name, size_t bytes, std::unique_ptr<ShmSegment>* out);
  static Status Open(const std::string& name, std::unique_ptr<ShmSegment>* out);
  ShmSegment() = default;  // use Create or Open
  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;
  void unlink();
  uint8_t* base() const { return base_; }
  size_t size() const { return size_; }
  ShmSegmentHeader* header() const { return reinterpret_cast<ShmSegmentHeader*>(base_); }
  ShmRing* ring(uint32_t index) const {
    return reinterpret_cast<ShmRing*>(base_ + 4096 + index * header()->ring_stride);
  }
  uint8_t* slot(uint32_t ring_index, uint64_t slot_no) const {
    const ShmSegmentHeader* h = header();
    return reinterpret_cast<uint8_t*>(ring(ring_index)) + h->data_offset +
           (slot_no % h->nslots) * h->slot_bytes;
  }

 private:
  std::string name_;
  uint8_t* base_ = nullptr;
  size_t size_ = 0;
  bool owner_linked_ = false;
};

// Bytes for a segment holding `nrings` rings of `nslots` x `slot_bytes`.
size_t ShmSegmentBytes(uint32_t nrings, uint32_t nslots, uint32_t slot_bytes);
// Writes the header of a fresh segment.
void InitShmSegment(ShmSegment* seg, uint32_t nrings, uint32_t nslots, uint32_t slot_bytes);

// A channel to a peer on the same host.
class ShmChannel : public Channel {
 public:
  // send ring: ring `send_index` in the peer's segment; recv ring: ring
  // `recv_index` in ours.
  ShmChannel(ShmSegment* own, uint32_t recv_index, ShmSegment* peer, uint32_t send_index,
             const std::atomic<bool>* peer_closed, int peer_rank);
  Kind kind() const override { return Kind::kShm; }
  Status progressSend(const uint8_t* src, size_t bytes, size_t* done) override;
  Status progressRecv(const RecvTarget& target, size_t bytes, size_t* done) override;

 private:
  Status peerGone() const;

  ShmSegment* own_;
  ShmSegment* peer_;
  uint32_t recv_index_, send_index_;
  ShmRing* send_ring_;
  ShmRing* recv_ring_;
  Doorbell* peer_bell_;
  const std::atomic<bool>* peer_closed_;
  int peer_rank_;
  uint64_t send_head_ = 0, send_tail_seen_ = 0;  // producer's view
  uint64_t recv_tail_ = 0, recv_head_seen_ = 0;  // consumer's view
};

}  // namespace baton
