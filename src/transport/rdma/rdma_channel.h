// RdmaChannel: the Channel protocol over reliable-connected queue pairs
// (verbs.h), NCCL's IB transport pattern.
//
// Each direction has `slots` receive slots of `slot_bytes` in the
// receiver's registered memory. The sender copies a chunk of the message
// into its own registered staging slot and RDMA-writes it, with immediate
// data, into the receiver's slot of the same index; the immediate carries
// the chunk's sequence number (slot = seq % slots). The first chunk of a
// message starts with a 64-byte header (magic and version, size, call
// descriptor), checked before any byte is delivered.
//
// Flow control is a clear-to-send FIFO in the sender's registered memory,
// one word per slot: after delivering chunk seq the receiver RDMA-writes
// seq / slots + 1 into word seq % slots, so the sender may write chunk s
// once word s % slots >= s / slots. Those writes carry immediate data too,
// so a sender out of credits sleeps on its completion channel rather than
// spinning on memory.
//
// Chunks are spread over the connection's queue pairs round-robin; the
// receiver consumes them in sequence order whatever order the completions
// come in. Writes that fit the queue pair's inline data (credits, small
// messages) are posted inline, so the NIC need not read them back from
// memory. One write in `signal_every` per queue pair is signaled; its
// completion frees the send queue entries of the unsignaled ones before it
// (a failed write completes anyway: error completions fail the channel,
// retry exceeded meaning the peer is gone), so the count of entries in use
// stays below the send queue's depth.
//
// Zero-copy: a message of at least `zcopy_min` bytes whose source lies in
// a registered user buffer (UserMemory, registered with the NIC through
// the shared UserMrCache) is offered in place by a flag in its header; its
// first chunk carries data as usual while the answer travels back, and the
// rest waits for the answer. A receiver whose target is a plain
// copy into a registered buffer answers yes with the buffer's address and
// rkey (a write with immediate into a reply record beside the sender's
// clear-to-send words), others no. On yes the sender writes the rest of the
// message, from what it had posted on, straight from its buffer into the
// receiver's, and ends with a header-only "done" chunk (flagged in its
// immediate data) on the same queue pair, which the receiver sees after the
// data (RC order). The sender's call is over once the done chunk's credit
// is back (the data has landed, the source may change). On no, the rest
// follows through the slots (the answer's round trip overlaps the first
// chunk). Other messages never look at the registrations.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "base/fd.h"
#include "transport/channel.h"
#include "transport/rdma/user_mr_cache.h"
#include "transport/rdma/verbs.h"
#include "transport/user_memory.h"

namespace baton::rdma {

// The start of the first chunk of every message.
struct RdmaMessageHeader {
  uint32_t magic = 0;
  uint32_t flags = 0;  // kRdmaHeaderTagged: `tag` is set
  uint64_t bytes = 0;
  CallDescriptor tag;
  uint64_t direct_from = 0;  // a done chunk: the bytes from here on were written in place
  uint8_t pad[16] = {};
};
static_assert(sizeof(RdmaMessageHeader) == 64, "the header fills one 64-byte unit");
inline constexpr uint32_t kRdmaHeaderMagic = 0x42544e82;  // "BTN", RDMA format 2 (offers)
inline constexpr uint32_t kRdmaHeaderTagged = 1;
inline constexpr uint32_t kRdmaHeaderOffer = 2;  // zero-copy offered (the chunk has data as usual)
inline constexpr uint32_t kRdmaHeaderDone = 4;   // the in-place write is complete

// The receiver's answer to an offer, written into the sender's memory
// after its clear-to-send words: record offer_seq % kReplyRing of a ring,
// from the same record of a ring at the receiver. A record is rewritten
// 64 offers later only; by then the sender has polled the answer that
// used it and the NIC has read its source (later writes on queue pair 0,
// credits among them, completed), so no answer is read torn.
struct RdmaDirectReply {
  uint64_t addr = 0;  // where the message goes (accepted)
  uint32_t rkey = 0;
  uint32_t accept = 0;
  uint64_t offer_seq = 0;  // the offer chunk's sequence number
  uint64_t reserved = 0;
};
inline constexpr size_t kCtsBytes = 256 * sizeof(uint64_t);  // kMaxSlots words
inline constexpr uint32_t kReplyRing = 64;
inline constexpr int kMaxQpsPerPeer = 8;
inline constexpr uint32_t kMaxSlots = 256;
inline constexpr int kMaxSignalEvery = 64;
inline constexpr int kMaxInlineBytes = 1024;  // what BATON_IB_INLINE may ask for

// This end's memory, as the peer must know it (exchanged at set-up).
struct RdmaEndpoint {
  uint32_t slots = 0;
  uint32_t slot_bytes = 0;
  uint64_t slots_addr = 0;  // receive slots
  uint32_t slots_rkey = 0;
  uint32_t cts_rkey = 0;
  uint64_t cts_addr = 0;  // clear-to-send words, written by the peer
  uint32_t nqps = 0;
  uint32_t reserved = 0;
  QpAddress qps[kMaxQpsPerPeer];
};

class RdmaChannel : public Channel {
 public:
  struct Options {
    uint32_t slots = 8;
    uint32_t slot_bytes = 512 << 10;  // a multiple of 64
    int qps = 1;
    int inline_bytes = 128;  // inline writes asked of each queue pair (0: none)
    int signal_every = 16;   // 1 to kMaxSignalEvery: 1 signals every write
    // Zero-copy for messages of at least this many bytes between
    // registered buffers (0: never). Needs user_memory and mr_cache.
    uint64_t zcopy_min = 0;
    UserMemory* user_memory = nullptr;
    std::shared_ptr<UserMrCache> mr_cache;
  };
  // What was posted, for the tests' accounting.
  struct Counters {
    uint64_t writes = 0;           // chunks and credits
    uint64_t signaled = 0;         // of them, signaled
    uint64_t inlined = 0;          // of them, inline
    uint64_t completed = 0;        // write completions polled
    uint64_t direct_sent = 0;      // messages written in place (zero-copy)
    uint64_t direct_received = 0;  // messages that arrived in place
    uint64_t declined = 0;         // offers this end answered no
  };
  // Creates the local half: memory, completion queue, queue pairs with
  // their receives posted. `peer_closed` (may be null) is the watchdog's
  // flag for the peer's control socket.
  static Status Create(std::shared_ptr<Context> context, const Options& options, int peer_rank,
                       const std::atomic<bool>* peer_closed, std::unique_ptr<RdmaChannel>* out);
  ~RdmaChannel() override;
  RdmaEndpoint endpoint() const;
  // Connects to the peer's half (its endpoint() from set-up).
  Status Connect(const RdmaEndpoint& remote);

  Kind kind() const override { return Kind::kRdma; }
  Status ProgressSend(const uint8_t* src, size_t bytes, const CallDescriptor* tag,
                      size_t* done) override;
  Status ProgressRecv(const RecvTarget& target, size_t bytes, size_t* done) override;
  void AddWaitFds(bool sending, int peer, WaitSet* ws) const override;
  // The completion channel's fd and the channel's own wake-up eventfd.
  std::vector<int> fds() const;
  const Counters& counters() const { return counters_; }

 private:
  RdmaChannel() = default;
  // Polls the completion queue (and what AddWaitFds stashed) and applies
  // what came: credits, arrived chunks, errors.
  Status PollCompletions();
  Status Apply(const Completion& c);
  Status Failed() const;
  uint64_t CtsWord(uint32_t slot) const;
  Status PostCts(uint64_t seq);
  // Posts one write with immediate on queue pair q: inline when it fits,
  // signaled when its turn comes.
  Status Post(size_t q, const MemoryRegion& mr, const uint8_t* src, size_t len,
              uint64_t remote_addr, uint32_t rkey, uint32_t imm, bool with_imm = true);
  // Posts the done chunk of an in-place message if its slot has credit.
  bool PostDoneChunk(uint64_t bytes, Status* st);
  // Moves an offered send along (send_direct_); false: on through the slots.
  Status ProgressDirectSend(const uint8_t* src, size_t bytes);
  // Whether this message may be offered in place; sets send_user_mr_.
  bool OfferDirect(const uint8_t* src, size_t bytes);
  // A receiver's answer to an offer (the header chunk at recv_seq_).
  Status AnswerOffer(const RecvTarget& target, size_t bytes);
  Status PostPendingCts();
  int SendDepth() const;

  int peer_rank_ = -1;
  const std::atomic<bool>* peer_closed_ = nullptr;
  Options options_;
  RdmaEndpoint remote_;
  bool connected_ = false;
  Status failure_;

  // Send side.
  uint64_t send_seq_ = 0;     // chunks posted
  bool send_active_ = false;  // a message is part way
  size_t send_off_ = 0;       // of it, bytes posted
  // kOffered: the header offers, the slots carry the data until the answer.
  enum class Direct : uint8_t { kNo, kOffered, kWrite, kDone, kAwaitDone };
  Direct send_direct_ = Direct::kNo;
  uint64_t offer_seq_ = 0, done_seq_ = 0;
  bool reply_arrived_ = false;
  RdmaDirectReply reply_;
  std::shared_ptr<MemoryRegion> send_user_mr_;  // held until the message is over
  // Receive side.
  uint64_t recv_seq_ = 0;         // chunks consumed
  std::vector<int64_t> arrived_;  // per slot: bytes of the chunk there, -1: none
  std::vector<uint64_t> arrived_seq_;
  std::vector<uint8_t> arrived_done_;  // per slot: a done chunk (immediate data says)
  bool recv_active_ = false;
  size_t recv_off_ = 0;
  bool recv_direct_ = false;    // accepted an offer: the done chunk comes next
  bool reply_pending_ = false;  // the answer in cts_out_ waits for room
  uint64_t reply_seq_ = 0;      // the offer it answers
  std::shared_ptr<MemoryRegion> recv_user_mr_;
  bool warned_registration_ = false;  // a user buffer the device refused, said once
  std::vector<int> recvs_to_post_;    // per queue pair
  std::vector<int> outstanding_;      // send queue entries in use, per queue pair
  std::vector<int> unsignaled_;       // writes since the last signaled one, per queue pair
  Counters counters_;
  std::vector<uint64_t> pending_cts_;  // chunks consumed whose credit waits for room

  // Verbs objects, released in reverse order: queue pairs first.
  std::shared_ptr<Context> context_;
  std::unique_ptr<MemoryRegion> recv_slots_, send_staging_, cts_in_, cts_out_;
  std::unique_ptr<CompletionQueue> cq_;
  std::vector<std::unique_ptr<QueuePair>> qps_;
  mutable std::vector<Completion> stashed_;  // polled by AddWaitFds
  Fd ready_fd_;                              // eventfd: stashed_ is not empty
};

}  // namespace baton::rdma
