// Shared-memory transport between ranks of one host.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/call_descriptor.h"
#include "base/cpu.h"
#include "base/status.h"
#include "transport/channel.h"
#include "transport/doorbell.h"
#include "transport/shm_stores.h"

namespace baton {

constexpr uint32_t kShmMaxSlots = 256;
// Segments up to this size are faulted in whole at creation (8 local ranks
// at the default BATON_BUFFSIZE); larger ones page by page as slots are used.
constexpr size_t kShmPopulateAllBytes = size_t(32) << 20;
// Bounds a peer's segment header must respect (one ring per local peer;
// BATON_BUFFSIZE split into slots of at most 1 GiB).
constexpr uint32_t kShmMaxRings = 1u << 16;
constexpr uint32_t kShmMaxSlotBytes = 1u << 30;

// Where message `seq` of a ring of `nslots` slots goes: a mask, since slot
// counts are powers of two (a division here is on every message's path).
inline uint64_t SlotIndex(uint64_t seq, uint32_t nslots) {
  return seq & (nslots - 1);
}

// Whether a slot cell's word (ShmSlotCell::word) says that message `slot`
// is published there.
inline bool SlotPublished(uint64_t word, uint64_t slot) {
  return static_cast<uint32_t>(word >> 32) == static_cast<uint32_t>(slot) + 1;
}
// The clock that stamps sampled pieces and times round trips: the same on
// every core.
inline uint64_t ShmNowNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

// Pieces of at most this many bytes travel inside their slot's cell.
constexpr uint32_t kShmInlineBytes = 472;

// A call of at most kShmHotCallBytes (its count times its datatype's size)
// sends its pieces in kShmHotWindowBytes / nslots (64 KiB) each, so that the
// data of the ring's nslots pieces in flight stays within its first
// kShmHotWindowBytes, in cache beside the call's buffers; larger calls,
// whose buffers stream from memory anyway, fill whole slots and get the
// ring's whole depth (docs/performance.md, "Shared-memory rings: a hot
// window for calls that fit the cache").
constexpr size_t kShmHotWindowBytes = size_t(2) << 20;
constexpr size_t kShmHotCallBytes = size_t(8) << 20;
static_assert(SlotStoreChooser::kFloorBytes == kShmHotCallBytes,
              "the stores are chosen by measure for the calls the hot window does not take");
// Where a piece's data lies in its ring, in units of this many bytes.
constexpr size_t kShmDataPage = 4096;
// A piece smaller than its ring's piece size is placed up to this many
// pages (a power of two) into its space, so that small pieces spread over
// the cache's sets (ShmChannel::ProgressSend).
constexpr uint64_t kShmSkewPages = 16;
// The size of a hot call's pieces in a ring of `nslots` slots of
// `slot_bytes`.
uint32_t HotPieceBytes(uint32_t nslots, uint32_t slot_bytes);

// The control word of one slot and, for small pieces, the data itself: a
// consumer polling for the next message finds the data in the same and the
// next few cache lines, instead of a separate head counter, size table and
// data slot (three line transfers for an 8-byte message, and slots that
// cycle through BATON_BUFFSIZE of memory, so every small message also
// missed in cache). The cells of a ring stay cache-resident.
struct alignas(kCacheLinePad) ShmSlotCell {
  // (uint32(slot number) + 1) << 32 | piece size (or kCmaDescriptorBit),
  // stored last with release: the consumer of slot n waits for tag n + 1,
  // which also tells a fresh piece from the one a lap earlier.
  std::atomic<uint64_t> word;
  // When the piece opens a call on this ring (kCallTagBit): the call's
  // descriptor's fingerprint, in the polled line (a match costs no extra
  // line transfer and one more store there), and the descriptor itself in
  // the cell's last line, read only when the fingerprints differ.
  uint64_t tag_fingerprint;
  uint8_t inline_data[kShmInlineBytes];
  CallDescriptor tag;
};
static_assert(sizeof(ShmSlotCell) == 512, "a slot cell is eight 64-byte lines (four of 128)");

// One direction of a shared-memory connection: a ring of fixed-size slots
// that lives in the receiver's segment. The producer fills a slot (or, for
// small pieces, the slot's cell) and publishes it with the cell's word; the
// consumer reduces or copies straight out of it and frees it by bumping
// `tail`. Slots keep element boundaries aligned, so a reduction never
// straddles the wrap. A piece too large for its cell names where its data
// lies (in kShmDataPage units) in the cell's first inline bytes: piece n
// at (n mod nslots) pieces into the ring's data, with the piece size the
// producer's choice per call (HotPieceBytes or a whole slot), changed only
// while the ring is empty.
struct ShmRing {
  alignas(kCacheLinePad) std::atomic<uint64_t> tail;  // slots consumed
  // The consumer's latest measure of this direction's line transfer
  // (LineTransferGauge: its clock minus the producer's, so it holds the
  // two cores' clock offset too) and how many it has published (0: none
  // yet; the count is stored last, with release). Beside tail, which the
  // producer polls anyway.
  std::atomic<int64_t> oneway_ns;
  std::atomic<uint32_t> oneway_count;
  // The consumer's half of a round trip its producer times on its own
  // clock, for a ring whose data flows one way (no reverse ring to
  // measure): ProbeWord(piece, false) while the consumer polls for sampled
  // piece `piece`, ProbeWord(piece, true) as soon as it sees it, 0 once it
  // gave up.
  std::atomic<uint64_t> probe;
  // Set by such a producer while it wants round trips (AskForRoundTrips):
  // its consumer then polls a sampled piece for kShmAskedSpinNs.
  std::atomic<uint32_t> wants_round_trips;
  // The producer's round number in the ping-pong of a pair that connects
  // (ShmChannel::MeasureAtConnect), which its consumer answers.
  std::atomic<uint64_t> ping;
  ShmSlotCell cells[kShmMaxSlots];
};

// How long a line takes to cross between two ranks, measured on the
// messages themselves, for rings whose ranks the topology puts in one cache
// but a virtual machine's host may not (docs/performance.md, "A ring that
// measures its line transfers"). The producer stamps every
// kShmSampleEvery-th piece of at least kShmSampleMinBytes with the clock,
// just before publishing it; a consumer that polls for that piece and finds
// it missing (its previous piece being that large too, so that small calls
// never wait here, and its executor having nothing else to do,
// RecvTarget::idle) polls that one cell for at most kShmSampleSpinNs and, if the
// piece comes, takes the time it saw it minus the stamp as a sample (an
// executor's loop between two polls would add its own length). A window's
// minimum is one transfer plus the offset between the two cores' clocks,
// which this VM's host lets reach hundreds of ns either way; the sum of the
// two directions' minima is a round trip, in which the offset cancels.
// A producer that has no reverse ring's measure (its data flows one way, as
// around a ring of more than two ranks) times round trips itself: right
// after publishing a sampled piece it reads the consumer's probe and, if
// the consumer polls for that piece, waits for the probe to say it was
// seen; the time from its stamp is two transfers on one clock. In the slow
// mode a piece seldom lands within a consumer's kShmSampleSpinNs, and a
// longer poll on every sampled piece cost 8% at 512 KiB on 4 ranks in the
// fast one, so the producer asks for the longer poll only until it has a
// window, and again once that is kShmRemeasureNs old.
// Samples above kShmSampleMaxNs (a rank descheduled: ranks that share a
// core) are dropped.
constexpr uint64_t kShmSampleEvery = 4;
// Smaller pieces read 170-215 ns where a line takes under 100 (the fast
// mode; docs/performance.md, "Small pieces do not measure"), enough to
// call every fresh ring far: the stamp is read while the piece's own
// stores still wait for their lines.
constexpr uint32_t kShmSampleMinBytes = 32 << 10;
constexpr uint32_t kShmSampleWindow = 8;
constexpr uint64_t kShmSampleSpinNs = 500;
constexpr uint64_t kShmAskedSpinNs = 1500;
constexpr uint64_t kShmRemeasureNs = 1000000000;
constexpr int64_t kShmSampleMaxNs = 1500;
// Half a round trip above kShmFarLineNs makes a ring far (within one cache
// a line crosses in 20-120 ns, between sockets, or on a VM whose host put
// the two vCPUs there, in 150-300 ns); a far ring turns near again below
// kShmNearLineNs.
constexpr int64_t kShmFarLineNs = 150;
constexpr int64_t kShmNearLineNs = 120;
// The ping-pong of a pair that connects (ShmChannel::MeasureAtConnect):
// round trips, how long a rank waits for its peer to start (both map the
// other's ring first, which takes up to a few ms for large rings) and for
// each answer after, and how many samples under kShmSampleMaxNs it needs
// for a verdict.
constexpr uint64_t kShmConnectPings = 16;
constexpr uint64_t kShmConnectStartNs = 20000000;
constexpr uint64_t kShmConnectAnswerNs = 100000;
constexpr int kShmConnectMinSamples = 4;
// Where the stamp lies in a sampled cell (after the page number).
constexpr size_t kShmStampOffset = 8;

class LineTransferGauge {
 public:
  // Adds one sample (ns, signed: the clocks' offset may exceed the
  // transfer); true when it completed a window (read it with last_min_ns()).
  bool Add(int64_t ns) {
    if (ns > kShmSampleMaxNs) return false;
    window_min_ = std::min(window_min_, ns);
    if (++window_count_ < kShmSampleWindow) return false;
    last_min_ = std::min(window_min_, previous_min_);
    previous_min_ = window_min_;
    window_min_ = INT64_MAX;
    window_count_ = 0;
    ++windows_;
    return true;
  }
  // The lower minimum of the last two windows (of the first, after one):
  // in the fast mode a window now and then read every sample 5-10x slower
  // (the vCPU held up, a few ms), which alone turned a near ring far and a
  // 4 MiB allreduce 1.35x slower until the next window (docs/performance.md,
  // "One slow window is not a verdict").
  int64_t last_min_ns() const { return last_min_; }
  uint32_t windows() const { return windows_; }

 private:
  int64_t window_min_ = INT64_MAX, previous_min_ = INT64_MAX, last_min_ = 0;
  uint32_t window_count_ = 0, windows_ = 0;
};

// Whether a ring whose lines take `round_trip` ns there and back is far,
// given whether it was.
inline bool RoundTripIsFar(bool was_far, int64_t round_trip) {
  return round_trip / 2 > (was_far ? kShmNearLineNs : kShmFarLineNs);
}
// The same for the two directions' measures `there` and `back` (the
// consumers' window minima, each with the clocks' offset).
inline bool LinesAreFar(bool was_far, int64_t there, int64_t back) {
  return RoundTripIsFar(was_far, there + back);
}
// A ShmRing's probe word for piece `piece`.
inline uint64_t ProbeWord(uint64_t piece, bool seen) {
  return ((piece + 1) << 1) | (seen ? 1 : 0);
}

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
  // Cross Memory Attach probe: the address, in the owner's own memory, of
  // a word holding probe_value; a peer that can read it with
  // process_vm_readv may be sent descriptors instead of data.
  uint64_t probe_addr;
  uint64_t probe_value;
};

// A rank's word on the collective it is in, for registered buffers
// (comm/host_ipc.cc): in the spare half of its segment's header page, so
// peers read it without a message. `state` is call << 2 | kMailbox*; a
// record (opaque here) is written between kMailboxWriting and
// kMailboxRecord, word by word, so a reader that sees the same state before
// and after copying it has a whole record (a seqlock). An ordinary call
// writes its descriptor there instead, in the state's line, and ends with
// kMailboxNoRecord: a rank on the lines names from it the call a peer made
// instead (comm/lines.cc).
inline constexpr uint64_t kMailboxWriting = 1;
inline constexpr uint64_t kMailboxNoRecord = 2;  // this call's buffers are not registered
inline constexpr uint64_t kMailboxRecord = 3;
inline constexpr size_t kShmMailboxOffset = 2048;
inline constexpr size_t kShmMailboxWords = 56;
struct ShmCallMailbox {
  alignas(kCacheLinePad) std::atomic<uint64_t> state;
  std::atomic<uint64_t> words[kShmMailboxWords];
  // Steps this rank has completed in registered calls so far (chunks
  // reduced, phases passed), which peers wait for; a line of its own.
  alignas(kCacheLinePad) std::atomic<uint64_t> progress;
};
static_assert(sizeof(ShmSegmentHeader) <= kShmMailboxOffset, "the mailbox follows the header");

// A rank's input to a small allreduce that every rank reads straight from
// its peers' segments (comm/lines.cc): two buffers, the call's number
// choosing one by its parity. The data starts in the line that holds the
// number, so an input of up to 32 bytes crosses between cores as one
// line. A rank writes call k + 2 into a buffer only after it has read
// every peer's input to call k + 1, which each peer published after it
// had read call k: so nobody still reads what it overwrites, and no second
// meeting per call is needed. In pages of their own after the rings: 32
// KiB and a line each.
inline constexpr size_t kShmLineBufferBytes = 64 + 32768;
struct alignas(kCacheLinePad) ShmLineBuffer {
  std::atomic<uint64_t> call;  // the lines call whose input `data` holds (0: none yet)
  CallDescriptor descriptor;   // the call as this rank numbered it: ranks that disagree fail
  uint8_t data[kShmLineBufferBytes - 8 - sizeof(CallDescriptor)];
};
struct ShmLines {
  ShmLineBuffer buffer[2];
  // 0, or the first lines call this rank had not finished when it gave up
  // its communicator (written after its failure notes): a peer waiting for
  // that call's line, or a later one, fails at once instead of at its
  // deadline, and one still reading an earlier call finishes it.
  alignas(kCacheLinePad) std::atomic<uint64_t> gave_up;
};
inline constexpr size_t kShmLineBytes = sizeof(ShmLineBuffer::data);
inline constexpr size_t kShmLinesBytes =
    (sizeof(ShmLines) + kShmDataPage - 1) / kShmDataPage * kShmDataPage;
// Where a segment's first ring starts, after its header page.
inline constexpr size_t kShmRingsOffset = 4096;
static_assert(kShmMailboxOffset + sizeof(ShmCallMailbox) <= kShmRingsOffset,
              "the mailbox fits the header page");

// A slot whose size has this bit set holds a CmaDescriptor instead of
// data: the consumer reads the message straight out of the producer's
// memory and frees the slot when done, which is the producer's ack.
constexpr uint32_t kCmaDescriptorBit = 0x80000000u;
// A slot whose size has this bit set opens a call: its cell's tag holds the
// call's descriptor.
constexpr uint32_t kCallTagBit = 0x40000000u;
struct CmaDescriptor {
  uint64_t addr;
  uint64_t bytes;
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
  void Unlink();
  uint8_t* base() const { return base_; }
  size_t size() const { return size_; }
  ShmSegmentHeader* header() const { return reinterpret_cast<ShmSegmentHeader*>(base_); }
  ShmCallMailbox* mailbox() const {
    return reinterpret_cast<ShmCallMailbox*>(base_ + kShmMailboxOffset);
  }
  // After the rings, which keep their place at kShmRingsOffset.
  ShmLines* lines() const {
    return reinterpret_cast<ShmLines*>(base_ + kShmRingsOffset +
                                       layout_.nrings * layout_.ring_stride);
  }
  // The ring and slot geometry, taken from the header once (written by
  // InitShmSegment for our own segment, checked against the mapping's size
  // when a peer's is opened): addresses never depend on what a peer writes
  // into the shared header later.
  struct Layout {
    uint32_t nrings = 0, nslots = 0, slot_bytes = 0;
    uint64_t ring_stride = 0, data_offset = 0;
  };
  const Layout& layout() const { return layout_; }
  ShmRing* ring(uint32_t index) const {
    return reinterpret_cast<ShmRing*>(base_ + kShmRingsOffset + index * layout_.ring_stride);
  }
  // Maps ring `index` of a peer's segment into this process now when its
  // owner faulted the segment in at creation (kShmPopulateAllBytes), so
  // that no message pays a page's first fault here.
  void MapRing(uint32_t index) const;
  uint8_t* slot(uint32_t ring_index, uint64_t slot_no) const {
    return reinterpret_cast<uint8_t*>(ring(ring_index)) + layout_.data_offset +
           SlotIndex(slot_no, layout_.nslots) * layout_.slot_bytes;
  }

 private:
  std::string name_;
  uint8_t* base_ = nullptr;
  size_t size_ = 0;
  bool owner_linked_ = false;
  Layout layout_;
  friend void InitShmSegment(ShmSegment* seg, uint32_t nrings, uint32_t nslots,
                             uint32_t slot_bytes);
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
  // How the producer writes pieces too large for their cell: kHot, ranks
  // that share a last-level cache: cached stores, and calls that fit the
  // cache in hot pieces (HotPieceBytes); kCached: cached stores, whole
  // slots; kStreaming: streaming stores (to memory), whole slots.
  // With `adaptive`, the consumer measures its line transfers and a kHot
  // or kCached producer streams whole slots while the round trip that its
  // peer's measure and its own make is far (LinesAreFar).
  enum class Copying { kHot, kCached, kStreaming };
  ShmChannel(ShmSegment* own, uint32_t recv_index, ShmSegment* peer, uint32_t send_index,
             const std::atomic<bool>* peer_closed, int peer_rank, Copying copying = Copying::kHot,
             bool adaptive = false);
  // Enables the single-copy path: sends of at least `threshold` bytes go by
  // address when the peer can read our memory (`peer_reads_us`); the peer's
  // descriptors are read from process `peer_pid`.
  void EnableCma(bool peer_reads_us, int peer_pid, uint64_t threshold);
  const ShmSegment* peer_segment() const { return peer_; }
  // As the pair connects, on both ranks at once (`first` on exactly one):
  // a ping-pong of one line each way (ShmRing::ping), whose fastest round
  // trip gives an adaptive ring its first verdict (RoundTripIsFar) before
  // any piece is sampled: small pieces never are, and in a virtual
  // machine whose host puts the two vCPUs far apart the sampled ones came
  // too seldom for the first thousand calls (docs/performance.md, "A verdict
  // as the pair connects"). Bounded: a peer that does not answer in time
  // leaves the ring as it was. Returns the round trip (0: none).
  int64_t MeasureAtConnect(bool first);
  // Whether the producer writes pieces with streaming stores by the
  // latency verdict (which changes only as a call opens, so a call's pieces
  // all go alike); an adaptive ring's calls over kShmHotCallBytes go as
  // measured instead (SlotStoreChooser).
  bool Streaming() const { return copying_ == Copying::kStreaming || far_; }
  // Tests: stamps read `ns` early, as if every line took that much longer
  // to reach the consumer.
  void SkewStampsForTesting(uint64_t ns) { stamp_skew_ = ns; }
  Kind kind() const override { return Kind::kShm; }
  Status ProgressSend(const uint8_t* src, size_t bytes, const CallDescriptor* tag,
                      size_t* done) override;
  Status ProgressRecv(const RecvTarget& target, size_t bytes, size_t* done) override;
  Status PeekOpening(bool* ready, bool* tagged, CallDescriptor* tag) override;
  void CallEnded() override;
  void SendsEnded() override;

 private:
  Status PeerGone() const;
  // Adds the sample a freshly published, sampled piece gives (see
  // LineTransferGauge) and publishes each window's minimum.
  void MeasureLineTransfer(const ShmSlotCell& cell, uint64_t seen_at);
  // The producer's verdict from both directions' latest measures.
  void UpdateVerdict();
  // Polls the cell of a sampled piece, which is missing, for at most
  // kShmSampleSpinNs; returns its word and, if it came, when (seen_at).
  uint64_t AwaitSampledPiece(const ShmSlotCell& cell, uint64_t* seen_at);
  // For a producer without a reverse measure, as a call opens: asks its
  // consumer for longer polls while it has no recent round trips.
  void AskForRoundTrips();
  // For a producer without a reverse measure, after publishing sampled
  // piece `piece` stamped at `stamp`: if the consumer polls for it (its
  // probe), waits at most kShmSampleMaxNs for the consumer to see it and
  // adds the round trip.
  void AwaitEcho(uint64_t piece, uint64_t stamp);
  Status SendByAddress(const uint8_t* src, size_t bytes, const CallDescriptor* tag, size_t* done);
  Status RecvByAddress(const RecvTarget& target, const CmaDescriptor& desc, size_t bytes,
                       size_t* done);

  ShmSegment* own_;
  ShmSegment* peer_;
  uint32_t recv_index_, send_index_;
  ShmRing* send_ring_;
  ShmRing* recv_ring_;
  Doorbell* peer_bell_;
  const std::atomic<bool>* peer_closed_;
  int peer_rank_;
  uint64_t send_head_ = 0, send_tail_seen_ = 0;  // producer's view
  Copying copying_;
  bool adaptive_;
  uint64_t stamp_skew_ = 0;
  // Sizes of pieces too large for their cell (see ShmRing): a hot call's
  // (a whole slot unless kHot), the current call's, and those the ring
  // holds now (the current call's once the ring has drained).
  uint32_t hot_piece_bytes_, call_piece_bytes_, piece_bytes_;
  uint64_t recv_tail_ = 0;         // consumer's view
  uint32_t last_sent_piece_ = 0;   // the producer's last piece's size
  bool last_piece_large_ = false;  // the consumer's last piece was kShmSampleMinBytes or more
  LineTransferGauge gauge_;
  LineTransferGauge round_trips_;  // the producer's own, on its clock (AwaitEcho)
  uint64_t round_trips_at_ = 0;    // when its latest window completed
  bool asking_ = false;            // wants_round_trips is set
  bool far_ = false;  // the producer's verdict (LinesAreFar), changed only as a call opens
  bool call_streams_;  // how the open call's pieces are written (streaming stores or not)
  // The timed call's bytes sent so far, and where its mark lies (0: none,
  // or passed; SlotStoreChooser::Mark).
  size_t call_sent_bytes_ = 0, call_mark_bytes_ = 0;
  SlotStoreChooser stores_;

  bool send_by_address_ = false;
  int peer_pid_ = 0;
  uint64_t cma_threshold_ = ~0ull;
  bool desc_pending_ = false;  // a descriptor is posted, awaiting the ack
  uint64_t desc_slot_ = 0;
  std::vector<uint8_t> bounce_;  // cache-sized landing area for reductions
};

// Reads the probe of a peer's segment; true when process_vm_readv works.
bool ProbeCma(int peer_pid, const ShmSegment& peer_segment);
// The same, saying why not: 0 when readable, else the errno (ESRCH also
// when the pid names another process, EINVAL when the peer offers no probe).
int ProbeCmaError(int peer_pid, const ShmSegment& peer_segment);
// Fills the probe fields of our own segment.
void InitCmaProbe(ShmSegment* own);

}  // namespace baton
