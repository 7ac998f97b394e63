// ChannelSet: one communicator's channels (shared memory to ranks of this
// host, TCP to the others) and what they share: this rank's doorbell, the
// watchdog thread that notices a peer's death, and the abort flag.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "base/deadline.h"
#include "base/fd.h"
#include "base/status.h"
#include "bootstrap/peer_info.h"
#include "bootstrap/unique_id.h"
#include "transport/channel.h"
#include "transport/doorbell.h"

namespace baton {

class ShmSegment;

// Ranks that share memory: same host, and neither forced onto TCP.
inline bool SharesMemory(const PeerInfo& a, const PeerInfo& b) {
  return a.host_hash == b.host_hash && !a.wants_tcp && !b.wants_tcp;
}
// Sockets between two ranks: one for shared-memory pairs (set-up and
// death detection), the smaller of the two wishes for TCP pairs.
inline int SocketsBetween(const PeerInfo& a, const PeerInfo& b) {
  if (SharesMemory(a, b)) return 1;
  return std::clamp<int>(std::min(a.tcp_sockets, b.tcp_sockets), 1, kMaxSocketsPerPeer);
}

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

  // Stops all traffic: wakes any waiter and shuts every socket down so that
  // peers see this rank leave at once instead of timing out.
  void Abort();

  // Prepares a doorbell sleep: returns the sequence number to sleep on.
  // Between this and wait(), the executor re-checks its channels.
  uint32_t PrepareSleep();
  void CancelSleep();

 private:
  void WatchdogLoop();
  Status SetupShm(const ChannelSetup& setup, const std::vector<int>& local_peers);

  int rank_ = 0;
  int local_ranks_ = 1;
  std::vector<std::unique_ptr<Channel>> channels_;
  std::vector<Fd> shm_sockets_;             // of shm peers (for death detection)
  std::vector<std::vector<int>> peer_fds_;  // every socket to each peer
  std::unique_ptr<std::atomic<bool>[]> peer_closed_;
  std::atomic<bool> aborted_{false};

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
