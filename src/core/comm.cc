#include "core/comm.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <thread>

#include "bootstrap/host_id.h"
#include "core/env.h"
#include "core/log.h"

namespace baton {

CommConfig CommConfig::FromEnv() {
  CommConfig c;
  c.timeout_s = static_cast<double>(GetEnvInt("BATON_TIMEOUT", 300));
  if (c.timeout_s <= 0) c.timeout_s = 365.0 * 24 * 3600;  // 0: wait forever
  if (auto t = GetEnv("BATON_TRANSPORT")) {
    if (*t == "tcp" || *t == "TCP" || *t == "net") {
      c.transport.force_tcp = true;
    } else if (*t != "shm" && *t != "auto" && *t != "SHM") {
      BATON_WARN(kLogEnv, "ignoring BATON_TRANSPORT=%s (use shm, tcp or auto)", t->c_str());
    }
  }
  c.transport.buffsize = GetEnvSize("BATON_BUFFSIZE", 4 << 20);
  if (c.transport.buffsize < (64 << 10)) c.transport.buffsize = 64 << 10;
  c.transport.tcp_sockets = static_cast<int>(
      std::clamp<int64_t>(GetEnvInt("BATON_NSOCKS_PERPEER", 1), 1, kMaxSocketsPerPeer));
  c.transport.cma = GetEnvInt("BATON_CMA", 0) != 0;
  c.transport.cma_threshold = GetEnvSize("BATON_CMA_THRESHOLD", 256 << 10);
  c.chunk_bytes = GetEnvSize("BATON_CHUNKSIZE", 512 << 10);
  if (c.chunk_bytes < 4096) c.chunk_bytes = 4096;
  return c;
}

namespace {

int CountNumaNodes() {
  int n = 0;
  if (DIR* d = opendir("/sys/devices/system/node")) {
    while (dirent* e = readdir(d))
      if (strncmp(e->d_name, "node", 4) == 0 && isdigit(static_cast<unsigned char>(e->d_name[4])))
        ++n;
    closedir(d);
  }
  return n > 0 ? n : 1;
}

}  // namespace

PeerInfo LocalPeerInfo(int rank, const SockAddr& listen_addr, bool wants_tcp) {
  PeerInfo info{};
  info.rank = rank;
  info.pid = getpid();
  info.host_hash = HostHash();
  info.listen_addr = ToWire(listen_addr);
  gethostname(info.hostname, sizeof(info.hostname) - 1);
  info.wants_tcp = wants_tcp ? 1 : 0;
  info.ncpus = static_cast<int32_t>(std::thread::hardware_concurrency());
  info.numa_nodes = CountNumaNodes();
  return info;
}

Status Communicator::Create(const UniqueIdData& id, int nranks, int rank,
                            std::shared_ptr<Communicator>* out) {
  auto comm = std::make_shared<Communicator>();
  comm->rank_ = rank;
  comm->nranks_ = nranks;
  comm->config_ = CommConfig::FromEnv();
  BATON_RETURN_IF_ERROR(
      AlgorithmFilter::Parse(GetEnv("BATON_ALGO").value_or(""), &comm->config_.algorithms));
  SetLogRank(rank);
  const Deadline deadline = DeadlineIn(comm->config_.timeout_s);

  SockAddr addr, bound;
  std::string ifname;
  BATON_RETURN_IF_ERROR(SelectInterfaceAddress(&addr, &ifname));
  Fd listener;
  BATON_RETURN_IF_ERROR(ListenOn(addr, &listener, &bound));
  PeerInfo mine = LocalPeerInfo(rank, bound, comm->config_.transport.force_tcp);
  mine.tcp_sockets = static_cast<uint8_t>(comm->config_.transport.tcp_sockets);
  BATON_RETURN_IF_ERROR(Rendezvous(id, nranks, rank, mine, deadline, &comm->peers_));
  std::vector<int> sockets_per_peer(nranks, 0);
  for (int p = 0; p < nranks; ++p)
    if (p != rank) sockets_per_peer[p] = SocketsBetween(comm->peers_[rank], comm->peers_[p]);
  std::vector<std::vector<Fd>> mesh;
  BATON_RETURN_IF_ERROR(
      ConnectMesh(id, rank, listener.get(), comm->peers_, sockets_per_peer, deadline, &mesh));
  listener.reset();

  ChannelSetup setup{&id, rank, nranks, &comm->peers_, &mesh, comm->config_.transport, deadline};
  BATON_RETURN_IF_ERROR(ChannelSet::Create(setup, &comm->channels_));

  // Ring order: hosts in order of their lowest rank, ranks within a host in
  // rank order.
  std::map<uint64_t, int> host_first;
  for (const auto& p : comm->peers_) host_first.emplace(p.host_hash, p.rank);
  comm->ring_.resize(nranks);
  for (int r = 0; r < nranks; ++r) comm->ring_[r] = r;
  std::stable_sort(comm->ring_.begin(), comm->ring_.end(), [&](int a, int b) {
    return host_first[comm->peers_[a].host_hash] < host_first[comm->peers_[b].host_hash];
  });

  ExecutorConfig exec;
  exec.timeout_s = comm->config_.timeout_s;
  // Waiting: poll up to BATON_SPIN_US, calling sched_yield every
  // BATON_SPIN_YIELD_NS, then sleep on the doorbell or the sockets. Yielding
  // matters whenever the peer we wait for may be descheduled: more ranks on
  // this host than cores, but also 2 ranks on 2 cores with anything else
  // running. 8 B allreduce, 2 ranks on a loaded 2-core VM: 62-144 us with
  // pause-only polling and a futex sleep after 20 us, 2.4-8 us yielding on
  // every poll; 4 ranks on 2 cores: 90 us futex-only, 9 us yielding. On an
  // idle core sched_yield returns at once but still costs a syscall (0.90
  // us instead of 0.75 us for 2 ranks when yielding on every poll), hence
  // one yield per microsecond unless the host is oversubscribed.
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  int same_host = 0;
  for (const auto& p : comm->peers_) same_host += p.host_hash == mine.host_hash;
  const bool oversubscribed = same_host > cores;
  exec.spin = std::chrono::microseconds(GetEnvInt("BATON_SPIN_US", 200));
  exec.yield_interval =
      std::chrono::nanoseconds(GetEnvInt("BATON_SPIN_YIELD_NS", oversubscribed ? 0 : 1000));
  exec.yield = GetEnvInt("BATON_SPIN_YIELD", 1) != 0;
  comm->executor_ = std::make_unique<Executor>(comm->channels_.get(), exec);

  BATON_INFO(kLogInit, "rank %d of %d ready (%d local ranks, host %s, pid %d)", rank, nranks,
             comm->channels_->localRanks(), mine.hostname, mine.pid);
  *out = std::move(comm);
  return Status::Ok();
}

Communicator::~Communicator() = default;

Status Communicator::run(const Schedule& schedule) {
  std::lock_guard<std::mutex> lock(run_mu_);
  return runLocked(schedule);
}

Status Communicator::run(const std::function<void(Schedule*)>& build) {
  std::lock_guard<std::mutex> lock(run_mu_);
  reusable_.clear();
  build(&reusable_);
  return runLocked(reusable_);
}

Status Communicator::runLocked(const Schedule& schedule) {
  if (batonResult_t err = async_error_.load(); err != batonSuccess)
    return Status(err, "communicator is unusable after an earlier error: " + sticky_message_);
  if (channels_->aborted()) return RemoteError("communicator was aborted");
  Status st = nranks_ == 1 ? (RunLocalOps(schedule), Status::Ok()) : executor_->run(schedule);
  if (!st.ok()) {
    sticky_message_ = st.message();
    async_error_.store(st.code());
    BATON_WARN(kLogColl, "collective failed: %s", st.message().c_str());
    // Tell the peers now rather than letting them wait for BATON_TIMEOUT.
    channels_->abort();
  }
  return st;
}

void Communicator::abort() {
  if (channels_) channels_->abort();
  batonResult_t expected = batonSuccess;
  async_error_.compare_exchange_strong(expected, batonRemoteError);
}

void Communicator::setLastError(const std::string& message) {
  std::lock_guard<std::mutex> lock(error_mu_);
  last_error_ = message;
}

std::string Communicator::lastError() const {
  std::lock_guard<std::mutex> lock(error_mu_);
  return last_error_;
}

void Communicator::addPending() {
  std::lock_guard<std::mutex> lock(pending_mu_);
  ++pending_;
}

void Communicator::removePending() {
  std::lock_guard<std::mutex> lock(pending_mu_);
  if (--pending_ == 0) pending_cv_.notify_all();
}

void Communicator::waitPending() {
  std::unique_lock<std::mutex> lock(pending_mu_);
  pending_cv_.wait(lock, [&] { return pending_ == 0; });
}

}  // namespace baton
