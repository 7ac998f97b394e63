#include "transport/rdma/rdma_channel.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/log.h"

namespace baton::rdma {

namespace {
constexpr uint32_t kCtsFlag = 0x80000000u;            // immediate data of a credit, not a chunk
constexpr uint32_t kDoneFlag = 0x40000000u;           // a chunk: the done chunk of a message
constexpr uint32_t kSeqMask = 0x3fffffffu;            // a chunk's sequence number
constexpr uint32_t kReplyImm = kCtsFlag | kDoneFlag;  // an answer to an offer, not a credit
// The largest single write of a zero-copy message (verbs allow 2^31 bytes).
constexpr size_t kDirectPiece = size_t{1} << 30;
constexpr int kPollBatch = 32;
// A write completion's wr_id: the queue pair in the low byte, above it the
// send queue entries the completion frees (the unsignaled writes before it
// and itself). Receives carry the queue pair alone.
constexpr int kWrIdQpBits = 8;
}  // namespace

Status RdmaChannel::Create(std::shared_ptr<Context> context, const Options& options, int peer_rank,
                           const std::atomic<bool>* peer_closed,
                           std::unique_ptr<RdmaChannel>* out) {
  if (options.slots < 2 || options.slots > kMaxSlots || options.slot_bytes < 4096 ||
      options.slot_bytes % 64 != 0 || options.qps < 1 || options.qps > kMaxQpsPerPeer ||
      options.signal_every < 1 || options.signal_every > kMaxSignalEvery ||
      options.inline_bytes < 0)
    return InvalidUsage(
        "RDMA channel: slots (2 to 256), slot size (4 KiB or more, a multiple "
        "of 64), queue pairs (1 to 8), signal interval (1 to 64) or inline size out of range");
  std::unique_ptr<RdmaChannel> ch(new RdmaChannel());
  ch->peer_rank_ = peer_rank;
  ch->peer_closed_ = peer_closed;
  ch->options_ = options;
  ch->context_ = std::move(context);
  ch->arrived_.assign(options.slots, -1);
  ch->arrived_seq_.assign(options.slots, 0);
  ch->arrived_done_.assign(options.slots, 0);
  ch->recvs_to_post_.assign(options.qps, 0);
  ch->outstanding_.assign(options.qps, 0);
  ch->unsignaled_.assign(options.qps, 0);
  ch->ready_fd_.reset(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!ch->ready_fd_.valid()) return ErrnoError("RDMA channel: eventfd", errno);
  Context* ctx = ch->context_.get();
  BATON_RETURN_IF_ERROR(
      ctx->AllocRegistered(size_t(options.slots) * options.slot_bytes, &ch->recv_slots_));
  // Clear-to-send words, then the answer to a zero-copy offer.
  static_assert(kCtsBytes == kMaxSlots * sizeof(uint64_t));
  const size_t cts_bytes = kCtsBytes + kReplyRing * sizeof(RdmaDirectReply);
  BATON_RETURN_IF_ERROR(ctx->AllocRegistered(cts_bytes, &ch->cts_in_));
  BATON_RETURN_IF_ERROR(ctx->AllocRegistered(cts_bytes, &ch->cts_out_));
  memset(ch->cts_in_->data(), 0, ch->cts_in_->bytes());
  // Between two polls, which post the receives taken again, a queue pair
  // takes at most `slots` chunks (the peer's credits bound them), 2 x
  // `slots` credits (for the chunks in flight at the last poll and for at
  // most `slots` posted since: ProgressSend polls again after that many)
  // and an answer to an offer or few, so 3 * slots + 8 receives never run
  // out.
  const int recv_depth = 3 * static_cast<int>(options.slots) + 8;
  const int cq_depth = options.qps * (recv_depth + ch->SendDepth()) + 16;
  BATON_RETURN_IF_ERROR(ctx->CreateCq(cq_depth, &ch->cq_));
  for (int q = 0; q < options.qps; ++q) {
    std::unique_ptr<QueuePair> qp;
    BATON_RETURN_IF_ERROR(
        ctx->CreateQp(ch->cq_.get(), ch->SendDepth(), recv_depth, options.inline_bytes, &qp));
    BATON_RETURN_IF_ERROR(qp->PostRecvs(static_cast<uint64_t>(q), recv_depth));
    ch->qps_.push_back(std::move(qp));
  }
  *out = std::move(ch);
  return Status::Ok();
}

RdmaChannel::~RdmaChannel() {
  if (counters_.direct_sent + counters_.direct_received + counters_.declined > 0)
    BATON_INFO(kLogNet,
               "RDMA with rank %d: %llu messages sent and %llu received in place (zero-copy), "
               "%llu offers declined",
               peer_rank_, static_cast<unsigned long long>(counters_.direct_sent),
               static_cast<unsigned long long>(counters_.direct_received),
               static_cast<unsigned long long>(counters_.declined));
}

int RdmaChannel::SendDepth() const {
  return 4 * static_cast<int>(kMaxSlots) + 16;
}

RdmaEndpoint RdmaChannel::endpoint() const {
  RdmaEndpoint e;
  e.slots = options_.slots;
  e.slot_bytes = options_.slot_bytes;
  e.slots_addr = reinterpret_cast<uint64_t>(recv_slots_->data());
  e.slots_rkey = recv_slots_->rkey();
  e.cts_addr = reinterpret_cast<uint64_t>(cts_in_->data());
  e.cts_rkey = cts_in_->rkey();
  e.nqps = static_cast<uint32_t>(qps_.size());
  for (size_t q = 0; q < qps_.size(); ++q) e.qps[q] = qps_[q]->address();
  return e;
}

Status RdmaChannel::Connect(const RdmaEndpoint& remote) {
  if (remote.nqps != qps_.size())
    return InvalidUsage("RDMA: rank " + std::to_string(peer_rank_) + " has " +
                        std::to_string(remote.nqps) + " queue pairs per peer, this rank " +
                        std::to_string(qps_.size()) + " (set BATON_IB_QPS_PER_PEER alike)");
  if (remote.slots < 2 || remote.slots > kMaxSlots || remote.slot_bytes < 4096 ||
      remote.slot_bytes % 64 != 0)
    return InvalidUsage("RDMA: rank " + std::to_string(peer_rank_) + " sent a bad slot layout");
  remote_ = remote;
  BATON_RETURN_IF_ERROR(
      context_->AllocRegistered(size_t(remote.slots) * remote.slot_bytes, &send_staging_));
  for (size_t q = 0; q < qps_.size(); ++q)
    BATON_RETURN_IF_ERROR(
        qps_[q]
            ->Connect(remote.qps[q])
            .WithContext("RDMA connection to rank " + std::to_string(peer_rank_)));
  connected_ = true;
  return Status::Ok();
}

std::vector<int> RdmaChannel::fds() const {
  return {cq_->fd(), ready_fd_.get()};
}

Status RdmaChannel::Failed() const {
  return failure_;
}

uint64_t RdmaChannel::CtsWord(uint32_t slot) const {
  // Written by the peer's NIC; the completion that announced it (or a
  // later one) was polled before, so an acquire load sees it.
  return __atomic_load_n(reinterpret_cast<const uint64_t*>(cts_in_->data()) + slot,
                         __ATOMIC_ACQUIRE);
}

Status RdmaChannel::Apply(const Completion& c) {
  if (!c.ok) {
    const std::string what = "RDMA to/from rank " + std::to_string(peer_rank_) + ": " + c.error;
    if (c.error.find("retry") != std::string::npos)
      failure_ = RemoteError(what + " (the peer died, or the link is down)");
    else
      failure_ = SystemError(what);
    return failure_;
  }
  const size_t q = static_cast<size_t>(c.wr_id & ((1u << kWrIdQpBits) - 1));
  if (q >= qps_.size()) return failure_ = InternalError("RDMA: completion of an unknown QP");
  if (c.op == Completion::Op::kWrite) {
    outstanding_[q] -= static_cast<int>(c.wr_id >> kWrIdQpBits);
    ++counters_.completed;
    return Status::Ok();
  }
  ++recvs_to_post_[q];
  if ((c.imm & kReplyImm) == kReplyImm) {
    // The whole record has landed once its immediate is here; an answer
    // to an earlier offer (its message went through the slots) is dropped.
    const uint32_t index = c.imm & (kReplyRing - 1);
    RdmaDirectReply reply;
    memcpy(&reply, cts_in_->data() + kCtsBytes + index * sizeof(reply), sizeof(reply));
    if (send_direct_ == Direct::kOffered && reply.offer_seq == offer_seq_) {
      reply_ = reply;
      reply_arrived_ = true;
    }
    return Status::Ok();
  }
  if (c.imm & kCtsFlag) return Status::Ok();  // the credit is in cts_in_ already
  const uint64_t delta = (c.imm - recv_seq_) & kSeqMask;
  if (delta >= options_.slots || c.byte_len > options_.slot_bytes)
    return failure_ = InternalError("RDMA: rank " + std::to_string(peer_rank_) +
                                    " wrote a chunk outside the window of slots");
  const uint64_t seq = recv_seq_ + delta;
  const uint32_t slot = static_cast<uint32_t>(seq % options_.slots);
  arrived_[slot] = c.byte_len;
  arrived_seq_[slot] = seq;
  arrived_done_[slot] = (c.imm & kDoneFlag) != 0;
  return Status::Ok();
}

Status RdmaChannel::PollCompletions() {
  if (!failure_.ok()) return failure_;
  uint64_t v;
  if (read(ready_fd_.get(), &v, sizeof(v)) < 0) {
    // EAGAIN: nothing was stashed.
  }
  cq_->DrainEvents();
  std::vector<Completion> stashed;
  stashed.swap(stashed_);
  for (const Completion& c : stashed) BATON_RETURN_IF_ERROR(Apply(c));
  Completion batch[kPollBatch];
  for (;;) {
    int got = 0;
    BATON_RETURN_IF_ERROR(cq_->Poll(batch, kPollBatch, &got));
    for (int i = 0; i < got; ++i) BATON_RETURN_IF_ERROR(Apply(batch[i]));
    if (got < kPollBatch) break;
  }
  for (size_t q = 0; q < qps_.size(); ++q) {
    if (recvs_to_post_[q] == 0) continue;
    BATON_RETURN_IF_ERROR(qps_[q]->PostRecvs(q, recvs_to_post_[q]));
    recvs_to_post_[q] = 0;
  }
  return PostPendingCts();
}

Status RdmaChannel::Post(size_t q, const MemoryRegion& mr, const uint8_t* src, size_t len,
                         uint64_t remote_addr, uint32_t rkey, uint32_t imm, bool with_imm) {
  WriteFlags flags;
  flags.with_imm = with_imm;
  flags.imm = imm;
  flags.inline_data = len <= static_cast<size_t>(qps_[q]->max_inline());
  // SendDepth() is far above signal_every, so a queue pair at its depth
  // always has a signaled write in flight whose completion frees entries.
  flags.signaled = unsignaled_[q] + 1 >= options_.signal_every;
  const uint64_t frees = flags.signaled ? static_cast<uint64_t>(unsignaled_[q]) + 1 : 0;
  BATON_RETURN_IF_ERROR(
      qps_[q]->PostWrite(q | frees << kWrIdQpBits, mr, src, len, remote_addr, rkey, flags));
  unsignaled_[q] = flags.signaled ? 0 : unsignaled_[q] + 1;
  ++outstanding_[q];
  ++counters_.writes;
  counters_.signaled += flags.signaled;
  counters_.inlined += flags.inline_data;
  return Status::Ok();
}

Status RdmaChannel::PostCts(uint64_t seq) {
  pending_cts_.push_back(seq);
  return PostPendingCts();
}

Status RdmaChannel::PostPendingCts() {
  if (reply_pending_ && outstanding_[0] < SendDepth()) {
    const uint32_t index = static_cast<uint32_t>(reply_seq_ % kReplyRing);
    const size_t at = kCtsBytes + index * sizeof(RdmaDirectReply);
    BATON_RETURN_IF_ERROR(Post(0, *cts_out_, cts_out_->data() + at, sizeof(RdmaDirectReply),
                               remote_.cts_addr + at, remote_.cts_rkey, kReplyImm | index));
    reply_pending_ = false;
  }
  while (!pending_cts_.empty()) {
    const uint64_t seq = pending_cts_.front();
    const size_t q = seq % qps_.size();
    if (outstanding_[q] >= SendDepth()) break;
    const uint32_t slot = static_cast<uint32_t>(seq % options_.slots);
    uint64_t* word = reinterpret_cast<uint64_t*>(cts_out_->data()) + slot;
    *word = seq / options_.slots + 1;
    BATON_RETURN_IF_ERROR(Post(q, *cts_out_, reinterpret_cast<uint8_t*>(word), sizeof(*word),
                               remote_.cts_addr + slot * sizeof(uint64_t), remote_.cts_rkey,
                               kCtsFlag | slot));
    pending_cts_.erase(pending_cts_.begin());
  }
  return Status::Ok();
}

bool RdmaChannel::PostDoneChunk(uint64_t bytes, Status* st) {
  const uint64_t seq = send_seq_;
  const uint32_t slot = static_cast<uint32_t>(seq % remote_.slots);
  const size_t q = seq % qps_.size();
  if (CtsWord(slot) < seq / remote_.slots || outstanding_[q] >= SendDepth()) return false;
  RdmaMessageHeader h;
  h.magic = kRdmaHeaderMagic;
  h.flags = kRdmaHeaderDone;
  h.bytes = bytes;
  h.direct_from = send_off_;
  uint8_t* stage = send_staging_->data() + size_t(slot) * remote_.slot_bytes;
  memcpy(stage, &h, sizeof(h));
  *st = Post(q, *send_staging_, stage, sizeof(h),
             remote_.slots_addr + size_t(slot) * remote_.slot_bytes, remote_.slots_rkey,
             static_cast<uint32_t>(seq & kSeqMask) | kDoneFlag);
  if (st->ok()) ++send_seq_;
  return st->ok();
}

bool RdmaChannel::OfferDirect(const uint8_t* src, size_t bytes) {
  UserMemory* memory = options_.user_memory;
  if (memory == nullptr || options_.zcopy_min == 0 || bytes < options_.zcopy_min || memory->none())
    return false;
  UserRange range;
  if (!memory->Find(src, bytes, &range)) return false;
  Status st = options_.mr_cache->Get(range, &send_user_mr_);
  if (!st.ok()) {
    // Still correct through the slots; the device may refuse pinning more.
    if (!warned_registration_)
      BATON_WARN(kLogNet, "RDMA: sending through the slots: %s", st.message().c_str());
    warned_registration_ = true;
    return false;
  }
  return true;
}

Status RdmaChannel::ProgressDirectSend(const uint8_t* src, size_t bytes) {
  if (send_direct_ == Direct::kOffered) {
    // Apply keeps only the answer to this message's offer (chunk
    // offer_seq_); one to an earlier offer is dropped there.
    if (!reply_arrived_) return Status::Ok();
    reply_arrived_ = false;
    if (reply_.accept == 0) {
      send_user_mr_.reset();
      send_direct_ = Direct::kNo;
      return Status::Ok();
    }
    send_direct_ = Direct::kWrite;
  }
  if (send_direct_ == Direct::kWrite) {
    // On the done chunk's queue pair: RC delivers the data before it.
    const size_t q = send_seq_ % qps_.size();
    const size_t left = bytes - send_off_;
    const size_t pieces = (left + kDirectPiece - 1) / kDirectPiece;
    if (outstanding_[q] + static_cast<int>(pieces) >= SendDepth()) return Status::Ok();
    for (size_t off = send_off_; off < bytes; off += kDirectPiece)
      BATON_RETURN_IF_ERROR(Post(q, *send_user_mr_, src + off, std::min(kDirectPiece, bytes - off),
                                 reply_.addr + off, reply_.rkey, 0, /*with_imm=*/false));
    send_direct_ = Direct::kDone;
  }
  if (send_direct_ == Direct::kDone) {
    Status st;
    done_seq_ = send_seq_;
    if (!PostDoneChunk(bytes, &st)) return st;
    send_direct_ = Direct::kAwaitDone;
  }
  // The done chunk's credit: the receiver saw it, so the data has landed.
  const uint32_t slot = static_cast<uint32_t>(done_seq_ % remote_.slots);
  if (CtsWord(slot) < done_seq_ / remote_.slots + 1) return Status::Ok();
  ++counters_.direct_sent;
  send_user_mr_.reset();
  send_direct_ = Direct::kNo;
  send_off_ = bytes;
  return Status::Ok();
}

Status RdmaChannel::ProgressSend(const uint8_t* src, size_t bytes, const CallDescriptor* tag,
                                 size_t* done) {
  if (bytes == 0) return Status::Ok();
  if (!connected_) return InternalError("RDMA channel used before it was connected");
  BATON_RETURN_IF_ERROR(PollCompletions());
  if (!send_active_) {
    send_active_ = true;
    send_off_ = 0;
    if (OfferDirect(src, bytes)) [[unlikely]] {
      send_direct_ = Direct::kOffered;
      offer_seq_ = send_seq_;  // the first chunk's
      reply_arrived_ = false;
    }
  }
  if (send_direct_ != Direct::kNo) [[unlikely]] {
    const uint64_t seq_before = send_seq_;
    BATON_RETURN_IF_ERROR(ProgressDirectSend(src, bytes));
    if (send_direct_ > Direct::kOffered || send_off_ == bytes) {
      *done = send_off_;
      if (send_off_ == bytes) send_active_ = false;
      if (send_seq_ == seq_before && send_off_ < bytes && peer_closed_ != nullptr &&
          peer_closed_->load(std::memory_order_acquire))
        return RemoteError("rank " + std::to_string(peer_rank_) +
                           " closed its connection (process died or aborted)");
      return Status::Ok();
    }
  }
  bool first = send_off_ == 0;
  bool moved = false;
  // Credits read from memory let this loop go on while the peer keeps
  // returning them, and each credit's immediate takes one of this end's
  // posted receives, which only a poll posts again: poll every `slots`
  // chunks, so the receive depth's bound (Create) holds.
  const uint32_t chunks_per_poll = std::min(options_.slots, remote_.slots);
  uint32_t since_poll = 0;
  while (send_off_ < bytes) {
    if (since_poll == chunks_per_poll) {
      BATON_RETURN_IF_ERROR(PollCompletions());
      since_poll = 0;
    }
    const uint64_t seq = send_seq_;
    // Offered: the first chunk carries data while the answer travels back;
    // the rest waits for it (in place, or on through the slots).
    if (send_direct_ == Direct::kOffered && seq != offer_seq_) [[unlikely]]
      break;
    const uint32_t slot = static_cast<uint32_t>(seq % remote_.slots);
    if (CtsWord(slot) < seq / remote_.slots) break;  // no credit for this slot yet
    const size_t q = seq % qps_.size();
    if (outstanding_[q] >= SendDepth()) break;
    uint8_t* stage = send_staging_->data() + size_t(slot) * remote_.slot_bytes;
    size_t used = 0;
    if (first) {
      RdmaMessageHeader h;
      h.magic = kRdmaHeaderMagic;
      h.bytes = bytes;
      if (tag != nullptr) {
        h.flags = kRdmaHeaderTagged;
        h.tag = *tag;
      }
      if (send_direct_ == Direct::kOffered) h.flags |= kRdmaHeaderOffer;
      memcpy(stage, &h, sizeof(h));
      used = sizeof(h);
    }
    const size_t n = std::min<size_t>(remote_.slot_bytes - used, bytes - send_off_);
    memcpy(stage + used, src + send_off_, n);
    BATON_RETURN_IF_ERROR(Post(q, *send_staging_, stage, used + n,
                               remote_.slots_addr + size_t(slot) * remote_.slot_bytes,
                               remote_.slots_rkey, static_cast<uint32_t>(seq & kSeqMask)));
    ++send_seq_;
    ++since_poll;
    send_off_ += n;
    first = false;
    moved = true;
  }
  *done = send_off_;
  if (send_off_ == bytes) {
    send_active_ = false;
    // Offered, but the slots carried it all before the answer came.
    send_direct_ = Direct::kNo;
    send_user_mr_.reset();
  }
  if (!moved && send_off_ < bytes && peer_closed_ != nullptr &&
      peer_closed_->load(std::memory_order_acquire))
    return RemoteError("rank " + std::to_string(peer_rank_) +
                       " closed its connection (process died or aborted)");
  return Status::Ok();
}

Status RdmaChannel::ProgressRecv(const RecvTarget& target, size_t bytes, size_t* done) {
  if (bytes == 0) return Status::Ok();
  if (!connected_) return InternalError("RDMA channel used before it was connected");
  BATON_RETURN_IF_ERROR(PollCompletions());
  bool moved = false;
  while (!(recv_active_ && recv_off_ == bytes)) {
    const uint32_t slot = static_cast<uint32_t>(recv_seq_ % options_.slots);
    if (arrived_[slot] < 0 || arrived_seq_[slot] != recv_seq_) break;
    const uint8_t* data = recv_slots_->data() + size_t(slot) * options_.slot_bytes;
    size_t len = static_cast<size_t>(arrived_[slot]);
    if (arrived_done_[slot]) [[unlikely]] {
      // An in-place message ends: its data, from direct_from on, is here.
      RdmaMessageHeader h;
      if (len == sizeof(h)) memcpy(&h, data, sizeof(h));
      if (!recv_active_ || !recv_direct_ || len != sizeof(h) || h.magic != kRdmaHeaderMagic ||
          !(h.flags & kRdmaHeaderDone) || h.bytes != bytes || h.direct_from != recv_off_)
        return failure_ = InternalError("RDMA: rank " + std::to_string(peer_rank_) +
                                        " ended an in-place message out of step");
      recv_direct_ = false;
      recv_user_mr_.reset();
      ++counters_.direct_received;
      data += len;
      len = 0;
      recv_off_ = bytes;
    } else if (!recv_active_) {
      RdmaMessageHeader h;
      if (len < sizeof(h))
        return failure_ = InternalError("RDMA: a message from rank " + std::to_string(peer_rank_) +
                                        " without its header");
      memcpy(&h, data, sizeof(h));
      if (h.magic != kRdmaHeaderMagic)
        return InvalidUsage("rank " + std::to_string(peer_rank_) +
                            " sent a message without Baton's RDMA header (another version of "
                            "Baton, or its stream is out of step with this rank's)");
      BATON_RETURN_IF_ERROR(CheckOpening(target, h.flags & kRdmaHeaderTagged ? &h.tag : nullptr));
      if (h.bytes != bytes) return Mismatch(CallMismatch::Kind::kSize, nullptr, h.bytes);
      recv_active_ = true;
      recv_off_ = 0;
      data += sizeof(h);
      len -= sizeof(h);
      if (h.flags & kRdmaHeaderOffer) [[unlikely]]
        BATON_RETURN_IF_ERROR(AnswerOffer(target, bytes));
    }
    if (recv_off_ + len > bytes)
      return failure_ = InternalError("RDMA: rank " + std::to_string(peer_rank_) +
                                      " sent more than its message's size");
    Deliver(target, recv_off_, data, len);
    recv_off_ += len;
    arrived_[slot] = -1;
    BATON_RETURN_IF_ERROR(PostCts(recv_seq_));
    ++recv_seq_;
    moved = true;
  }
  *done = recv_active_ ? recv_off_ : 0;
  if (recv_active_ && recv_off_ == bytes) {
    recv_active_ = false;
    // Accepted, but the slots carried it all before the sender saw the answer.
    recv_direct_ = false;
    recv_user_mr_.reset();
  }
  if (!moved && *done < bytes && peer_closed_ != nullptr &&
      peer_closed_->load(std::memory_order_acquire))
    return RemoteError("rank " + std::to_string(peer_rank_) +
                       " closed its connection (process died or aborted)");
  return Status::Ok();
}

Status RdmaChannel::AnswerOffer(const RecvTarget& target, size_t bytes) {
  RdmaDirectReply reply;
  reply.offer_seq = recv_seq_;
  UserRange range;
  UserMemory* memory = options_.user_memory;
  // In place only when the bytes are copied as they are (not reduced) into
  // a buffer whose lifetime Baton knows.
  if (target.reduce_with == nullptr && memory != nullptr && options_.zcopy_min > 0 &&
      memory->Find(target.dst, bytes, &range)) {
    Status st = options_.mr_cache->Get(range, &recv_user_mr_);
    if (st.ok()) {
      reply.accept = 1;
      reply.addr = reinterpret_cast<uint64_t>(target.dst);
      reply.rkey = recv_user_mr_->rkey();
      recv_direct_ = true;
    } else if (!warned_registration_) {
      BATON_WARN(kLogNet, "RDMA: receiving through the slots: %s", st.message().c_str());
      warned_registration_ = true;
    }
  }
  if (!reply.accept) ++counters_.declined;
  reply_seq_ = recv_seq_;
  memcpy(cts_out_->data() + kCtsBytes + (reply_seq_ % kReplyRing) * sizeof(reply), &reply,
         sizeof(reply));
  reply_pending_ = true;
  return PostPendingCts();
}

void RdmaChannel::AddWaitFds(bool /*sending*/, int peer, WaitSet* ws) const {
  // Arm, then poll once more: a completion that came before the arming
  // fires no event, so it is stashed for the next progress call and the
  // eventfd makes the wait return at once.
  Completion batch[kPollBatch];
  int got = 0;
  Status st = cq_->Arm();
  if (st.ok()) st = cq_->Poll(batch, kPollBatch, &got);
  if (!st.ok()) {
    Completion broken;
    broken.ok = false;
    broken.error = st.message();
    stashed_.push_back(broken);
  }
  for (int i = 0; i < got; ++i) stashed_.push_back(batch[i]);
  if (!stashed_.empty()) {
    uint64_t one = 1;
    if (write(ready_fd_.get(), &one, sizeof(one)) < 0) {
      // The counter cannot overflow from single increments.
    }
  }
  ws->tcp.push_back({cq_->fd(), POLLIN, 0});
  ws->tcp_keys.push_back(WatchKey(peer, 0));
  ws->tcp.push_back({ready_fd_.get(), POLLIN, 0});
  ws->tcp_keys.push_back(WatchKey(peer, 1));
}

}  // namespace baton::rdma
