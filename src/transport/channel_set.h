// ChannelSet: one communicator's channels (shared memory to ranks of this
// host, TCP to the others) and what they share: this rank's doorbell, the
// watchdog thread that notices a peer's death, and the abort flag.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "base/deadline.h"
#include "base/fd.h"
#include "base/status.h"
#include "bootstrap/peer_info.h"
#include "bootstrap/unique_id.h"
#include "transport/channel.h"
#include "transport/control.h"
#include "transport/doorbell.h"

namespace baton {

class ShmSegment;

// Ranks that share memory: same host, and neither forced onto TCP.
inline bool SharesMemory(const PeerInfo& a, const PeerInfo& b) {
  return a.host_hash == b.host_hash && !a.wants_tcp && !b.wants_tcp;
}
// Sockets between two ranks: for shared-memory pairs one, the control
// socket (set-up, death detection, failure notes); for TCP pairs the smaller
// of the two wishes for data, then the control socket.
inline int SocketsBetween(const PeerInfo& a, const PeerInfo& b) {
  if (SharesMemory(a, b)) return 1;
  return std::clamp<int>(std::min(a.tcp_sockets, b.tcp_sockets), 1, kMaxSocketsPerPeer) + 1;
}
// The watchdog's key index of a pair's control socket.
inline constexpr int kControlSocketIndex = 255;

// Settings read from the environment at communicator creation.
struct TransportConfig {
  bool force_tcp = false;       // BATON_TRANSPORT=tcp
  uint64_t buffsize = 4 << 20;  // BATON_BUFFSIZE: shm ring / TCP staging bytes
  uint32_t shm_slots = 32;      // ring slots per shm connection
  int tcp_sockets = 1;          // BATON_NSOCKS_PERPEER: sockets per TCP peer, striped
  bool cma = false;             // BATON_CMA=1: single-copy shm transfers (docs/performance.md)
  uint64_t cma_threshold = 256 << 10;  // BATON_CMA_THRESHOLD: smallest message sent by address
};

// Everything needed to set up the channels of one communicator.
struct ChannelSetup {
  const UniqueIdData* id;
  int rank;
  int nranks;
  const std::vector<PeerInfo>* peers;
  std::vector<std::vector<Fd>>* mesh;  // sockets per peer; channels take theirs over
  TransportConfig config;
  Deadline deadline;
};

// The channels of one communicator plus the machinery shared by all of them:
// this rank's doorbell (in its shm segment), a watchdog thread that watches
// every peer socket with epoll (peer death, and TCP readiness while the
// executor sleeps on the doorbell), and the abort flag.
class ChannelSet {
 public:
  static Status Create(const ChannelSetup& setup, std::unique_ptr<ChannelSet>* out);
  ChannelSet();  // use Create
  ~ChannelSet();
  ChannelSet(const ChannelSet&) = delete;
  ChannelSet& operator=(const ChannelSet&) = delete;

  Channel* channel(int peer) const { return channels_[peer].get(); }
  int local_ranks() const { return local_ranks_; }

  bool aborted() const { return aborted_.load(std::memory_order_acquire); }

  // Sleeps until one of `ws` may progress, a peer dies, abort() is called,
  // or timeout_ms passes. Spurious wake-ups are allowed. When ws.any_shm,
  // the caller must have called PrepareSleep() (returning `seq`) and then
  // re-checked its channels, so that no doorbell ring is lost.
  void Wait(const WaitSet& ws, uint32_t seq, int timeout_ms);

  // Stops all traffic: wakes any waiter and shuts every data socket down so
  // that peers see this rank leave at once instead of timing out. With a
  // note, first tells every peer why. The control sockets stay open (a
  // shrink among the survivors goes over them) until the set is destroyed.
  void Abort(const FailureNote* note = nullptr);

  // Whether a peer has sent a failure note; the first one.
  bool note_arrived() const { return note_arrived_.load(std::memory_order_acquire); }
  FailureNote note() const;
  // After an error on the connection to `peer` (it left): the note it sent
  // before leaving, waiting briefly for one in flight. False if none came.
  bool NoteFrom(int peer, FailureNote* out);

  // This rank's call, as peers that ask are told: the communicator sets it
  // before each run, and marks it done after. Cheap (plain stores on x86, a
  // seqlock for the rare reader): it is on every call's latency path.
  void PublishCall(const CallDescriptor& call, bool in_call = true) {
    uint64_t words[3];
    memcpy(words, &call, sizeof(call));
    PublishWords(words[0], words[1], words[2], in_call);
  }
  // The same from the descriptor's three words.
  void PublishWords(uint64_t w0, uint64_t w1, uint64_t w2, bool in_call) {
    const uint32_t v = published_version_.load(std::memory_order_relaxed);
    published_version_.store(v + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    published_words_[0].store(w0, std::memory_order_relaxed);
    published_words_[1].store(w1, std::memory_order_relaxed);
    published_words_[2].store(w2, std::memory_order_relaxed);
    published_in_call_.store(in_call ? 1 : 0, std::memory_order_relaxed);
    published_version_.store(v + 2, std::memory_order_release);
  }
  // The published call is done: one store (a reader that sees it with the
  // call's words reads "finished that call", which is true).
  void PublishDone() { published_in_call_.store(0, std::memory_order_release); }
  CallState published() const;
  // Shrinking: the lowest surviving rank sends each other survivor the new
  // communicator's id; they wait for it (false: not before `deadline`, or
  // the leader's control socket closed).
  void SendShrinkOffer(int peer, const ShrinkOffer& offer);
  bool WaitShrinkOffer(int leader, Deadline deadline, ShrinkOffer* out);

  // Asks every peer where it is; the answers arrive in the background, and
  // each one bumps answers() and wakes a waiting executor.
  void QueryPeers();
  uint32_t answers() const { return answers_.load(std::memory_order_acquire); }
  // The last answer of `peer` and when it came; false if none since `since`.
  bool PeerState(int peer, Clock::time_point since, CallState* out) const;

  // Prepares a doorbell sleep: returns the sequence number to sleep on.
  // Between this and wait(), the executor re-checks its channels.
  uint32_t PrepareSleep();
  void CancelSleep();

 private:
  void WatchdogLoop();
  // Reads what the control socket of `peer` has and handles the frames:
  // records notes and answers, answers questions. Returns false once the
  // socket is closed, broken, or done (a note came). Under control_mu_.
  bool ReadControlLocked(int peer);
  void SendControl(int peer, const std::vector<uint8_t>& frame);
  void Notify();
  Status SetupShm(const ChannelSetup& setup, const std::vector<int>& local_peers);

  int rank_ = 0;
  int local_ranks_ = 1;
  std::vector<std::unique_ptr<Channel>> channels_;
  int nranks_ = 1;
  std::vector<Fd> control_;                 // each pair's control socket
  std::vector<std::vector<int>> peer_fds_;  // the data sockets to each TCP peer
  std::unique_ptr<std::atomic<bool>[]> peer_closed_;
  std::atomic<bool> aborted_{false};

  // Failure notes: bytes read from each control socket so far, and the
  // first note that arrived.
  mutable std::mutex control_mu_;
  std::vector<std::vector<uint8_t>> control_in_;
  std::vector<uint8_t> control_done_;  // closed, or not a note: read no more
  std::vector<int> notes_from_;        // peers whose note arrived
  FailureNote first_note_;
  std::atomic<bool> note_arrived_{false};
  std::vector<CallState> peer_state_;             // their last answers
  std::vector<ShrinkOffer> shrink_offers_;        // from each peer (survivors != 0: arrived)
  std::condition_variable control_cv_;            // a shrink offer came, or a socket closed
  std::vector<Clock::time_point> peer_state_at_;  // when they came
  std::atomic<uint32_t> answers_{0};
  std::mutex control_send_mu_;
  // PublishCall's seqlock: odd while a write is under way.
  std::atomic<uint32_t> published_version_{0};
  std::atomic<uint64_t> published_words_[3] = {};
  std::atomic<uint32_t> published_in_call_{0};

  // Own doorbell: inside this rank's shm segment when it has local peers.
  Doorbell private_bell_;
  Doorbell* bell_ = &private_bell_;
  std::vector<std::unique_ptr<ShmSegment>> segments_;  // own segment + mapped peers'

  Fd watch_epoll_;
  Fd wake_fd_;    // eventfd: stops the watchdog
  Fd notify_fd_;  // eventfd: peer death or abort, for TCP-only waits
  std::atomic<bool> stopping_{false};
  std::thread watchdog_;
};

}  // namespace baton
