#include "transport/shm.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "base/datatype.h"
#include "base/log.h"
#include "base/shm_names.h"
#include "kernels/cpu_reduce.h"
#include "transport/cma.h"

namespace baton {

namespace {
constexpr uint32_t kSegmentMagic = 0x4d485342;  // "BSHM"

// A slot cell's word for slot number `slot` holding `size` (see ShmSlotCell).
uint64_t SlotWord(uint64_t slot, uint32_t size) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(slot) + 1) << 32) | size;
}
bool Sampled(uint64_t slot) {
  return (slot & (kShmSampleEvery - 1)) == 0;
}
size_t RoundUp(size_t x, size_t a) {
  return (x + a - 1) / a * a;
}

// MADV_POPULATE_WRITE (Linux 5.14), which older C libraries do not name.
constexpr int kMadvPopulateWrite = 23;

// Asks for the pages of [addr, addr + bytes) on the NUMA node this thread
// runs on (MPOL_PREFERRED), best effort: without it they land wherever
// they are first touched.
void PreferThisNode(void* addr, size_t bytes) {
  unsigned cpu = 0, node = 0;
  if (syscall(SYS_getcpu, &cpu, &node, nullptr) != 0 || node >= 63) return;
  constexpr int kMpolPreferred = 1;
  const unsigned long mask = 1ul << node;
  if (syscall(SYS_mbind, addr, bytes, kMpolPreferred, &mask, 64ul, 0u) != 0)
    BATON_TRACE(kLogShm, "mbind: %s", strerror(errno));
}
}  // namespace

size_t ShmSegmentBytes(uint32_t nrings, uint32_t nslots, uint32_t slot_bytes) {
  size_t ring_stride = RoundUp(sizeof(ShmRing), 4096) + size_t(nslots) * slot_bytes;
  return kShmRingsOffset + nrings * ring_stride + kShmLinesBytes;
}

void InitShmSegment(ShmSegment* seg, uint32_t nrings, uint32_t nslots, uint32_t slot_bytes) {
  // The segment's words are padded apart by kCacheLinePad, fixed at compile
  // time; say so once if this CPU's lines are wider.
  WarnIfCacheLineExceedsPadding();
  ShmSegmentHeader* h = seg->header();
  // The file is fresh from ftruncate, so every atomic already reads zero.
  h->magic = kSegmentMagic;
  h->nrings = nrings;
  h->nslots = nslots;
  h->slot_bytes = slot_bytes;
  h->data_offset = RoundUp(sizeof(ShmRing), 4096);
  h->ring_stride = h->data_offset + size_t(nslots) * slot_bytes;
  seg->layout_ = {nrings, nslots, slot_bytes, h->ring_stride, h->data_offset};
}

Status ShmSegment::Create(const std::string& name, size_t bytes, std::unique_ptr<ShmSegment>* out) {
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoError("shm_open(" + name + ")", errno);
  auto seg = std::make_unique<ShmSegment>();
  seg->name_ = name;
  seg->owner_linked_ = true;
  UnlinkAtExit(name);
  if (ftruncate(fd, bytes) != 0) {
    int e = errno;
    close(fd);
    return ErrnoError("ftruncate(" + name + ")", e);
  }
  // MAP_POPULATE: the owner (the receiving rank, already bound) faults every
  // page in now, so the kernel's first-touch policy puts its rings on the
  // owner's NUMA node rather than on whichever sender writes a slot first.
  // Only for small segments: one ring per local peer makes a host's memory
  // grow with the square of its ranks. Larger segments get their pages as
  // slots are first written, by whichever side, and a preference for the
  // owner's NUMA node keeps them there (the policy belongs to the shared
  // file, so it holds for the peers' faults too).
  const bool populate = bytes <= kShmPopulateAllBytes;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | (populate ? MAP_POPULATE : 0),
                 fd, 0);
  int e = errno;
  close(fd);
  if (p == MAP_FAILED) return ErrnoError("mmap(" + name + ")", e);
  seg->base_ = static_cast<uint8_t*>(p);
  seg->size_ = bytes;
  if (!populate) PreferThisNode(p, bytes);
  *out = std::move(seg);
  return Status::Ok();
}

Status ShmSegment::Open(const std::string& name, std::unique_ptr<ShmSegment>* out) {
  int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoError("shm_open(" + name + ")", errno);
  struct stat st {};
  if (fstat(fd, &st) != 0 || st.st_size < 4096) {
    close(fd);
    return SystemError("shared memory segment " + name + " is malformed");
  }
  void* p = mmap(nullptr, st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int e = errno;
  close(fd);
  if (p == MAP_FAILED) return ErrnoError("mmap(" + name + ")", e);
  auto seg = std::make_unique<ShmSegment>();
  seg->name_ = name;
  seg->base_ = static_cast<uint8_t*>(p);
  seg->size_ = st.st_size;
  // Read each field once (the owner may still be writing them only if it
  // is not Baton) and derive the offsets ourselves rather than trust them.
  const ShmSegmentHeader* h = seg->header();
  ShmSegment::Layout layout;
  layout.nrings = h->nrings;
  layout.nslots = h->nslots;
  layout.slot_bytes = h->slot_bytes;
  layout.data_offset = RoundUp(sizeof(ShmRing), 4096);
  layout.ring_stride = layout.data_offset + size_t(layout.nslots) * layout.slot_bytes;
  if (h->magic != kSegmentMagic || !std::has_single_bit(layout.nslots) ||
      layout.nslots > kShmMaxSlots || layout.nrings == 0 || layout.nrings > kShmMaxRings ||
      layout.slot_bytes < kShmInlineBytes || layout.slot_bytes > kShmMaxSlotBytes ||
      h->data_offset != layout.data_offset || h->ring_stride != layout.ring_stride ||
      ShmSegmentBytes(layout.nrings, layout.nslots, layout.slot_bytes) > seg->size_)
    return SystemError("shared memory segment " + name + " has a bad header");
  seg->layout_ = layout;
  *out = std::move(seg);
  return Status::Ok();
}

void ShmSegment::MapRing(uint32_t index) const {
  // The owner's MAP_POPULATE made the pages but maps them only into the
  // owner: a sender's first store to each page of its ring faults, and the
  // first lap of a sweep's medium calls took those faults (4 KiB calls ran
  // 3x slower for their first 30-odd calls; docs/performance.md, "Faults
  // on the first calls"). Larger segments get their pages as slots are used.
  if (size_ > kShmPopulateAllBytes || index >= layout_.nrings) return;
  uint8_t* begin = reinterpret_cast<uint8_t*>(ring(index));
  const size_t bytes = layout_.ring_stride;
  if (madvise(begin, bytes, kMadvPopulateWrite) == 0) return;
  // Kernels before 5.14: a load per page maps it as well.
  for (size_t offset = 0; offset < bytes; offset += 4096) {
    (void)*reinterpret_cast<volatile const uint8_t*>(begin + offset);
  }
}

void ShmSegment::Unlink() {
  if (!owner_linked_) return;
  shm_unlink(name_.c_str());
  ForgetAtExit(name_);
  owner_linked_ = false;
}

ShmSegment::~ShmSegment() {
  Unlink();
  if (base_) munmap(base_, size_);
}

ShmChannel::ShmChannel(ShmSegment* own, uint32_t recv_index, ShmSegment* peer, uint32_t send_index,
                       const std::atomic<bool>* peer_closed, int peer_rank, Copying copying,
                       bool adaptive)
    : own_(own),
      peer_(peer),
      recv_index_(recv_index),
      send_index_(send_index),
      send_ring_(peer->ring(send_index)),
      recv_ring_(own->ring(recv_index)),
      peer_bell_(&peer->header()->bell),
      peer_closed_(peer_closed),
      peer_rank_(peer_rank),
      copying_(copying),
      adaptive_(adaptive && copying != Copying::kStreaming),
      hot_piece_bytes_(copying == Copying::kHot
                           ? HotPieceBytes(peer->layout().nslots, peer->layout().slot_bytes)
                           : peer->layout().slot_bytes),
      call_piece_bytes_(peer->layout().slot_bytes),
      piece_bytes_(peer->layout().slot_bytes),
      call_streams_(copying == Copying::kStreaming) {}

uint32_t HotPieceBytes(uint32_t nslots, uint32_t slot_bytes) {
  const uint64_t piece = kShmHotWindowBytes / nslots / kShmDataPage * kShmDataPage;
  return static_cast<uint32_t>(std::clamp<uint64_t>(piece, kShmDataPage, slot_bytes));
}

Status ShmChannel::PeerGone() const {
  return RemoteError("rank " + std::to_string(peer_rank_) +
                     " left the communicator (process died or aborted)");
}

namespace {
// Read by peers through process_vm_readv; its value is per process.
volatile uint64_t g_cma_probe_word = 0;
}  // namespace

void InitCmaProbe(ShmSegment* own) {
  if (g_cma_probe_word == 0) g_cma_probe_word = 0x9e3779b97f4a7c15ull ^ (uint64_t(getpid()) << 17);
  own->header()->probe_addr = reinterpret_cast<uint64_t>(&g_cma_probe_word);
  own->header()->probe_value = g_cma_probe_word;
}

int ProbeCmaError(int peer_pid, const ShmSegment& peer_segment) {
  const ShmSegmentHeader* h = peer_segment.header();
  if (h->probe_addr == 0) return EINVAL;  // the peer did not offer a probe
  uint64_t value = 0;
  if (int err = CmaTryRead(peer_pid, &value, h->probe_addr, sizeof(value)); err != 0) return err;
  // Another value: the pid names another process (another pid namespace).
  return value == h->probe_value ? 0 : ESRCH;
}

bool ProbeCma(int peer_pid, const ShmSegment& peer_segment) {
  return ProbeCmaError(peer_pid, peer_segment) == 0;
}

void ShmChannel::EnableCma(bool peer_reads_us, int peer_pid, uint64_t threshold) {
  send_by_address_ = peer_reads_us;
  peer_pid_ = peer_pid;
  cma_threshold_ = threshold;
}

Status ShmChannel::SendByAddress(const uint8_t* src, size_t bytes, const CallDescriptor* tag,
                                 size_t* done) {
  const uint32_t nslots = peer_->layout().nslots;
  if (!desc_pending_) {
    if (send_head_ - send_tail_seen_ >= nslots) {
      send_tail_seen_ = send_ring_->tail.load(std::memory_order_acquire);
      if (send_head_ - send_tail_seen_ >= nslots)
        return peer_closed_->load(std::memory_order_acquire) ? PeerGone() : Status::Ok();
    }
    CmaDescriptor desc{reinterpret_cast<uint64_t>(src), bytes};
    ShmSlotCell& cell = send_ring_->cells[SlotIndex(send_head_, nslots)];
    static_assert(sizeof(desc) <= kShmInlineBytes, "a descriptor travels in its cell");
    memcpy(cell.inline_data, &desc, sizeof(desc));
    if (tag != nullptr) {
      CopyCallDescriptor(&cell.tag, *tag);
      cell.tag_fingerprint = tag->Fingerprint();
    }
    cell.word.store(SlotWord(send_head_, kCmaDescriptorBit | (tag != nullptr ? kCallTagBit : 0)),
                    std::memory_order_release);
    desc_slot_ = send_head_++;
    desc_pending_ = true;
    RingDoorbell(peer_bell_);
  }
  // The consumer frees the descriptor's slot once it has read everything:
  // only then may the caller reuse the buffer.
  send_tail_seen_ = send_ring_->tail.load(std::memory_order_acquire);
  if (send_tail_seen_ > desc_slot_) {
    desc_pending_ = false;
    *done = bytes;
  } else if (peer_closed_->load(std::memory_order_acquire)) {
    return PeerGone();
  }
  return Status::Ok();
}

Status ShmChannel::RecvByAddress(const RecvTarget& target, const CmaDescriptor& desc, size_t bytes,
                                 size_t* done) {
  if (desc.bytes != bytes) return Mismatch(CallMismatch::Kind::kSize, nullptr, desc.bytes);
  // Bounded work per call keeps the other queues of the executor moving.
  constexpr size_t kCopyStep = 4 << 20;
  constexpr size_t kReduceStep = 128 << 10;  // fits in L2 with its operand
  size_t budget = kCopyStep;
  while (*done < bytes && budget > 0) {
    const bool reduce = target.reduce_with != nullptr;
    size_t step = std::min(bytes - *done, reduce ? kReduceStep : budget);
    if (reduce) step = step / target.elem_size * target.elem_size;
    uint8_t* land = target.dst + *done;
    if (reduce) {
      if (bounce_.size() < kReduceStep) bounce_.resize(kReduceStep);
      land = bounce_.data();
    }
    iovec local{land, step};
    iovec remote{reinterpret_cast<void*>(desc.addr + *done), step};
    ssize_t n = process_vm_readv(peer_pid_, &local, 1, &remote, 1, 0);
    if (n <= 0) {
      if (errno == ESRCH || peer_closed_->load()) return PeerGone();
      return ErrnoError("process_vm_readv from rank " + std::to_string(peer_rank_), errno);
    }
    size_t got = static_cast<size_t>(n);
    if (reduce) {
      got = got / target.elem_size * target.elem_size;
      Deliver(target, *done, bounce_.data(), got);
    }
    *done += got;
    budget -= std::min(budget, got);
  }
  if (*done == bytes) {
    ++recv_tail_;
    recv_ring_->tail.store(recv_tail_, std::memory_order_release);
    RingDoorbell(peer_bell_);
  }
  return Status::Ok();
}

Status ShmChannel::ProgressSend(const uint8_t* src, size_t bytes, const CallDescriptor* tag,
                                size_t* done) {
  if (send_by_address_ && bytes >= cma_threshold_) {
    if (tag != nullptr) timing_call_ = false;  // (no slots: nothing to choose)
    return SendByAddress(src, bytes, tag, done);
  }
  const uint32_t nslots = peer_->layout().nslots, slot_bytes = peer_->layout().slot_bytes;
  if (*done == 0) {
    if (tag != nullptr) {
      // (Only a call with pieces outside their cells reads the peer's
      // measure: the line it shares with tail is the consumer's, a miss
      // for small calls.)
      if (adaptive_ && bytes > kShmInlineBytes) {
        UpdateVerdict();
        AskForRoundTrips();
      }
      const size_t elem = DatatypeSize(static_cast<batonDataType_t>(tag->datatype));
      call_piece_bytes_ = !Streaming() && tag->count <= kShmHotCallBytes / std::max<size_t>(elem, 1)
                              ? hot_piece_bytes_
                              : slot_bytes;
      call_streams_ = Streaming();
      timing_call_ = false;
      const size_t call_bytes =
          tag->count > SIZE_MAX / std::max<size_t>(elem, 1) ? SIZE_MAX : tag->count * elem;
      const int size_class = adaptive_ ? SlotStoreChooser::ClassOf(call_bytes) : -1;
      if (size_class >= 0)
        call_streams_ = stores_.Open(size_class, call_bytes, size_t{nslots} * slot_bytes, far_,
                                     ShmNowNs(), &timing_call_);
      call_sent_bytes_ = 0;
      call_mark_bytes_ = timing_call_ ? stores_.mark_bytes() : 0;
    }
    if (bytes > kShmInlineBytes && call_piece_bytes_ != piece_bytes_) {
      // Only an empty ring may change where its pieces go.
      if (send_head_ != send_tail_seen_)
        send_tail_seen_ = send_ring_->tail.load(std::memory_order_acquire);
      if (send_head_ == send_tail_seen_) piece_bytes_ = call_piece_bytes_;
    }
  }
  bool published = false;
  while (*done < bytes) {
    if (send_head_ - send_tail_seen_ >= nslots) {
      send_tail_seen_ = send_ring_->tail.load(std::memory_order_acquire);
      if (send_head_ - send_tail_seen_ >= nslots) {
        if (!published && peer_closed_->load(std::memory_order_acquire)) return PeerGone();
        break;
      }
    }
    // (A message that fits a cell fits any piece: pieces are whole pages.)
    size_t piece = std::min<size_t>(bytes - *done, piece_bytes_);
    ShmSlotCell& cell = send_ring_->cells[SlotIndex(send_head_, nslots)];
    bool sampled = false;
    uint64_t stamp = 0;
    if (piece <= kShmInlineBytes) {
      memcpy(cell.inline_data, src + *done, piece);
    } else {
      // Message n's piece at n mod nslots pieces into the ring's data: the
      // nslots pieces that may be in flight never share bytes. A piece
      // smaller than that space starts up to kShmSkewPages pages into it,
      // by n: pieces at one stride of 64 KiB or more all fell on the same
      // cache sets, and 16 KiB pieces ran 1.5x (fast mode) to 4x (slow)
      // slower than 32 KiB ones (docs/performance.md, "Small pieces off
      // one cache set").
      const uint64_t slot_index = SlotIndex(send_head_, nslots);
      const uint64_t room_pages = (piece_bytes_ - RoundUp(piece, kShmDataPage)) / kShmDataPage;
      const uint64_t skew_pages = std::min(slot_index & (kShmSkewPages - 1), room_pages);
      const uint64_t offset = slot_index * uint64_t{piece_bytes_} + skew_pages * kShmDataPage;
      const uint32_t page = static_cast<uint32_t>(offset / kShmDataPage);
      memcpy(cell.inline_data, &page, sizeof(page));
      uint8_t* data = peer_->slot(send_index_, 0) + offset;
      if (call_streams_) {
        StreamCopy(data, src + *done, piece);
      } else {
        memcpy(data, src + *done, piece);
      }
      if (piece >= kShmSampleMinBytes && Sampled(send_head_)) {
        sampled = true;
        stamp = ShmNowNs() - stamp_skew_;
        memcpy(cell.inline_data + kShmStampOffset, &stamp, sizeof(stamp));
      }
    }
    uint32_t size = static_cast<uint32_t>(piece);
    if (*done == 0 && tag != nullptr) {
      CopyCallDescriptor(&cell.tag, *tag);
      cell.tag_fingerprint = tag->Fingerprint();
      size |= kCallTagBit;
    }
    cell.word.store(SlotWord(send_head_, size), std::memory_order_release);
    if (sampled && adaptive_ && gauge_.windows() == 0) AwaitEcho(send_head_, stamp);
    ++send_head_;
    last_sent_piece_ = static_cast<uint32_t>(piece);
    *done += piece;
    published = true;
    if (call_mark_bytes_ != 0 && (call_sent_bytes_ += piece) >= call_mark_bytes_) {
      call_mark_bytes_ = 0;
      call_streams_ = stores_.Mark(ShmNowNs(), call_sent_bytes_);
    }
  }
  if (published) RingDoorbell(peer_bell_);
  return Status::Ok();
}

void ShmChannel::SendsEnded() {
  // The next cell's polled line was last read by the consumer a lap ago:
  // taking it back now spares the next run's publication that transfer
  // (and the doorbell's fence the wait for it). Only where the last piece
  // used that line alone (it fit there, or its data lay in the slot): with
  // its data in the cell's further lines, the consumer's reads of those
  // drew the prefetched line back and calls got slower
  // (docs/performance.md, "The next cell taken back early").
  constexpr size_t kPolledLineBytes = 64;
  if (offsetof(ShmSlotCell, inline_data) + last_sent_piece_ <= kPolledLineBytes ||
      last_sent_piece_ > kShmInlineBytes)
    PrefetchForWrite(&send_ring_->cells[SlotIndex(send_head_, peer_->layout().nslots)]);
}

Status ShmChannel::ProgressRecv(const RecvTarget& target, size_t bytes, size_t* done) {
  const uint32_t nslots = own_->layout().nslots;
  bool consumed = false;
  while (*done < bytes) {
    const ShmSlotCell& cell = recv_ring_->cells[SlotIndex(recv_tail_, nslots)];
    uint64_t word = cell.word.load(std::memory_order_acquire);
    uint64_t seen_at = 0;
    if (!SlotPublished(word, recv_tail_) && !consumed && target.idle && adaptive_ &&
        last_piece_large_ && Sampled(recv_tail_))
      word = AwaitSampledPiece(cell, &seen_at);
    if (!SlotPublished(word, recv_tail_)) {
      if (consumed || !peer_closed_->load(std::memory_order_acquire)) break;
      // Re-check: data published just before the peer left is still good.
      word = cell.word.load(std::memory_order_acquire);
      if (!SlotPublished(word, recv_tail_)) return PeerGone();
    }
    uint32_t piece = static_cast<uint32_t>(word);
    if (*done == 0) {
      // Matching fingerprints settle the common case in the polled line.
      const bool tagged = piece & kCallTagBit;
      if (!(tagged && target.opens != nullptr &&
            cell.tag_fingerprint == target.opens->Fingerprint()))
        BATON_RETURN_IF_ERROR(CheckOpening(target, tagged ? &cell.tag : nullptr));
    }
    piece &= ~kCallTagBit;
    if (piece & kCmaDescriptorBit) {
      // (A partly read descriptor stays at the tail until the last byte:
      // this call continues it.)
      CmaDescriptor desc;
      memcpy(&desc, cell.inline_data, sizeof(desc));
      return RecvByAddress(target, desc, bytes, done);
    }
    // Baton never publishes an empty piece, one larger than a slot, or, in
    // a reduction, one that splits an element (sizes are powers of two).
    if (piece == 0 || piece > own_->layout().slot_bytes ||
        (target.reduce_with != nullptr && (piece & (target.elem_size - 1)) != 0))
      return RemoteError("rank " + std::to_string(peer_rank_) + " wrote a malformed slot (" +
                         std::to_string(piece) + " bytes; slots hold " +
                         std::to_string(own_->layout().slot_bytes) + ")");
    if (piece > bytes - *done) return Mismatch(CallMismatch::Kind::kSize, nullptr, 0);
    const uint8_t* data = cell.inline_data;
    if (piece > kShmInlineBytes) {
      uint32_t page;
      memcpy(&page, cell.inline_data, sizeof(page));
      const uint64_t offset = uint64_t{page} * kShmDataPage;
      if (offset + piece > uint64_t{nslots} * own_->layout().slot_bytes)
        return RemoteError("rank " + std::to_string(peer_rank_) + " put " + std::to_string(piece) +
                           " bytes at offset " + std::to_string(offset) +
                           " of a ring's data, outside it");
      data = own_->slot(recv_index_, 0) + offset;
      // (A smaller piece's stamp is a lap old.)
      if (seen_at != 0 && piece >= kShmSampleMinBytes) MeasureLineTransfer(cell, seen_at);
    }
    last_piece_large_ = piece >= kShmSampleMinBytes;
    Deliver(target, *done, data, piece);
    ++recv_tail_;
    recv_ring_->tail.store(recv_tail_, std::memory_order_release);
    *done += piece;
    consumed = true;
  }
  // The producer may be waiting for a free slot.
  if (consumed) RingDoorbell(peer_bell_);
  return Status::Ok();
}

Status ShmChannel::PeekOpening(bool* ready, bool* tagged, CallDescriptor* tag) {
  const ShmSlotCell& cell = recv_ring_->cells[SlotIndex(recv_tail_, own_->layout().nslots)];
  uint64_t word = cell.word.load(std::memory_order_acquire);
  if (!SlotPublished(word, recv_tail_)) {
    *ready = false;
    *tagged = false;
    if (!peer_closed_->load(std::memory_order_acquire)) return Status::Ok();
    // Re-check: a message published just before the peer left still counts.
    word = cell.word.load(std::memory_order_acquire);
    if (!SlotPublished(word, recv_tail_)) return PeerGone();
  }
  *ready = true;
  // The tag was written before the word was published (release).
  *tagged = (static_cast<uint32_t>(word) & kCallTagBit) != 0;
  if (*tagged) CopyCallDescriptor(tag, cell.tag);
  return Status::Ok();
}

}  // namespace baton
