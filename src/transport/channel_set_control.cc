// ChannelSet's control sockets: failure notes, questions about where a peer
// is, and their answers (see transport/control.h).
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/log.h"
#include "base/shm_names.h"
#include "transport/channel_set.h"

namespace baton {

void ChannelSet::Notify() {
  uint64_t one = 1;
  if (write(notify_fd_.get(), &one, sizeof(one)) < 0) {
  }
  ForceRingDoorbell(bell_);
}

void ChannelSet::SendControl(int peer, const std::vector<uint8_t>& frame) {
  if (peer < 0 || peer >= nranks_ || !connected(peer) || !control_[peer].valid()) return;
  // Frames are far smaller than a socket buffer: one non-blocking send
  // takes all of it or (the peer stopped reading, or left) nothing that
  // matters. The lock keeps frames of several threads whole.
  std::lock_guard<std::mutex> lock(control_send_mu_);
  if (send(control_[peer].get(), frame.data(), frame.size(), MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
  }
}

bool ChannelSet::ReadControlLocked(int peer) {
  if (control_done_[peer]) return false;
  std::vector<uint8_t>& in = control_in_[peer];
  uint8_t buf[1024];
  bool closed = false;
  for (;;) {
    const ssize_t n = recv(control_[peer].get(), buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0) {
      in.insert(in.end(), buf, buf + n);
      if (in.size() > 4 * kMaxFrameBytes) break;  // a flood: parse what we have
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    closed = n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
    break;
  }
  size_t offset = 0;
  bool answered = false;
  while (!control_done_[peer]) {
    ControlFrame frame;
    size_t used = 0;
    const FrameParse parse =
        DecodeFrame(in.data() + offset, in.size() - offset, nranks_, &frame, &used);
    if (parse == FrameParse::kIncomplete) break;
    if (parse == FrameParse::kInvalid) {
      BATON_WARN(kLogNet, "rank %d sent something that is not a control frame", peer);
      control_done_[peer] = 1;
      break;
    }
    offset += used;
    switch (frame.type) {
      case FrameType::kNote:
        if (std::find(notes_from_.begin(), notes_from_.end(), peer) == notes_from_.end())
          notes_from_.push_back(peer);
        if (!note_arrived()) {
          first_note_ = std::move(frame.note);
          note_arrived_.store(true, std::memory_order_release);
          BATON_INFO(kLogNet, "rank %d failed: %s", peer, first_note_.text.c_str());
          // Pass it on once to the peers this rank is connected to: with
          // connections made on first use, the origin may have none to
          // them, and the ring neighbours carry it around.
          if (!note_forwarded_.exchange(true, std::memory_order_acq_rel)) {
            std::vector<uint8_t> forward = EncodeFailed(failed_.Sorted());
            const std::vector<uint8_t> text = EncodeNote(first_note_);
            forward.insert(forward.end(), text.begin(), text.end());
            for (int p = 0; p < nranks_; ++p)
              if (p != peer && p != first_note_.origin && p != rank_) SendControl(p, forward);
          }
        }
        // No more data comes from it; its control socket may stay open
        // (for a shrink).
        peer_closed_[peer].store(true, std::memory_order_release);
        Notify();
        break;
      case FrameType::kShrink:
        shrink_offers_[peer] = frame.shrink;
        control_cv_.notify_all();
        break;
      case FrameType::kQuery:
        SendControl(peer, EncodeState(CurrentCallState()));
        break;
      case FrameType::kFailed:
        MarkFailedLocked(frame.failed);
        break;
      case FrameType::kLeave:
        failed_.MarkLeft(peer);
        break;
      case FrameType::kState:
        peer_state_[peer] = frame.state;
        peer_state_at_[peer] = Clock::now();
        answers_.fetch_add(1, std::memory_order_acq_rel);
        answered = true;
        break;
    }
  }
  in.erase(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(offset));
  if (answered) Notify();
  if (closed) {
    control_done_[peer] = 1;
    // Gone without a goodbye: it died, exited, or freed its communicator
    // without saying so.
    if (failed_.OnClosed(peer)) {
      BATON_INFO(kLogNet, "rank %d failed: its control socket closed", peer);
      failed_count_.store(failed_.count(), std::memory_order_release);
      ShareFailedLocked();
    }
  }
  if (control_done_[peer]) control_cv_.notify_all();
  return !control_done_[peer];
}

FailureNote ChannelSet::FirstNote() const {
  std::lock_guard<std::mutex> lock(control_mu_);
  return first_note_;
}

bool ChannelSet::NoteFrom(int peer, FailureNote* out) {
  if (peer < 0 || peer >= nranks_ || !connected(peer) || !control_[peer].valid()) return false;
  // The peer writes its note before it shuts its sockets, but the note
  // travels on another connection than the one that failed: give it a
  // moment to arrive.
  const auto until = Clock::now() + std::chrono::milliseconds(200);
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(control_mu_);
      ReadControlLocked(peer);
      if (std::find(notes_from_.begin(), notes_from_.end(), peer) != notes_from_.end()) {
        *out = first_note_;
        return true;
      }
      if (control_done_[peer]) return false;
    }
    if (Clock::now() >= until) return false;
    pollfd pfd{control_[peer].get(), POLLIN, 0};
    poll(&pfd, 1, 20);
  }
}

void ChannelSet::SendShrinkOffer(int peer, const ShrinkOffer& offer) {
  SendControl(peer, EncodeShrink(offer));
}

bool ChannelSet::WaitShrinkOffer(int leader, Deadline deadline, ShrinkOffer* out) {
  if (leader < 0 || leader >= nranks_ || leader == rank_) return false;
  std::unique_lock<std::mutex> lock(control_mu_);
  for (;;) {
    // The leader may connect to this rank only now (Publish wakes us).
    if (!connected(leader)) {
      if (Clock::now() >= deadline) return false;
      control_cv_.wait_until(lock,
                             std::min(deadline, Clock::now() + std::chrono::milliseconds(100)));
      continue;
    }
    if (!control_[leader].valid()) return false;
    if (shrink_offers_[leader].survivors != 0) {
      *out = shrink_offers_[leader];
      shrink_offers_[leader] = ShrinkOffer{};
      return true;
    }
    if (control_done_[leader] || Clock::now() >= deadline) return false;
    control_cv_.wait_until(lock, std::min(deadline, Clock::now() + std::chrono::milliseconds(100)));
  }
}

void ChannelSet::QueryPeers() {
  const std::vector<uint8_t> query = EncodeQuery();
  for (int p = 0; p < nranks_; ++p)
    if (p != rank_) SendControl(p, query);
}

bool ChannelSet::PeerState(int peer, Clock::time_point since, CallState* out) const {
  std::lock_guard<std::mutex> lock(control_mu_);
  if (peer < 0 || peer >= nranks_ || peer_state_at_[peer] < since ||
      peer_state_at_[peer] == Clock::time_point{})
    return false;
  *out = peer_state_[peer];
  return true;
}

std::vector<int> ChannelSet::FailedRanks() const {
  std::lock_guard<std::mutex> lock(control_mu_);
  return failed_.Sorted();
}

void ChannelSet::MarkFailed(const std::vector<int>& ranks) {
  std::lock_guard<std::mutex> lock(control_mu_);
  MarkFailedLocked(ranks);
}

void ChannelSet::MarkFailedLocked(const std::vector<int>& ranks) {
  if (!failed_.Add(ranks)) return;
  failed_count_.store(failed_.count(), std::memory_order_release);
  // A failed local peer may have died before every local peer mapped its
  // segment, with the name still linked: nobody will connect to it now,
  // and it cannot remove the name itself.
  for (int r : ranks)
    if (r != rank_ && r >= 0 && r < static_cast<int>(peers_.size()) &&
        SharesMemory(peers_[rank_], peers_[r]))
      shm_unlink(ShmSegmentName(id_.comm_id, r, peers_[r].pid).c_str());
  ShareFailedLocked();
}

void ChannelSet::ShareFailedLocked() {
  // Each rank passes the set on only when it grew, so the flooding ends;
  // ranks not connected to this one learn it from the others, or by their
  // own probe (ProbeUnconnected).
  const std::vector<uint8_t> frames = EncodeFailed(failed_.Sorted());
  for (int p = 0; p < nranks_; ++p)
    if (p != rank_ && !failed_.contains(p)) SendControl(p, frames);
}

void ChannelSet::SweepControl() {
  for (int p = 0; p < nranks_; ++p) {
    if (p == rank_ || !connected(p) || !control_[p].valid()) continue;
    bool open;
    {
      std::lock_guard<std::mutex> lock(control_mu_);
      open = ReadControlLocked(p);
    }
    // As the watchdog does when it reads a closed socket (it will, too).
    if (!open) peer_closed_[p].store(true, std::memory_order_release);
  }
}

void ChannelSet::SayGoodbye() {
  const std::vector<uint8_t> frame = EncodeLeave();
  for (int p = 0; p < nranks_; ++p)
    if (p != rank_) SendControl(p, frame);
}

}  // namespace baton
