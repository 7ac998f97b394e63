#include "comm/comm.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <thread>

#include "algorithms/barrier.h"
#include "algorithms/ring.h"
#include "base/log.h"
#include "bootstrap/host_id.h"
#include "bootstrap/mesh.h"
#include "bootstrap/rendezvous.h"
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
  info.tcp_sockets = static_cast<uint8_t>(config.transport.tcp_sockets);
  info.nic_mbps = InterfaceSpeedMbps(ifname);
  info.machine_hash = MachineHash();
  // Where this rank runs. Without a machine model (hwloc failed) it reports
  // an unbound rank on a one-package host, which costs only tuning.
  info.package = info.numa = -1;
  info.packages = info.numa_nodes = 1;
  info.cores = static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency()));
  const Machine* machine = nullptr;
  std::vector<int> pus;
  const Status st = CachedMachine(config.topo_file, &machine);
  if (st.ok() && CurrentAffinity(&pus).ok()) {
    const Placement where = PlacementOf(*machine, pus);
    info.package = static_cast<int16_t>(where.package);
    info.numa = static_cast<int16_t>(where.numa);
    info.packages = static_cast<int16_t>(machine->packages);
    info.numa_nodes = static_cast<int16_t>(machine->numa_nodes);
    info.cores = machine->core_count();
  } else if (!st.ok()) {
    BATON_WARN(kLogInit, "no machine topology (%s): tuning assumes one package",
               st.message().c_str());
  }
  return info;
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
    BATON_INFO(kLogInit, "bound as rank %d of the %d on this machine (BATON_BIND=%s)", index,
               count, config_.bind.c_str());
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
    places[r] = {p.host_hash, p.package,    p.numa,  p.packages, p.numa_nodes, p.wants_tcp != 0,
                 p.cores,     p.nic_mbps, p.machine_hash};
  }
  return places;
}

Status Communicator::Create(const Settings& settings, const UniqueIdData& id, int nranks, int rank,
                            std::shared_ptr<Communicator>* out) {
  auto comm = std::make_shared<Communicator>();
  comm->rank_ = rank;
  comm->nranks_ = nranks;
  BATON_RETURN_IF_ERROR(CommConfig::FromSettings(settings, &comm->config_));
  SetLogRank(rank);
  const Deadline deadline = DeadlineIn(comm->config_.timeout_s);

  SockAddr addr, bound;
  std::string ifname;
  BATON_RETURN_IF_ERROR(SelectInterfaceAddress(comm->config_.socket_ifname, &addr, &ifname));
  Fd listener;
  BATON_RETURN_IF_ERROR(ListenOn(addr, &listener, &bound));
  const PeerInfo mine = LocalPeerInfo(rank, bound, ifname, comm->config_);
  BATON_RETURN_IF_ERROR(Rendezvous(id, nranks, rank, mine, deadline, &comm->peers_));
  std::vector<int> sockets_per_peer(nranks, 0);
  for (int p = 0; p < nranks; ++p)
    if (p != rank) sockets_per_peer[p] = SocketsBetween(comm->peers_[rank], comm->peers_[p]);
  std::vector<std::vector<Fd>> mesh;
  BATON_RETURN_IF_ERROR(
      ConnectMesh(id, rank, listener.get(), comm->peers_, sockets_per_peer, deadline, &mesh));
  listener.reset();

  // Several hosts on one machine (containers, network namespaces): their
  // launchers bound ranks without seeing each other, so BATON_BIND binds
  // them again by their index among the machine's ranks.
  const bool shared_machine = HostsShareMachines(comm->peers_);
  if (shared_machine) BATON_RETURN_IF_ERROR(comm->BindAmongMachine());

  ChannelSetup setup{&id, rank, nranks, &comm->peers_, &mesh, comm->config_.transport, deadline};
  BATON_RETURN_IF_ERROR(ChannelSet::Create(setup, &comm->channels_));

  // Waiting polls, yielding the core regularly, then sleeps (docs/design.md,
  // "Waiting"): yield on every poll when this machine has more ranks than
  // cores (counting simulated hosts on it), since the peer we wait for may
  // then be waiting for our core.
  ExecutorConfig exec;
  exec.timeout_s = comm->config_.timeout_s;
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  int same_machine = 0;
  for (const auto& p : comm->peers_) same_machine += p.machine_hash == mine.machine_hash;
  const bool oversubscribed = same_machine > cores;
  const CommConfig& config = comm->config_;
  exec.spin = std::chrono::microseconds(config.spin_us);
  exec.yield_interval = std::chrono::nanoseconds(
      config.spin_yield_ns >= 0 ? config.spin_yield_ns : (oversubscribed ? 0 : 1000));
  exec.yield = config.spin_yield;
  comm->executor_ = std::make_unique<Executor>(comm->channels_.get(), exec);

  comm->ring_.resize(nranks);  // rank order until the topology gives one
  for (int r = 0; r < nranks; ++r) comm->ring_[r] = r;
  if (shared_machine) BATON_RETURN_IF_ERROR(comm->ExchangePlaces());
  comm->topology_ = CommTopology(PlacesOf(comm->peers_));
  comm->ring_ = comm->topology_.RingOrder();
  BATON_INFO(kLogInit, "topology: %s", comm->topology_.Describe().c_str());
  BATON_RETURN_IF_ERROR(comm->SetUpTuning());

  BATON_INFO(kLogInit, "rank %d of %d ready (%d local ranks, host %s, pid %d)", rank, nranks,
             comm->channels_->local_ranks(), mine.hostname, mine.pid);
  *out = std::move(comm);
  return Status::Ok();
}

Communicator::~Communicator() = default;

CollArgs Communicator::MakeArgs(const void* send, void* recv, size_t count,
                                batonDataType_t datatype, batonRedOp_t op, int root) const {
  CollArgs a;
  a.send = send;
  a.recv = recv;
  a.count = count;
  a.datatype = datatype;
  a.op = op;
  a.root = root;
  a.rank = rank_;
  a.nranks = nranks_;
  a.ring = &ring_;
  a.chunk_bytes = config_.chunk_bytes != 0 ? config_.chunk_bytes : kDefaultChunkBytes;
  a.hosts = host_layout();
  return a;
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
  reusable_.Clear();
  build(&reusable_);
  return RunLocked(reusable_);
}

Status Communicator::RunLocked(const Schedule& schedule) {
  if (batonResult_t err = async_error_.load(); err != batonSuccess)
    return Status(err, "communicator is unusable after an earlier error: " + sticky_message_);
  if (channels_->aborted()) return RemoteError("communicator was aborted");
  Status st = nranks_ == 1 ? (RunLocalOps(schedule), Status::Ok()) : executor_->Run(schedule);
  if (!st.ok()) {
    sticky_message_ = st.message();
    async_error_.store(st.code());
    BATON_WARN(kLogColl, "collective failed: %s", st.message().c_str());
    // Tell the peers now rather than letting them wait for BATON_TIMEOUT.
    channels_->Abort();
  }
  return st;
}

void Communicator::Abort() {
  if (channels_) channels_->Abort();
  batonResult_t expected = batonSuccess;
  async_error_.compare_exchange_strong(expected, batonRemoteError);
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
  std::lock_guard<std::mutex> lock(pending_mu_);
  ++pending_;
}

void Communicator::RemovePending() {
  std::lock_guard<std::mutex> lock(pending_mu_);
  if (--pending_ == 0) pending_cv_.notify_all();
}

void Communicator::WaitPending() {
  std::unique_lock<std::mutex> lock(pending_mu_);
  pending_cv_.wait(lock, [&] { return pending_ == 0; });
}

}  // namespace baton
