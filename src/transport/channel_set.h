// ChannelSet: one communicator's channels (shared memory to ranks of this
// host, TCP to the others) and what they share: this rank's doorbell, the
// watchdog thread that notices a peer's death, and the abort flag.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "base/deadline.h"
#include "base/fd.h"
#include "base/spin.h"
#include "base/status.h"
#include "bootstrap/peer_info.h"
#include "bootstrap/unique_id.h"
#include "transport/channel.h"
#include "transport/control.h"
#include "transport/doorbell.h"
#include "transport/failed_set.h"
#include "transport/rdma/rdma_setup.h"
#include "transport/user_memory.h"

namespace baton {

class ShmSegment;
struct ShmLineBuffer;
struct ShmLines;

// Ranks that share memory: same host, and neither forced onto TCP.
inline bool SharesMemory(const PeerInfo& a, const PeerInfo& b) {
  return a.host_hash == b.host_hash && !a.wants_tcp && !b.wants_tcp;
}
// Ranks on different hosts that both offer RDMA (PeerInfo::rdma).
inline bool UsesRdma(const PeerInfo& a, const PeerInfo& b) {
  return !SharesMemory(a, b) && a.rdma != 0 && b.rdma != 0;
}
// Sockets between two ranks: for RDMA pairs two (set-up, then control);
// for shared-memory pairs one, the control
// socket (set-up, death detection, failure notes); for TCP pairs the smaller
// of the two wishes for data, then the control socket.
inline int SocketsBetween(const PeerInfo& a, const PeerInfo& b) {
  if (SharesMemory(a, b)) return 1;
  if (UsesRdma(a, b)) return 2;
  return std::clamp<int>(std::min(a.tcp_sockets, b.tcp_sockets), 1, kMaxSocketsPerPeer) + 1;
}
// The watchdog's key index of a pair's control socket.
inline constexpr int kControlSocketIndex = 255;

// Settings read from the environment at communicator creation.
struct TransportConfig {
  bool force_tcp = false;       // BATON_TRANSPORT=tcp
  bool shm_only = false;        // BATON_TRANSPORT=shm: a peer on another host is an error
  uint64_t buffsize = 4 << 20;  // BATON_BUFFSIZE: shm ring / TCP staging bytes
  uint32_t shm_slots = 32;      // ring slots per shm connection
  int shm_stream = -1;          // BATON_SHM_STREAM: 1 always, 0 never, -1 across packages
  int tcp_sockets = 1;          // BATON_NSOCKS_PERPEER: sockets per TCP peer, striped
  bool cma = false;             // BATON_CMA=1: single-copy shm transfers (docs/performance.md)
  uint64_t cma_threshold = 256 << 10;  // BATON_CMA_THRESHOLD: smallest message sent by address
  bool cma_coll = true;   // BATON_CMA_COLL: peers may read this rank's memory (comm/host_cma.cc)
  rdma::RdmaConfig rdma;  // BATON_TRANSPORT=ib, BATON_IB_* (docs/rdma.md)
  bool runtime_connect = true;  // BATON_RUNTIME_CONNECT: pairs connected on first use
  SpinPolicy spin;              // BATON_SPIN_*: how waiters poll before they sleep (base/spin.h)
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
  // Where this rank is, as peers that ask are told (see CurrentCallState()).
  std::function<CallState()> call_state;
  // Connections made on first use (docs/scaling.md): no mesh; the set takes
  // this rank's listener over and accepts its peers' connects on its own
  // thread, for the communicator's life.
  bool lazy = false;
  Fd* listener = nullptr;
  // The communicator's registered buffers (RDMA writes large messages
  // between them in place); outlives the channels. May be null.
  UserMemory* user_memory = nullptr;
};

// The channels of one communicator plus the machinery shared by all of them:
// this rank's doorbell (in its shm segment), a watchdog thread that watches
// every peer socket with epoll (peer death, and TCP readiness while the
// executor sleeps on the doorbell), and the abort flag.
class ChannelSet {
 public:
  static Status Create(const ChannelSetup& setup, std::unique_ptr<ChannelSet>* out);
  // For tests of what runs over channels (the executor): a set of rank
  // `rank` over `channels` (one per rank; null for this rank), with no
  // sockets, segments or watchdog. Its waits sleep on a private doorbell.
  static std::unique_ptr<ChannelSet> OverChannels(int rank,
                                                  std::vector<std::unique_ptr<Channel>> channels);
  ChannelSet();  // use Create
  ~ChannelSet();
  ChannelSet(const ChannelSet&) = delete;
  ChannelSet& operator=(const ChannelSet&) = delete;

  // Null until the pair is connected (Connect); read without locks by the
  // executor, published with release once the channel is whole.
  Channel* channel(int peer) const { return channel_of_[peer].load(std::memory_order_acquire); }
  bool connected(int peer) const { return connected_[peer].load(std::memory_order_acquire); }
  // Connects this rank to each of `peers` it has no channel to yet (the
  // same authenticated handshake as the mesh), before `deadline`. When both
  // ranks of a pair connect at once, the lower rank's connection is kept
  // and the higher rank waits for it. A peer that is gone (its listener
  // refuses) is an error naming it. Call from one thread at a time.
  Status Connect(const std::vector<int>& peers, Deadline deadline);
  Status ConnectAll(Deadline deadline);
  // BATON_DEBUG=INFO: the descriptors and segments this rank holds.
  void ReportHeld(const char* when) const;
  int local_ranks() const { return local_ranks_; }
  int nranks() const { return nranks_; }

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
  FailureNote FirstNote() const;
  // After an error on the connection to `peer` (it left): the note it sent
  // before leaving, waiting briefly for one in flight. False if none came.
  bool NoteFrom(int peer, FailureNote* out);

  // Where this rank is, as peers that ask are told (ChannelSetup::call_state:
  // the communicator's flight recorder knows).
  CallState CurrentCallState() const { return state_source_ ? state_source_() : CallState{}; }

  // Shrinking: the lowest surviving rank sends each other survivor the new
  // communicator's id; they wait for it (false: not before `deadline`, or
  // the leader's control socket closed).
  void SendShrinkOffer(int peer, const ShrinkOffer& offer);
  bool WaitShrinkOffer(int leader, Deadline deadline, ShrinkOffer* out);

  // The ranks this rank knows to have failed (failed_set.h says what
  // counts), ascending. Thread-safe, as the rest of this block.
  std::vector<int> FailedRanks() const;
  int failed_count() const { return failed_count_.load(std::memory_order_acquire); }
  // Adds ranks this rank judged failed (peers that do not answer at the
  // timeout, a refused connection, itself when it aborts a healthy
  // communicator); a set that grew is passed on to every connected peer.
  void MarkFailed(const std::vector<int>& ranks);
  // Reads every control socket now, as the watchdog would next: closures
  // and frames that have reached this host count before a note is written
  // or the failed ranks are read.
  void SweepControl();
  // Dials the listener of each peer this rank has no connection to and has
  // not listed as failed (connections made on first use: every rank keeps
  // its listener while its communicator lives): a refusal means the peer
  // is gone. A dial still unanswered at `deadline` counts as alive.
  void ProbeUnconnected(Deadline deadline);
  // This rank frees its communicator on purpose: tells every peer before
  // its sockets close, so that the closing is no failure there.
  void SayGoodbye();

  // Asks every peer where it is; the answers arrive in the background, and
  // each one bumps answers() and wakes a waiting executor.
  void QueryPeers();
  uint32_t answers() const { return answers_.load(std::memory_order_acquire); }
  // The last answer of `peer` and when it came; false if none since `since`.
  bool PeerState(int peer, Clock::time_point since, CallState* out) const;

  // Registered collectives (comm/host_ipc.cc): every rank says per
  // collective, in its shm segment's mailbox (shm.h), whether it offers a
  // record of registered buffers. Only when every peer shares memory.
  bool has_mailboxes() const { return all_shm_; }
  // CollArgs::sends_buffered_bytes for calls among all ranks: with every
  // peer on a shared-memory ring, a quarter of a ring (the previous call's
  // pieces may still sit in the rest), below the size sent by address.
  uint64_t SendsBufferedBytes() const {
    if (!all_shm_) return 0;
    const uint64_t quarter = config_.buffsize / 4;
    return config_.cma ? std::min(quarter, config_.cma_threshold - 1) : quarter;
  }
  // Publishes call number `call` (counted from 1) with record bytes (at
  // most kShmMailboxWords * 8).
  void PublishCall(uint64_t call, const void* record, size_t bytes);
  // Publishes call number `call` without a record (not registered): only
  // its first collective's descriptor, which a peer reads for an error
  // message (ReadPeerDescriptor); a few stores to the state's own line.
  void PublishCall(uint64_t call, const CallDescriptor& first);
  // What `peer` says about call `call`: not there yet, its record (copied
  // to `record`), or no record (not registered, or it has moved past the
  // call, which it cannot have done had it taken the registered path).
  enum class PeerCall { kNotYet, kRecord, kNoRecord };
  PeerCall ReadPeerCall(int peer, uint64_t call, void* record, size_t bytes) const;
  // The descriptor `peer` published with call `call` and no record; false
  // where it published none (not there, a record, a later call).
  bool ReadPeerDescriptor(int peer, uint64_t call, CallDescriptor* first) const;
  // The progress word of registered calls (ShmCallMailbox::progress):
  // this rank's, published with release, and a peer's, read with acquire.
  // Rings every mapped local peer's doorbell, so one that sleeps waiting for
  // this word (or a record, PublishCall) wakes at once.
  void PublishProgress(uint64_t steps);
  // Sleeps on this rank's doorbell until a peer rings it (or the watchdog,
  // on a peer's death or an abort), at most timeout_ms; `seq` is what
  // PrepareSleep returned, after which the caller checked its condition.
  void SleepOnDoorbell(uint32_t seq, int timeout_ms);
  // How this set's waiters poll before they sleep (TransportConfig::spin).
  const SpinPolicy& spin_policy() const { return config_.spin; }
  uint64_t PeerProgress(int peer) const;
  // Small allreduces on the lines (comm/lines.cc; ShmLines in shm.h): this
  // rank's lines and a peer's. Only when every peer shares memory and is
  // connected.
  ShmLines* OwnLines() const;
  const ShmLines* PeerLines(int peer) const;
  // Says that this rank's buffer `line` holds its input to lines call
  // `call` (release), and wakes the peers that sleep waiting for it.
  void PublishLine(ShmLineBuffer* line, uint64_t call);
  // Whether `peer` has begun collective `call` (PublishCall's numbering) or
  // a later one.
  bool PeerReached(int peer, uint64_t call) const;
  // The first lines call this rank has not finished, which Abort publishes
  // (ShmLines::gave_up).
  void set_lines_unfinished(uint64_t call) {
    lines_unfinished_.store(call, std::memory_order_relaxed);
  }
  // Single-copy collectives on ordinary buffers (comm/host_cma.cc): whether
  // this rank can read `peer`'s memory with process_vm_readv (0, or the
  // errno the kernel gave), and the pid to read it through. Only for
  // peers that share memory and are connected.
  int ProbePeerMemory(int peer) const;
  int peer_pid(int peer) const { return peers_[peer].pid; }
  // Whether `peer` said goodbye (freed its communicator on purpose): its
  // sockets closing is then no failure.
  bool PeerLeft(int peer) const {
    std::lock_guard<std::mutex> lock(control_mu_);
    return failed_.left(peer);
  }
  // Whether the watchdog saw `peer`'s sockets close (it died or aborted).
  bool peer_closed(int peer) const { return peer_closed_[peer].load(std::memory_order_acquire); }

  // Prepares a doorbell sleep: returns the sequence number to sleep on.
  // Between this and wait(), the executor re-checks its channels.
  uint32_t PrepareSleep();
  void CancelSleep();

 private:
  void RingMappedPeers();
  void WatchdogLoop();
  // Reads what the control socket of `peer` has and handles the frames:
  // records notes and answers, answers questions. Returns false once the
  // socket is closed, broken, or done (a note came). Under control_mu_.
  bool ReadControlLocked(int peer);
  void SendControl(int peer, const std::vector<uint8_t>& frame);
  // Under control_mu_: adds to failed_ and, when it grew, sends the whole
  // set to every connected peer not in it.
  void MarkFailedLocked(const std::vector<int>& ranks);
  void ShareFailedLocked();
  // Sizes the per-peer state for `n` ranks: no channels, nobody connected
  // or closed, no control traffic.
  void SizePerPeer(int n);
  void Notify();
  Status SetupShm(const ChannelSetup& setup, const std::vector<int>& local_peers);
  Status CreateOwnSegment(const ChannelSetup& setup, uint32_t nrings);
  // Channel set-up of one pair, for the mesh and for connections made on
  // first use: the channel over `peer`'s segment (shared memory) or over
  // its data sockets (TCP), then Publish with its control socket.
  Status AddShmPeer(int peer, std::unique_ptr<ShmSegment> segment);
  Status AddTcpPeer(int peer, std::vector<Fd> data);
  Status Publish(int peer, Fd control);
  // Connections made on first use (channel_set_connect.cc).
  void AcceptLoop();
  void AcceptOne(Fd fd);
  Status ConnectOne(int peer, Deadline deadline);
  // The end of a pair's handshake both sides run: for shared memory, map
  // the peer's segment and agree on cross memory attach over socket `fd`.
  Status FinishPair(int peer, int fd, Deadline deadline, std::vector<Fd> sockets);
  std::string PeerName(int peer) const;

  int rank_ = 0;
  int local_ranks_ = 1;
  std::vector<std::unique_ptr<Channel>> channels_;  // owners; written once per peer
  std::unique_ptr<std::atomic<Channel*>[]> channel_of_;
  std::unique_ptr<std::atomic<bool>[]> connected_;
  int nranks_ = 1;
  std::vector<Fd> control_;                 // each pair's control socket
  std::vector<std::vector<int>> peer_fds_;  // the data sockets to each TCP peer
  std::unique_ptr<std::atomic<bool>[]> peer_closed_;
  std::atomic<bool> aborted_{false};
  bool all_shm_ = false;  // more than one rank, every peer over shared memory

  // Failure notes: bytes read from each control socket so far, and the
  // first note that arrived.
  mutable std::mutex control_mu_;
  std::vector<std::vector<uint8_t>> control_in_;
  std::vector<uint8_t> control_done_;  // closed, or not a note: read no more
  std::vector<int> notes_from_;        // peers whose note arrived
  FailureNote first_note_;
  std::atomic<bool> note_arrived_{false};
  std::atomic<uint64_t> lines_unfinished_{1};
  FailedSet failed_;  // guarded by control_mu_
  std::atomic<int> failed_count_{0};
  std::vector<CallState> peer_state_;             // their last answers
  std::vector<ShrinkOffer> shrink_offers_;        // from each peer (survivors != 0: arrived)
  std::condition_variable control_cv_;            // a shrink offer came, or a socket closed
  std::vector<Clock::time_point> peer_state_at_;  // when they came
  std::atomic<uint32_t> answers_{0};
  std::mutex control_send_mu_;
  std::function<CallState()> state_source_;

  // Own doorbell: inside this rank's shm segment when it has local peers.
  Doorbell private_bell_;
  Doorbell* bell_ = &private_bell_;
  std::unique_ptr<ShmSegment> own_segment_;
  std::vector<std::unique_ptr<ShmSegment>> peer_segments_;  // mapped peers', by rank

  // Connections made on first use. Under connect_mu_: each pair's state and
  // the sockets of a connection being accepted.
  enum class Pair : uint8_t { kNone, kOutgoing, kIncoming, kConnected };
  bool lazy_ = false;
  double timeout_s_ = 300;  // BATON_TIMEOUT, for the handshakes of accepted connections
  UniqueIdData id_{};
  std::vector<PeerInfo> peers_;
  TransportConfig config_;
  std::vector<int> local_index_;  // a local peer's ring in our segment (-1: not local)
  std::vector<int> send_index_;   // our ring in a local peer's segment
  std::mutex connect_mu_;
  std::condition_variable connect_cv_;
  std::vector<Pair> pair_;
  std::vector<std::vector<Fd>> incoming_;
  int local_connected_ = 0;
  std::atomic<bool> note_forwarded_{false};
  Fd listener_;
  Fd accept_wake_;
  std::thread acceptor_;

  Fd watch_epoll_;
  Fd wake_fd_;    // eventfd: stops the watchdog
  Fd notify_fd_;  // eventfd: peer death or abort, for TCP-only waits
  std::atomic<bool> stopping_{false};
  std::thread watchdog_;
};

}  // namespace baton
