#include "transport/channel_set.h"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>

#include "base/log.h"
#include "base/shm_names.h"
#include "bootstrap/mesh.h"
#include "transport/rdma/rdma_channel.h"
#include "transport/shm.h"
#include "transport/tcp.h"

namespace baton {

namespace {
constexpr uint64_t kWakeKey = ~0ull;
constexpr uint32_t kBaseEvents = EPOLLRDHUP | EPOLLONESHOT;
// Control sockets carry nothing but a failure note before the peer leaves.
constexpr uint32_t kControlEvents = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT;
}  // namespace

Status ChannelSet::Create(const ChannelSetup& setup, std::unique_ptr<ChannelSet>* out) {
  auto set = std::make_unique<ChannelSet>();
  const auto& peers = *setup.peers;
  const int n = setup.nranks, me = setup.rank;
  BATON_RETURN_IF_ERROR(rdma::CheckForcedRdma(setup.config.rdma, peers[me].numa));
  set->rank_ = me;
  set->nranks_ = n;
  set->state_source_ = setup.call_state;
  set->lazy_ = setup.lazy;
  set->timeout_s_ =
      std::max(1.0, std::chrono::duration<double>(setup.deadline - Clock::now()).count());
  set->id_ = *setup.id;
  set->peers_ = peers;
  set->config_ = setup.config;
  set->SizePerPeer(n);
  set->channels_.resize(n);
  set->peer_segments_.resize(n);
  set->pair_.assign(n, Pair::kNone);
  set->incoming_.resize(n);

  set->watch_epoll_.reset(epoll_create1(EPOLL_CLOEXEC));
  set->wake_fd_.reset(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  set->notify_fd_.reset(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!set->watch_epoll_.valid() || !set->wake_fd_.valid() || !set->notify_fd_.valid())
    return ErrnoError("epoll/eventfd", errno);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kWakeKey;
  epoll_ctl(set->watch_epoll_.get(), EPOLL_CTL_ADD, set->wake_fd_.get(), &ev);

  // Rings in our segment: one per local peer, in rank order; ours in a
  // peer's segment: our index among its local peers.
  std::vector<int> local_peers;
  set->local_index_.assign(n, -1);
  set->send_index_.assign(n, -1);
  for (int p = 0; p < n; ++p) {
    if (p == me || !SharesMemory(peers[p], peers[me])) continue;
    set->local_index_[p] = static_cast<int>(local_peers.size());
    local_peers.push_back(p);
  }
  // Our index among p's local peers: the local ranks without p, in order.
  for (size_t i = 0; i < local_peers.size(); ++i) {
    const int p = local_peers[i];
    int mine = 0;
    for (int q : local_peers) mine += q < me && q != p;
    set->send_index_[p] = mine;
  }
  set->local_ranks_ = 1 + static_cast<int>(local_peers.size());
  set->all_shm_ = n > 1 && set->local_ranks_ == n;
  if (!local_peers.empty())
    BATON_RETURN_IF_ERROR(set->CreateOwnSegment(setup, static_cast<uint32_t>(local_peers.size())));

  if (setup.lazy) {
    // Nothing connected yet: the acceptor answers peers' connects from now.
    set->listener_ = std::move(*setup.listener);
    BATON_RETURN_IF_ERROR(SetNonBlocking(set->listener_.get(), true));
    set->accept_wake_.reset(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!set->accept_wake_.valid()) return ErrnoError("eventfd", errno);
  } else {
    if (!local_peers.empty()) BATON_RETURN_IF_ERROR(set->SetupShm(setup, local_peers));
    rdma::RdmaPeers rdma_peers;
    std::vector<Fd> rdma_control(n);
    for (int p = 0; p < n; ++p) {
      if (p == me) continue;
      std::vector<Fd>& sockets = (*setup.mesh)[p];
      if (sockets.empty()) return InternalError("no socket to rank " + std::to_string(p));
      Fd control = std::move(sockets.back());
      sockets.pop_back();
      if (set->channels_[p]) {
        BATON_RETURN_IF_ERROR(set->Publish(p, std::move(control)));
      } else if (UsesRdma(peers[me], peers[p])) {
        if (sockets.empty()) return InternalError("no set-up socket to rank " + std::to_string(p));
        rdma_peers.peers.push_back(p);
        rdma_peers.sockets.push_back(sockets[0].get());
        rdma_peers.closed.push_back(&set->peer_closed_[p]);
        rdma_control[p] = std::move(control);
      } else {
        if (sockets.empty()) return InternalError("no data socket to rank " + std::to_string(p));
        BATON_RETURN_IF_ERROR(set->AddTcpPeer(p, std::move(sockets)));
        BATON_RETURN_IF_ERROR(set->Publish(p, std::move(control)));
      }
    }
    if (!rdma_peers.peers.empty()) {
      rdma_peers.id = setup.id;
      rdma_peers.rank = me;
      rdma_peers.numa_node = peers[me].numa;
      rdma_peers.deadline = setup.deadline;
      rdma_peers.user_memory = setup.user_memory;
      std::vector<std::unique_ptr<Channel>> made;
      BATON_RETURN_IF_ERROR(rdma::ConnectRdmaPeers(setup.config.rdma, rdma_peers, &made));
      for (size_t i = 0; i < made.size(); ++i) {
        const int p = rdma_peers.peers[i];
        // The watchdog watches the completion fds too, so a sleep on the
        // doorbell (shared-memory peers as well) wakes for RDMA completions.
        set->peer_fds_[p] = static_cast<rdma::RdmaChannel*>(made[i].get())->fds();
        set->channels_[p] = std::move(made[i]);
        (*setup.mesh)[p].clear();  // the set-up sockets are done with
        BATON_RETURN_IF_ERROR(set->Publish(p, std::move(rdma_control[p])));
      }
    }
  }
  set->ReportHeld(setup.lazy ? "at creation (pairs connect on first use)" : "at creation");

  ChannelSet* raw = set.get();
  set->watchdog_ = std::thread([raw] { raw->WatchdogLoop(); });
  if (setup.lazy) set->acceptor_ = std::thread([raw] { raw->AcceptLoop(); });
  *out = std::move(set);
  return Status::Ok();
}

void ChannelSet::ReportHeld(const char* when) const {
  if (!LogEnabled(LogLevel::kInfo, kLogInit)) return;
  int descriptors = 0, segments = own_segment_ ? 1 : 0, shm = 0, tcp = 0, rdma = 0;
  size_t mapped = own_segment_ ? own_segment_->size() : 0;
  for (int p = 0; p < nranks_; ++p) {
    if (!connected(p)) continue;
    descriptors += control_[p].valid() + static_cast<int>(peer_fds_[p].size());
    if (peer_segments_[p]) {
      ++segments;
      mapped += peer_segments_[p]->size();
    }
    const Channel::Kind kind = channel_of_[p].load(std::memory_order_acquire)->kind();
    shm += kind == Channel::Kind::kShm;
    tcp += kind == Channel::Kind::kTcp;
    rdma += kind != Channel::Kind::kShm && kind != Channel::Kind::kTcp;
  }
  BATON_INFO(kLogInit,
             "rank %d %s: %d peers connected (%d over shared memory, %d over RDMA, %d over TCP) "
             "of %d; %d descriptors, %d shared-memory segments mapped (%.1f MiB of address space)",
             rank_, when, shm + tcp + rdma, shm, rdma, tcp, nranks_ - 1, descriptors, segments,
             mapped / 1048576.0);
}

Status ChannelSet::AddTcpPeer(int peer, std::vector<Fd> data) {
  std::unique_ptr<TcpChannel> ch;
  BATON_RETURN_IF_ERROR(TcpChannel::Create(std::move(data), config_.buffsize, peer, &ch));
  peer_fds_[peer] = ch->fds();
  channels_[peer] = std::move(ch);
  return Status::Ok();
}

Status ChannelSet::AddShmPeer(int peer, std::unique_ptr<ShmSegment> segment) {
  const int recv_index = local_index_[peer], send_index = send_index_[peer];
  if (recv_index < 0 || send_index < 0 ||
      static_cast<uint32_t>(send_index) >= segment->layout().nrings)
    return InternalError("shared memory layout disagrees with rank " + std::to_string(peer));
  // Ranks that share a last-level cache pass small calls' pieces through
  // it (ShmChannel::Copying::kHot); between packages a piece written with
  // cached stores would be read line by line out of the other package's
  // cache, so it goes to memory with streaming stores (docs/performance.md,
  // "Shared-memory rings: hot pieces, and streaming between packages").
  // In between, the rings measure how far apart their ranks are, as a
  // virtual machine's topology may not say (LinesAreFar, transport/shm.h).
  const PeerInfo &me = peers_[rank_], &them = peers_[peer];
  const bool share_cache = me.packages <= 1 || (me.package >= 0 && me.package == them.package);
  const bool stream = config_.shm_stream == 1 || (config_.shm_stream == -1 && !share_cache);
  const ShmChannel::Copying copying = stream        ? ShmChannel::Copying::kStreaming
                                      : share_cache ? ShmChannel::Copying::kHot
                                                    : ShmChannel::Copying::kCached;
  channels_[peer] = std::make_unique<ShmChannel>(
      own_segment_.get(), static_cast<uint32_t>(recv_index), segment.get(),
      static_cast<uint32_t>(send_index), &peer_closed_[peer], peer, copying,
      /*adaptive=*/config_.shm_stream == -1);
  segment->MapRing(static_cast<uint32_t>(send_index));
  peer_segments_[peer] = std::move(segment);
  return Status::Ok();
}

Status ChannelSet::Publish(int peer, Fd control) {
  control_[peer] = std::move(control);
  epoll_event ev{};
  for (size_t i = 0; i < peer_fds_[peer].size(); ++i) {
    ev.events = kBaseEvents;
    ev.data.u64 = WatchKey(peer, static_cast<int>(i));
    if (epoll_ctl(watch_epoll_.get(), EPOLL_CTL_ADD, peer_fds_[peer][i], &ev) != 0)
      return ErrnoError("epoll_ctl", errno);
  }
  // Published before the watchdog can report on it.
  channel_of_[peer].store(channels_[peer].get(), std::memory_order_release);
  connected_[peer].store(true, std::memory_order_release);
  if (control_[peer].valid()) {
    ev.events = kControlEvents;
    ev.data.u64 = WatchKey(peer, kControlSocketIndex);
    if (epoll_ctl(watch_epoll_.get(), EPOLL_CTL_ADD, control_[peer].get(), &ev) != 0)
      return ErrnoError("epoll_ctl", errno);
  }
  {
    // A shrink waiting for this peer's offer wakes to read it.
    std::lock_guard<std::mutex> lock(control_mu_);
    control_cv_.notify_all();
    // A peer connected after a failure learns what this rank knows.
    if (failed_.count() > 0) SendControl(peer, EncodeFailed(failed_.Sorted()));
  }
  return Status::Ok();
}

std::unique_ptr<ChannelSet> ChannelSet::OverChannels(
    int rank, std::vector<std::unique_ptr<Channel>> channels) {
  auto set = std::make_unique<ChannelSet>();
  const int n = static_cast<int>(channels.size());
  set->rank_ = rank;
  set->nranks_ = n;
  set->SizePerPeer(n);
  for (int p = 0; p < n; ++p) {
    set->channel_of_[p].store(channels[p].get());
    set->connected_[p].store(channels[p] != nullptr);
  }
  set->channels_ = std::move(channels);
  return set;
}

void ChannelSet::SizePerPeer(int n) {
  channel_of_ = std::make_unique<std::atomic<Channel*>[]>(n);
  connected_ = std::make_unique<std::atomic<bool>[]>(n);
  peer_closed_ = std::make_unique<std::atomic<bool>[]>(n);
  for (int p = 0; p < n; ++p) {
    channel_of_[p].store(nullptr);
    connected_[p].store(false);
    peer_closed_[p].store(false);
  }
  control_.resize(n);
  peer_fds_.resize(n);
  control_in_.resize(n);
  control_done_.assign(n, 0);
  peer_state_.resize(n);
  failed_ = FailedSet(n);
  shrink_offers_.resize(n);
  peer_state_at_.resize(n);
}

Status ChannelSet::CreateOwnSegment(const ChannelSetup& setup, uint32_t nrings) {
  // A power of two, so that a slot's index is a mask, not a division, on
  // every message's path.
  const uint32_t nslots =
      std::bit_floor(std::clamp<uint32_t>(setup.config.shm_slots, 2, kShmMaxSlots));
  uint64_t slot_bytes = std::max<uint64_t>(setup.config.buffsize / nslots / 4096 * 4096, 4096);
  slot_bytes = std::min<uint64_t>(slot_bytes, kShmMaxSlotBytes);
  size_t bytes = ShmSegmentBytes(nrings, nslots, static_cast<uint32_t>(slot_bytes));
  const std::string name =
      ShmSegmentName(setup.id->comm_id, setup.rank, (*setup.peers)[setup.rank].pid);
  Status st = ShmSegment::Create(name, bytes, &own_segment_);
  if (st.code() == batonSystemError && st.message().find("File exists") != std::string::npos) {
    // Left behind by a crashed run with the same id: ours to replace.
    shm_unlink(name.c_str());
    st = ShmSegment::Create(name, bytes, &own_segment_);
  }
  BATON_RETURN_IF_ERROR(st.WithContext("shared memory (is /dev/shm full?)"));
  InitShmSegment(own_segment_.get(), nrings, nslots, static_cast<uint32_t>(slot_bytes));
  if (setup.config.cma || setup.config.cma_coll) {
    InitCmaProbe(own_segment_.get());
    // Where Yama restricts ptrace to descendants, let sibling ranks read us
    // (Open MPI's shared-memory transport does the same).
    prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
  }
  bell_ = &own_segment_->header()->bell;
  BATON_INFO(kLogShm, "shared memory: %u rings of %u x %llu bytes", nrings, nslots,
             (unsigned long long)slot_bytes);
  return Status::Ok();
}

Status ChannelSet::SetupShm(const ChannelSetup& setup, const std::vector<int>& local_peers) {
  const int me = setup.rank;
  const auto& peers = *setup.peers;
  std::vector<std::vector<uint8_t>> replies;
  uint64_t token = 0x5245414459ull;  // "READY"
  BATON_RETURN_IF_ERROR(
      ExchangeWithPeers(*setup.mesh, local_peers, &token, &replies, sizeof(token), setup.deadline));
  for (int p : local_peers) {
    std::unique_ptr<ShmSegment> peer_seg;
    BATON_RETURN_IF_ERROR(
        ShmSegment::Open(ShmSegmentName(setup.id->comm_id, p, peers[p].pid), &peer_seg));
    BATON_RETURN_IF_ERROR(AddShmPeer(p, std::move(peer_seg)));
  }
  // Which peers' memory can we read? Each tells every local peer its whole
  // answer; a peer then sends us descriptors only if we can read it. This
  // exchange also means every local peer has mapped our segment, so its
  // name can go and a crash later leaves nothing behind in /dev/shm.
  std::vector<uint8_t> can_read(setup.nranks, 0);
  if (setup.config.cma)
    for (int p : local_peers) can_read[p] = ProbeCma(peers[p].pid, *peer_segments_[p]);
  BATON_RETURN_IF_ERROR(ExchangeWithPeers(*setup.mesh, local_peers, can_read.data(), &replies,
                                          can_read.size(), setup.deadline));
  own_segment_->Unlink();
  int cma_peers = 0;
  for (size_t i = 0; i < local_peers.size(); ++i) {
    int p = local_peers[i];
    bool peer_reads_us = replies[i][me] != 0;
    cma_peers += peer_reads_us;
    static_cast<ShmChannel*>(channels_[p].get())
        ->EnableCma(peer_reads_us && setup.config.cma, peers[p].pid, setup.config.cma_threshold);
  }
  BATON_INFO(kLogShm, "cross memory attach: %d of %d local peers read our memory directly",
             cma_peers, (int)local_peers.size());
  return Status::Ok();
}

int ChannelSet::ProbePeerMemory(int peer) const {
  if (peer < 0 || peer >= nranks_ || !peer_segments_[peer]) return EINVAL;
  return ProbeCmaError(peers_[peer].pid, *peer_segments_[peer]);
}

ChannelSet::ChannelSet() = default;

ChannelSet::~ChannelSet() {
  if (acceptor_.joinable()) {
    stopping_.store(true);
    uint64_t one = 1;
    if (write(accept_wake_.get(), &one, sizeof(one)) < 0) {
    }
    acceptor_.join();
  }
  if (lazy_) ReportHeld("at destroy");
  if (watchdog_.joinable()) {
    stopping_.store(true);
    uint64_t one = 1;
    if (write(wake_fd_.get(), &one, sizeof(one)) < 0) {
    }
    watchdog_.join();
  }
}

void ChannelSet::WatchdogLoop() {
  SetLogRank(rank_);
  epoll_event events[64];
  while (!stopping_.load()) {
    int n = epoll_wait(watch_epoll_.get(), events, 64, -1);
    if (n < 0 && errno != EINTR) {
      BATON_WARN(kLogNet, "watchdog: epoll_wait: %s", strerror(errno));
      return;
    }
    for (int i = 0; i < n; ++i) {
      uint64_t key = events[i].data.u64;
      if (key == kWakeKey) {
        uint64_t v;
        if (read(wake_fd_.get(), &v, sizeof(v)) < 0) {
        }
        continue;
      }
      const int peer = static_cast<int>(key / 256), index = static_cast<int>(key % 256);
      if (index == kControlSocketIndex) {
        // A note (read before the close that follows it), or the peer left.
        bool open;
        {
          std::lock_guard<std::mutex> lock(control_mu_);
          open = ReadControlLocked(peer);
        }
        if (open && !(events[i].events & (EPOLLHUP | EPOLLERR))) {
          epoll_event ev{};
          ev.events = kControlEvents;
          ev.data.u64 = key;
          epoll_ctl(watch_epoll_.get(), EPOLL_CTL_MOD, control_[peer].get(), &ev);
        } else {
          peer_closed_[peer].store(true, std::memory_order_release);
          BATON_INFO(kLogNet, "rank %d closed its connection", peer);
          Notify();
        }
        continue;
      }
      if (events[i].events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
        // One-shot: the peer stays marked closed and is not re-armed.
        peer_closed_[peer].store(true, std::memory_order_release);
        BATON_INFO(kLogNet, "rank %d closed its connection", peer);
        uint64_t one = 1;
        if (write(notify_fd_.get(), &one, sizeof(one)) < 0) {
        }
      } else {
        epoll_event ev{};
        ev.events = kBaseEvents;
        ev.data.u64 = key;
        epoll_ctl(watch_epoll_.get(), EPOLL_CTL_MOD, peer_fds_[peer][index], &ev);
      }
      ForceRingDoorbell(bell_);
    }
  }
}

uint32_t ChannelSet::PrepareSleep() {
  uint32_t seq = bell_->seq.load(std::memory_order_acquire);
  bell_->waiting.store(1, std::memory_order_seq_cst);
  return seq;
}

void ChannelSet::CancelSleep() {
  bell_->waiting.store(0, std::memory_order_relaxed);
}

void ChannelSet::Wait(const WaitSet& ws, uint32_t seq, int timeout_ms) {
  if (!ws.any_shm) {
    std::vector<pollfd> fds = ws.tcp;
    fds.push_back({notify_fd_.get(), POLLIN, 0});
    int n = poll(fds.data(), fds.size(), timeout_ms);
    if (n > 0 && fds.back().revents) {
      uint64_t v;
      if (read(notify_fd_.get(), &v, sizeof(v)) < 0) {
      }
    }
    return;
  }
  // Shared memory (and maybe TCP too): sleep on the doorbell; the watchdog
  // rings it when an armed socket becomes ready.
  for (size_t i = 0; i < ws.tcp.size(); ++i) {
    epoll_event ev{};
    ev.events = kBaseEvents | (ws.tcp[i].events & POLLIN ? uint32_t(EPOLLIN) : 0u) |
                (ws.tcp[i].events & POLLOUT ? uint32_t(EPOLLOUT) : 0u);
    ev.data.u64 = ws.tcp_keys[i];
    epoll_ctl(watch_epoll_.get(), EPOLL_CTL_MOD, ws.tcp[i].fd, &ev);
  }
  // A re-arm by the watchdog can race with ours; a short cap bounds the cost.
  if (!ws.tcp.empty()) timeout_ms = std::min(timeout_ms, 10);
  if (!aborted()) WaitDoorbell(bell_, seq, timeout_ms);
  CancelSleep();
}

void ChannelSet::Abort(const FailureNote* note) {
  aborted_.store(true, std::memory_order_release);
  if (note != nullptr) {
    // Best effort and never blocking: a note is far smaller than a socket
    // buffer, and a peer that stopped reading has left anyway. The failed
    // ranks go first, so a peer that fails because of the note knows them.
    std::vector<uint8_t> frame = EncodeFailed(FailedRanks());
    const std::vector<uint8_t> text = EncodeNote(*note);
    frame.insert(frame.end(), text.begin(), text.end());
    for (int p = 0; p < nranks_; ++p)
      if (p != note->origin) SendControl(p, frame);
    note_forwarded_.store(true, std::memory_order_release);
  }
  if (own_segment_) {
    // After the notes: a peer that sees this finds the note on its socket.
    own_segment_->lines()->gave_up.store(lines_unfinished_.load(std::memory_order_relaxed),
                                         std::memory_order_release);
  }
  for (int p = 0; p < nranks_; ++p)
    if (connected(p))
      for (int fd : peer_fds_[p]) shutdown(fd, SHUT_RDWR);
  uint64_t one = 1;
  if (write(notify_fd_.get(), &one, sizeof(one)) < 0) {
  }
  ForceRingDoorbell(bell_);
}

}  // namespace baton
