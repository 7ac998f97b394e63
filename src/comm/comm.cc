#include "comm/comm.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <thread>

#include "algorithms/barrier.h"
#include "algorithms/rhd.h"
#include "algorithms/ring.h"
#include "base/cpu.h"
#include "base/log.h"
#include "base/rank_ranges.h"
#include "base/trace_file.h"
#include "bootstrap/host_id.h"
#include "bootstrap/mesh.h"
#include "bootstrap/rendezvous.h"
#include "comm/host_ipc.h"
#include "exec/call_check.h"
#include "kernels/cpu_reduce.h"
#include "topology/binding.h"
#include "topology/machine.h"

namespace baton {

PeerInfo LocalPeerInfo(int rank, const SockAddr& listen_addr, const std::string& ifname,
                       const CommConfig& config) {
  PeerInfo info{};
  info.rank = rank;
  info.pid = getpid();
  info.host_hash = HostHash(config.hostid);
  info.listen_addr = ToWire(listen_addr);
  gethostname(info.hostname, sizeof(info.hostname) - 1);
  info.wants_tcp = config.transport.force_tcp ? 1 : 0;
  info.shm_only = config.transport.shm_only ? 1 : 0;
  info.tcp_sockets = static_cast<uint8_t>(config.transport.tcp_sockets);
  // A link shaped below what its interface reports (tc, a cloud's rate
  // limit) is priced at the rate the user names.
  info.nic_mbps = config.net_mbps > 0 ? config.net_mbps : InterfaceSpeedMbps(ifname);
  info.machine_hash = MachineHash();
  // Where this rank runs. Without a machine model (hwloc failed) it reports
  // an unbound rank on a one-package host, which costs only tuning.
  info.package = info.numa = -1;
  info.packages = info.numa_nodes = 1;
  info.cores = static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency()));
  const Machine* machine = nullptr;
  std::vector<int> pus;
  const Status st = CachedMachine(config.topo_file, &machine, /*with_devices=*/false);
  if (st.ok() && CurrentAffinity(&pus).ok()) {
    const Placement where = PlacementOf(*machine, pus);
    info.package = static_cast<int16_t>(where.package);
    info.numa = static_cast<int16_t>(where.numa);
    info.packages = static_cast<int16_t>(machine->packages);
    info.numa_nodes = static_cast<int16_t>(machine->numa_nodes);
    info.cores = machine->core_count();
    info.l2_kib = static_cast<int32_t>(machine->l2_bytes >> 10);
    info.llc_kib = static_cast<int32_t>(machine->llc_bytes >> 10);
  } else if (!st.ok()) {
    BATON_WARN(kLogInit, "no machine topology (%s): tuning assumes one package",
               st.message().c_str());
  }
  info.rdma = rdma::RdmaOffered(config.transport.rdma, info.numa) ? 1 : 0;
  info.runtime_connect = config.transport.runtime_connect ? 1 : 0;
  return info;
}

Status CheckTransportsAgree(const std::vector<PeerInfo>& peers) {
  const auto shm =
      std::find_if(peers.begin(), peers.end(), [](const PeerInfo& p) { return p.shm_only != 0; });
  if (shm == peers.end()) return Status::Ok();
  const auto tcp =
      std::find_if(peers.begin(), peers.end(), [](const PeerInfo& p) { return p.wants_tcp != 0; });
  if (tcp != peers.end())
    return InvalidUsage("BATON_TRANSPORT differs between ranks: shm on rank " +
                        std::to_string(shm->rank) + ", tcp on rank " + std::to_string(tcp->rank) +
                        " (set it alike on every rank)");
  std::vector<int> elsewhere;
  for (const PeerInfo& p : peers)
    if (p.host_hash != shm->host_hash) elsewhere.push_back(p.rank);
  if (elsewhere.empty()) return Status::Ok();
  // Simulated hosts (BATON_HOSTID) share a hostname; name it only where it helps.
  const PeerInfo& other = peers[elsewhere[0]];
  const bool named = strncmp(other.hostname, shm->hostname, sizeof(other.hostname)) != 0;
  return InvalidUsage("BATON_TRANSPORT=shm (rank " + std::to_string(shm->rank) +
                      ") reaches only the ranks of one host, but " + RankRanges(elsewhere) +
                      (elsewhere.size() == 1 ? " runs" : " run") + " on another host" +
                      (named ? std::string(" (") + other.hostname + ")" : std::string()) +
                      ": use BATON_TRANSPORT=auto, or tcp, between hosts");
}

bool HostsShareMachines(const std::vector<PeerInfo>& peers) {
  std::map<uint64_t, uint64_t> host_of_machine;
  for (const PeerInfo& p : peers) {
    auto [it, fresh] = host_of_machine.try_emplace(p.machine_hash, p.host_hash);
    if (!fresh && it->second != p.host_hash) return true;
  }
  return false;
}

Status Communicator::BindAmongMachine() {
  int index = 0, count = 0;
  for (const PeerInfo& p : peers_) {
    if (p.machine_hash != peers_[rank_].machine_hash) continue;
    if (p.rank < rank_) ++index;
    ++count;
  }
  bool bound = false;
  BATON_RETURN_IF_ERROR(
      BindAmongMachineRanks(config_.bind, config_.topo_file, index, count, &bound));
  if (bound)
    BATON_INFO(kLogInit, "bound as rank %d of the %d on this machine (BATON_BIND=%s)", index, count,
               config_.bind.c_str());
  return Status::Ok();
}

Status Communicator::ExchangePlaces() {
  // Where this rank runs now, as LocalPeerInfo reports it.
  const PeerInfo now = LocalPeerInfo(rank_, SockAddr{}, "", config_);
  struct Place {
    int16_t package, numa;
  };
  const Place mine{now.package, now.numa};
  std::vector<Place> all(nranks_);
  BATON_RETURN_IF_ERROR(AllGatherBytes(&mine, sizeof(Place), all.data()));
  for (int r = 0; r < nranks_; ++r) {
    peers_[r].package = all[r].package;
    peers_[r].numa = all[r].numa;
  }
  return Status::Ok();
}

std::vector<RankPlace> PlacesOf(const std::vector<PeerInfo>& peers) {
  std::vector<RankPlace> places(peers.size());
  for (size_t r = 0; r < peers.size(); ++r) {
    const PeerInfo& p = peers[r];
    places[r] = {p.host_hash,      p.package, p.numa,     p.packages,    p.numa_nodes,
                 p.wants_tcp != 0, p.cores,   p.nic_mbps, p.machine_hash};
  }
  return places;
}

Status Communicator::Create(const Settings& settings, const UniqueIdData& id, int nranks, int rank,
                            std::shared_ptr<Communicator>* out, const std::string& name,
                            const std::string& gpu_pci) {
  auto comm = std::make_shared<Communicator>();
  comm->rank_ = rank;
  comm->nranks_ = nranks;
  BATON_RETURN_IF_ERROR(CommConfig::FromSettings(settings, &comm->config_));
  comm->config_.name = name;
  comm->config_.PlaceGpu(gpu_pci);
  SetLogRank(rank);
  const Deadline deadline = DeadlineIn(comm->config_.timeout_s);
  const auto started = Clock::now();
  auto ms_since = [](Clock::time_point t) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
  };

  SockAddr addr, bound;
  std::string ifname;
  BATON_RETURN_IF_ERROR(SelectInterfaceAddress(comm->config_.socket_ifname, &addr, &ifname));
  Fd listener;
  BATON_RETURN_IF_ERROR(ListenOn(addr, &listener, &bound));
  const PeerInfo mine = LocalPeerInfo(rank, bound, ifname, comm->config_);
  const double local_ms = ms_since(started);
  BATON_RETURN_IF_ERROR(Rendezvous(id, nranks, rank, mine, deadline, &comm->peers_));
  BATON_RETURN_IF_ERROR(CheckTransportsAgree(comm->peers_));
  const double rendezvous_ms = ms_since(started) - local_ms;
  const auto mesh_started = Clock::now();
  // Connections on first use when every rank asks for them and no pair
  // uses RDMA (its set-up is made for the whole mesh at once); every rank
  // decides alike from the same table.
  bool lazy = nranks > 1;
  uint64_t rdma_host = 0;
  bool rdma_hosts = false;
  for (const PeerInfo& p : comm->peers_) {
    lazy = lazy && p.runtime_connect != 0;
    if (p.rdma == 0) continue;
    rdma_hosts = rdma_hosts || (rdma_host != 0 && p.host_hash != rdma_host);
    rdma_host = p.host_hash;
  }
  lazy = lazy && !rdma_hosts;
  std::vector<std::vector<Fd>> mesh;
  if (!lazy) {
    std::vector<int> sockets_per_peer(nranks, 0);
    for (int p = 0; p < nranks; ++p)
      if (p != rank) sockets_per_peer[p] = SocketsBetween(comm->peers_[rank], comm->peers_[p]);
    BATON_RETURN_IF_ERROR(
        ConnectMesh(id, rank, listener.get(), comm->peers_, sockets_per_peer, deadline, &mesh));
    listener.reset();
  }
  const double mesh_ms = ms_since(mesh_started);

  // Several hosts on one machine (containers, network namespaces): their
  // launchers bound ranks without seeing each other, so BATON_BIND binds
  // them again by their index among the machine's ranks.
  const bool shared_machine = HostsShareMachines(comm->peers_);
  if (shared_machine) BATON_RETURN_IF_ERROR(comm->BindAmongMachine());

  comm->recorder_ = FlightRecorder::Create(
      static_cast<uint32_t>(std::clamp<int64_t>(comm->config_.flight_recorder, 1, 1 << 16)),
      comm->config_.flight_recorder > 0, rank, nranks, id.comm_id,
      std::string(mine.hostname, strnlen(mine.hostname, sizeof(mine.hostname))), name);
  if (comm->recorder_ == nullptr) return ErrnoError("mmap (flight recorder)", errno);
  // What the first call would otherwise look up on its way: the reduce
  // kernels' level, the caches from sysfs (a dozen files; they were most of
  // the 250 us that a communicator's first 8-byte allreduce took here).
  (void)CurrentCpuKernelLevel();
  (void)LastLevelCacheBytes();
  (void)CacheLineBytes();

  if (!comm->config_.trace_file.empty()) {
    // The first traced communicator of this process writes FILE.rankN.json,
    // later ones FILE.rankN.commK.json (base/trace_file.h).
    static std::atomic<int> traced{0};
    const int index = ++traced;
    TraceRecorderConfig trace;
    trace.track = comm->config_.trace_rank >= 0 ? comm->config_.trace_rank : rank;
    trace.path = TraceRankFile(comm->config_.trace_file, trace.track,
                               index == 1 ? "" : "comm" + std::to_string(index));
    trace.capacity =
        static_cast<uint32_t>(std::clamp<int64_t>(comm->config_.trace_events, 1, int64_t{1} << 24));
    trace.base = comm->config_.trace_file;
    if (trace.base.front() != '/') {
      char cwd[4096];
      if (getcwd(cwd, sizeof(cwd)) != nullptr) trace.base = std::string(cwd) + "/" + trace.base;
    }
    trace.list = comm->config_.trace_list;
    trace.comm_rank = rank;
    trace.nranks = nranks;
    trace.comm_id = id.comm_id;
    trace.comm_name = name;
    trace.host = std::string(mine.hostname, strnlen(mine.hostname, sizeof(mine.hostname)));
    comm->trace_ = std::make_unique<TraceRecorder>(std::move(trace));
    BATON_INFO(kLogInit, "tracing calls to %s", comm->trace_->config().path.c_str());
  }

  // Waiting polls, yielding the core regularly, then sleeps (docs/design.md,
  // "Waiting"): yield on every poll when this machine has more ranks than
  // cores (counting simulated hosts on it), since the peer we wait for may
  // then be waiting for our core.
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  int same_machine = 0;
  for (const auto& p : comm->peers_) same_machine += p.machine_hash == mine.machine_hash;
  const bool oversubscribed = same_machine > cores;
  const CommConfig& config = comm->config_;
  comm->config_.transport.spin =
      SpinPolicy::Of(config.spin_us, config.spin_yield, config.spin_yield_ns, oversubscribed);

  FlightRecorder* recorder = comm->recorder_.get();
  ChannelSetup setup{&id,      rank,
                     nranks,   &comm->peers_,
                     &mesh,    comm->config_.transport,
                     deadline, [recorder] { return recorder->Latest(); },
                     lazy,     &listener};
  setup.user_memory = &comm->registrations_;
  const auto channels_started = Clock::now();
  BATON_RETURN_IF_ERROR(ChannelSet::Create(setup, &comm->channels_));
  const double channels_ms = ms_since(channels_started);

  ExecutorConfig exec;
  exec.timeout_s = comm->config_.timeout_s;
  exec.spin = comm->config_.transport.spin;
  // Ask stalled peers where they are after a second, or sooner when the
  // timeout is short, so that a verdict is in before it.
  exec.probe = std::chrono::milliseconds(
      static_cast<int64_t>(std::clamp(config.timeout_s * 1000.0 / 4, 50.0, 1000.0)));
  for (int r = 0; r < nranks; ++r) {
    const PeerInfo& p = comm->peers_[r];
    exec.peer_labels.push_back(
        "rank " + std::to_string(r) + " (pid " + std::to_string(p.pid) + " on " +
        std::string(p.hostname, strnlen(p.hostname, sizeof(p.hostname))) + ")");
  }
  comm->executor_ = std::make_unique<Executor>(comm->channels_.get(), exec);

  comm->ring_.resize(nranks);  // rank order until the topology gives one
  for (int r = 0; r < nranks; ++r) comm->ring_[r] = r;
  if (shared_machine) BATON_RETURN_IF_ERROR(comm->ExchangePlaces());
  comm->topology_ = CommTopology(PlacesOf(comm->peers_));
  comm->ring_ = comm->topology_.RingOrder();
  BATON_INFO(kLogInit, "topology: %s", comm->topology_.Describe().c_str());
  // The ring neighbours are connected at creation: failure notes travel
  // around the ring to ranks that never talked to the one that failed.
  if (lazy) {
    const auto it = std::find(comm->ring_.begin(), comm->ring_.end(), rank);
    const size_t at = static_cast<size_t>(it - comm->ring_.begin());
    const std::vector<int> neighbours{comm->ring_[(at + 1) % nranks],
                                      comm->ring_[(at + nranks - 1) % nranks]};
    BATON_RETURN_IF_ERROR(comm->channels_->Connect(neighbours, deadline));
  }
  BATON_RETURN_IF_ERROR(comm->SetUpTuning());

  BATON_INFO(kLogInit, "rank %d of %d ready%s%s (%d local ranks, host %s, pid %d)", rank, nranks,
             name.empty() ? "" : ": ", name.c_str(), comm->channels_->local_ranks(), mine.hostname,
             mine.pid);
  BATON_INFO(kLogInit,
             "created in %.1f ms: this rank's info %.1f, rendezvous %.1f, connections %.1f, "
             "channels %.1f, the rest %.1f",
             ms_since(started), local_ms, rendezvous_ms, mesh_ms, channels_ms,
             ms_since(started) - local_ms - rendezvous_ms - mesh_ms - channels_ms);
  *out = std::move(comm);
  return Status::Ok();
}

Communicator::~Communicator() {
  WriteTraceLocked();
}

void Communicator::WriteTrace() {
  std::lock_guard<std::mutex> lock(run_mu_);
  WriteTraceLocked();
}

void Communicator::WriteTraceLocked() {
  if (trace_ == nullptr) return;
  if (const Status st = trace_->Write(); !st.ok())
    BATON_WARN(kLogInit, "BATON_TRACE_FILE: %s", st.message().c_str());
}

Status Communicator::AllGatherBytes(const void* mine, size_t bytes, void* all) {
  const CollArgs a = MakeArgs(mine, all, bytes, batonUint8);
  return Run([&a](Schedule* s) { BuildRingAllGather(a, s); });
}

Status Communicator::Barrier() {
  const CollArgs a = MakeArgs();
  return Run([&a](Schedule* s) { BuildDisseminationBarrier(a, s); });
}

Status Communicator::Run(const Schedule& schedule) {
  std::lock_guard<std::mutex> lock(run_mu_);
  return RunLocked(schedule);
}

Status Communicator::Run(const std::function<void(Schedule*)>& build) {
  std::lock_guard<std::mutex> lock(run_mu_);
  ClearReusable();
  build(&reusable_);
  return RunLocked(reusable_);
}

Status Communicator::RunRepeatable(const RepeatKey& key, const void* send, const void* recv,
                                   const std::function<void(Schedule*)>& build) {
  std::lock_guard<std::mutex> lock(run_mu_);
  if (!repeat_valid_ || !(key == repeat_key_)) {
    ClearReusable();
    build(&reusable_);
    repeat_key_ = key;
    repeat_send_ = send;
    repeat_recv_ = recv;
    // A schedule that could not be built fails its call; build it again
    // next time rather than remember that. Registered calls take their own
    // path (host_ipc.cc) and are never repeated here.
    repeat_valid_ = reusable_.build_error.ok() && !reusable_.registered.valid;
    return RunLocked(reusable_);
  }
  // Both buffers moved alike (the key fixes recv's offset from send).
  const auto delta = static_cast<ptrdiff_t>(
      key.has_send ? reinterpret_cast<uintptr_t>(send) - reinterpret_cast<uintptr_t>(repeat_send_)
                   : reinterpret_cast<uintptr_t>(recv) - reinterpret_cast<uintptr_t>(repeat_recv_));
  if (delta != 0) [[unlikely]] {
    reusable_.Rebase(repeat_send_, key.send_bytes, repeat_recv_, key.recv_bytes, delta);
    repeat_send_ = send;
    repeat_recv_ = recv;
  }
  reusable_.ZeroScratch();
  return RunLocked(reusable_, /*unchanged=*/true);
}

void Communicator::NumberCalls(const Schedule& schedule) {
  const size_t n = std::max<size_t>(1, schedule.calls.size());
  if (numbered_.size() != n) numbered_.resize(n);
  const uint32_t first_collective = collective_calls_;
  if (sends_to_.size() != static_cast<size_t>(nranks_)) {
    sends_to_.assign(nranks_, 0);
    recvs_from_.assign(nranks_, 0);
  }
  for (size_t i = 0; i < n; ++i) {
    // Numbered in registers, as the descriptor's three words, each loaded
    // and stored as one: building it field by field, or copying it with
    // wider moves, stalls on store forwarding, and this is on every call's
    // latency path.
    static const CallDescriptor kInternal = [] {
      CallDescriptor d;
      d.kind = kCallKindInternal;
      return d;
    }();
    const auto* src =
        reinterpret_cast<const uint8_t*>(schedule.calls.empty() ? &kInternal : &schedule.calls[i]);
    uint64_t w0, w1, w2;
    memcpy(&w0, src, 8);
    memcpy(&w1, src + 8, 8);
    memcpy(&w2, src + 16, 8);
    const auto kind = static_cast<uint8_t>(w2);  // byte 16
    if (kind == kCallKindPointToPoint) {
      const auto peer = static_cast<int32_t>(w0 >> 32);
      const bool is_send = (w2 & kCallIsSendMask) != 0;
      w0 = peer >= 0 && peer < nranks_ ? ++(is_send ? sends_to_ : recvs_from_)[peer] : 0;
      w2 &= ~kCallIsSendMask;
    } else {
      w0 = (w0 & ~uint64_t{0xffffffff}) | ++collective_calls_;
    }
    auto* dst = reinterpret_cast<uint8_t*>(&numbered_[i]);
    memcpy(dst, &w0, 8);
    memcpy(dst + 8, &w1, 8);
    memcpy(dst + 16, &w2, 8);
    const uint32_t record = recorder_->Begin(w0, w1, w2);
    if (i == 0) first_record_ = record;
  }
  if (schedule.calls.empty()) [[unlikely]]
    BATON_TRACE(kLogColl, "call #%u: Baton's internal exchange", collective_calls_);
  if (trace_ != nullptr) [[unlikely]]
    trace_->Begin(schedule, numbered_);
  // Tell the peers this rank is in these collectives without a registered
  // record: a peer waiting with one takes the ordinary path too.
  if (const uint32_t numbered = collective_calls_ - first_collective; numbered != 0) {
    collective_seq_ += numbered;
    if (!record_published_ && channels_->has_mailboxes()) {
      size_t first = 0;  // a group may open with point-to-point calls
      while (numbered_[first].kind == kCallKindPointToPoint) ++first;
      channels_->PublishCall(collective_seq_, numbered_[first]);
    }
  }
}

void Communicator::EndCalls(batonResult_t result) {
  for (size_t i = 0; i < numbered_.size(); ++i)
    recorder_->End(recorder_->Next(first_record_, i), result);
  if (trace_ != nullptr) [[unlikely]]
    trace_->End(result);
}

Status Communicator::CheckAgreementLocked(double timeout_s) {
  // What a rank is about to do: its first collective and how many it runs
  // (a group may hold several). Point-to-point calls concern two ranks only.
  struct Record {
    CallDescriptor call;
    uint32_t collectives = 0;
    uint32_t reserved = 0;
  };
  Record mine;
  for (const CallDescriptor& c : numbered_)
    if (c.kind != kCallKindPointToPoint && mine.collectives++ == 0) mine.call = c;
  if (mine.collectives == 0) return Status::Ok();
  std::vector<Record> all(nranks_);
  const CollArgs a = MakeArgs(&mine, all.data(), sizeof(Record), batonUint8);
  check_schedule_.Clear();
  BuildRecursiveDoublingAllGather(a, &check_schedule_);
  // Numbered 0, so the exchange itself matches whatever the ranks called.
  CallDescriptor check;
  check.kind = kCallKindInternal;
  BATON_RETURN_IF_ERROR(executor_->Run(check_schedule_, {check}, rank_, timeout_s));
  for (int r = 0; r < nranks_; ++r) {
    if (all[r].call == mine.call && all[r].collectives == mine.collectives) continue;
    CallMismatch found;
    found.kind = CallMismatch::Kind::kOtherCall;
    found.theirs = all[r].call;
    Status st = CallMismatchError(rank_, r, mine.call, found, 0);
    if (all[r].collectives != mine.collectives)
      return InvalidUsage(st.message() + "; in this group rank " + std::to_string(r) + " calls " +
                          std::to_string(all[r].collectives) + " collectives, rank " +
                          std::to_string(rank_) + " " + std::to_string(mine.collectives));
    return st;
  }
  return Status::Ok();
}

Status Communicator::RunLocked(const Schedule& schedule, bool unchanged) {
  if (batonResult_t err = async_error_.load(); err != batonSuccess)
    return Status(err, UnusableMessage());
  if (channels_->aborted()) return RemoteError("communicator was aborted");
  // A call that could not be built fails here, on every rank through the
  // failure notes, rather than run with what it could not read.
  if (!schedule.build_error.ok()) [[unlikely]]
    return Fail(schedule.build_error);
  if (schedule.registered.valid && schedule.calls.size() == 1 && nranks_ > 1 &&
      channels_->has_mailboxes()) [[unlikely]] {
    // Registered calls read every local peer's segment (comm/host_ipc.cc).
    const double timeout_s = schedule.timeout_s >= 0 ? schedule.timeout_s : config_.timeout_s;
    if (Status st = channels_->ConnectAll(DeadlineIn(timeout_s)); !st.ok())
      return Fail(std::move(st));
    return RunRegisteredLocked(schedule);
  }
  if (schedule.lines.valid && schedule.calls.size() == 1 && nranks_ > 1)
    return RunLinesLocked(schedule);
  NumberCalls(schedule);
  if (nranks_ == 1) {
    RunLocalOps(schedule);
    EndCalls(batonSuccess);
    return Status::Ok();
  }
  return RunNumberedLocked(schedule, unchanged);
}

Status Communicator::RunNumberedLocked(const Schedule& schedule, bool unchanged) {
  if (config_.check && !schedule.calls.empty()) {
    Status st = CheckAgreementLocked(schedule.timeout_s);
    if (!st.ok()) {
      EndCalls(st.code());
      return Fail(std::move(st));
    }
  }
  Status st = executor_->Run(schedule, numbered_, rank_, schedule.timeout_s, unchanged);
  EndCalls(st.code());
  if (!st.ok()) return Fail(std::move(st));
  return st;
}

void Communicator::KeepFirstReason(const std::string& why) {
  std::lock_guard<std::mutex> lock(sticky_mu_);
  if (sticky_message_.empty()) sticky_message_ = why;
}

std::string Communicator::UnusableMessage() {
  std::lock_guard<std::mutex> lock(sticky_mu_);
  return "communicator is unusable after an earlier error: " +
         (sticky_message_.empty() ? std::string("it was aborted") : sticky_message_);
}

Status Communicator::Fail(Status st) {
  KeepFirstReason(st.message());
  async_error_.store(st.code());
  BATON_WARN(kLogColl, "collective failed: %s", st.message().c_str());
  // Tell the peers now, and why, rather than letting them wait for
  // BATON_TIMEOUT; a failure that came from a peer's note passes it on.
  // The note carries the ranks known to have failed: read what the control
  // sockets hold first (the executor may have seen a data socket close
  // before the watchdog saw the dead rank's control socket).
  channels_->SweepControl();
  FailureNote note{st.code(), rank_, st.message()};
  if (channels_->note_arrived()) note = channels_->FirstNote();
  channels_->Abort(&note);
  return st;
}

void Communicator::Abort(const std::string& why) {
  if (channels_) {
    // batonCommAbort of a communicator that had not failed: this rank is
    // where the failure starts, and leaves, so it is failed for its peers.
    // After a failure it is a survivor cleaning up, never listed.
    if (why.empty() && async_error_.load() == batonSuccess && !channels_->aborted() &&
        !channels_->note_arrived() && channels_->failed_count() == 0)
      channels_->MarkFailed({rank_});
    const FailureNote note{
        batonRemoteError, rank_,
        why.empty() ? "rank " + std::to_string(rank_) + " aborted its communicator" : why};
    if (!why.empty()) BATON_WARN(kLogColl, "communicator aborted: %s", why.c_str());
    channels_->Abort(&note);
    KeepFirstReason(note.text);
  }
  batonResult_t expected = batonSuccess;
  async_error_.compare_exchange_strong(expected, batonRemoteError);
}

std::vector<int> Communicator::FailedRanks() {
  if (!channels_) return {};
  channels_->SweepControl();
  const bool failed = async_error_.load() != batonSuccess || channels_->aborted() ||
                      channels_->note_arrived() || channels_->failed_count() > 0;
  // A healthy communicator costs no dial: nothing says anyone is gone.
  if (failed) channels_->ProbeUnconnected(DeadlineIn(std::min(1.0, config_.timeout_s)));
  return channels_->FailedRanks();
}

void Communicator::Leave() {
  if (channels_) channels_->SayGoodbye();
}

void Communicator::set_last_error(const std::string& message) {
  std::lock_guard<std::mutex> lock(error_mu_);
  last_error_ = message;
}

std::string Communicator::last_error() const {
  std::lock_guard<std::mutex> lock(error_mu_);
  return last_error_;
}

void Communicator::AddPending() {
  pending_.fetch_add(1, std::memory_order_relaxed);
}

void Communicator::RemovePending() {
  if (pending_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  // Under the lock, so that a waiter that saw pending work is asleep by now.
  std::lock_guard<std::mutex> lock(pending_mu_);
  pending_cv_.notify_all();
}

void Communicator::WaitPending() {
  std::unique_lock<std::mutex> lock(pending_mu_);
  pending_cv_.wait(lock, [&] { return pending_.load(std::memory_order_acquire) == 0; });
}

}  // namespace baton
