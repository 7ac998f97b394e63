// The communicator: a rank's connections to its peers, its settings, and
// the lock that keeps its collectives in order.
#pragma once

#include <baton.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "algorithms/schedule.h"
#include "base/settings.h"
#include "base/status.h"
#include "bootstrap/peer_info.h"
#include "bootstrap/unique_id.h"
#include "comm/config.h"
#include "comm/flight_recorder.h"
#include "comm/red_ops.h"
#include "comm/registrations.h"
#include "comm/trace_recorder.h"
#include "exec/executor.h"
#include "topology/comm_topology.h"
#include "transport/channel_set.h"
#include "tuning/cost_model.h"
#include "tuning/select.h"

namespace baton {

struct HostIpcState;

class Communicator {
 public:
  // Joins the rendezvous of `id` as `rank` of `nranks` and connects to all
  // peers, configured by `settings`; `name` (batonConfig_t.commName) labels
  // its logs and flight recorder; `gpu_pci`, the PCI bus id of the CUDA
  // device the rank uses ("" for none), picks the RDMA NIC nearest it.
  // Blocks until every rank has joined or the timeout passes.
  static Status Create(const Settings& settings, const UniqueIdData& id, int nranks, int rank,
                       std::shared_ptr<Communicator>* out, const std::string& name = "",
                       const std::string& gpu_pci = "");
  Communicator() = default;  // use Create
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  const CommConfig& config() const { return config_; }
  // How this communicator's waits poll before they sleep (base/spin.h).
  const SpinPolicy& spin_policy() const { return config_.transport.spin; }
  // Ranks in ring order (CommTopology::RingOrder): ranks of one host, and
  // of one package and NUMA node, are neighbours.
  const std::vector<int>& ring() const { return ring_; }
  const PeerInfo& peer(int rank) const { return peers_[rank]; }
  // Where every rank runs and what links each pair.
  const CommTopology& topology() const { return topology_; }
  // The ranks grouped by host; null when hosts hold different numbers.
  const HostLayout* host_layout() const { return host_layout_.hosts > 0 ? &host_layout_ : nullptr; }
  // The cost model and the algorithm table computed from it.
  const CostModel& cost_model() const { return *cost_model_; }
  const SelectionTable& selection() const { return selection_; }
  // The user reduction ops made on this communicator (PreMulSum).
  RedOpTable& red_ops() { return red_ops_; }
  // The buffers registered on this communicator (batonCommRegister).
  Registrations& registrations() { return registrations_; }
  const Registrations& registrations() const { return registrations_; }

  // Whether calls on ordinary buffers may take the single-copy path
  // (comm/host_cma.cc): every rank on this host, BATON_CMA_COLL, and not
  // settled otherwise by the first such call (the same on every rank).
  bool single_copy_open() const {
    return config_.cma_coll != 0 && nranks_ > 1 && channels_ && channels_->has_mailboxes() &&
           (config_.cma_coll == 1 || (cost_model_ && !cost_model_->Oversubscribed())) &&
           !single_copy_refused_.load(std::memory_order_relaxed);
  }

  // The part of an algorithm's arguments that comes from the communicator
  // (rank, size, ring order, chunk size), with the call's own fields.
  // Inline: on every call's latency path, and a copy of an out-of-line
  // result stalls on store forwarding.
  CollArgs MakeArgs(const void* send = nullptr, void* recv = nullptr, size_t count = 0,
                    batonDataType_t datatype = batonUint8, batonRedOp_t op = batonSum,
                    int root = 0) const {
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

  // Small synchronous collectives for Baton's own coordination (split, CUDA
  // IPC): `bytes` from every rank into all (nranks * bytes), and a barrier.
  Status AllGatherBytes(const void* mine, size_t bytes, void* all);
  Status Barrier();

  // Runs one rank's schedule; collectives on one communicator are
  // serialized in call order. A failure is sticky: later calls fail fast
  // with the first error, and peers are told at once (abort).
  Status Run(const Schedule& schedule);
  // Builds the schedule into a buffer the communicator reuses (no
  // allocation per call once warm) and runs it.
  Status Run(const std::function<void(Schedule*)>& build);
  // What determines a synchronous call's schedule: the builder and
  // everything it reads. Builders are pure functions of it, so a call equal
  // to the previous one runs the schedule built then.
  struct RepeatKey {
    CollArgs args;  // send and recv null: the buffers may move (below)
    // The buffers: recv's place relative to send, which ops point into
    // which extents, and those extents (bytes from send and from recv).
    intptr_t recv_from_send = 0;
    bool has_send = false, has_recv = false;
    size_t send_bytes = 0, recv_bytes = 0;
    BuildFn build = nullptr;  // null: a send to or receive from `peer`
    int peer = -1;
    bool is_send = false;
    CallDescriptor call;
    double timeout_s = -1;
    bool operator==(const RepeatKey&) const = default;
  };
  // Run(build) for a call described by `key`: when the previous call made
  // through here had the same key, neither `build` nor the executor's
  // per-peer queues are made again (the small-call latency path; the key
  // must not hold pointers to memory that may be reused with other
  // contents, such as a v-collective's copied counts).
  // `send` and `recv` are the call's buffers (the key holds only where they
  // are relative to each other): a repeat on buffers at another address
  // moves the kept schedule's pointers into them (Schedule::Rebase), as a
  // benchmark that walks its buffers (nccl-tests) or an application whose
  // buffers move between steps does.
  Status RunRepeatable(const RepeatKey& key, const void* send, const void* recv,
                       const std::function<void(Schedule*)>& build);

  // batonRecvAny (comm/any_source.cc): under the lock that orders the calls,
  // waits for a peer whose next message to this rank opens a send of
  // `count` x `datatype`, then runs the receive that `build` makes for that
  // peer, and names it in *source. A send of another size or datatype is
  // batonInvalidUsage naming both; like a failed call, a failure (timeout,
  // a peer gone, the mismatch) is sticky and told to the peers.
  Status RunAnySource(size_t count, batonDataType_t datatype,
                      const std::function<void(int peer, Schedule*)>& build, int* source);

  // The connections, for Baton's own coordination beside the calls (a
  // shrink's offers go over the control sockets). Null with one rank.
  ChannelSet* channels() { return channels_.get(); }
  // CollArgs::sends_buffered_bytes for this communicator's calls.
  uint64_t sends_buffered_bytes() const { return channels_ ? channels_->SendsBufferedBytes() : 0; }

  // batonCommGetUniqueId (comm/grow.cc): a fresh unique id whose rendezvous
  // this process serves for the communicator's timeout, kept as its pending
  // grow id until a grow takes it; batonInvalidUsage while one is pending.
  Status MakeGrowId(batonUniqueId* out);
  // Whether `id` is the pending grow id, which it then no longer is.
  bool TakeGrowId(const batonUniqueId& id);

  // Stops all traffic now; blocked and later calls fail. The peers are told
  // `why` (empty: that this rank aborted its communicator).
  void Abort(const std::string& why = "");

  // batonCommGetFailedRanks: the ranks this rank knows to have failed
  // (transport/failed_set.h), ascending. On a communicator that has failed
  // it first reads every control socket and dials the peers it has no
  // connection to, for at most min(1 s, the timeout), so that each dead
  // rank is known here directly and not only by word from others.
  std::vector<int> FailedRanks();
  // batonCommDestroy and batonCommAbort: this rank frees the communicator
  // on purpose; the peers are told, so its leaving is no failure there.
  void Leave();
  // batonCommDestroy, before Leave, on a communicator that has not failed:
  // batonInvalidUsage naming each peer whose next message opens a call this
  // rank never made (comm/stray.cc).
  Status StrayMessages();

  // BATON_TRACE_FILE: writes this communicator's timeline so far to its
  // rank's file (batonCommFinalize; the destructor writes it again, with
  // every call). Without a timeline it does nothing.
  void WriteTrace();

  // batonCommSetCallTimeout: the timeout (seconds without progress) of the
  // calls made from now on, each taking it when made; < 0: config's.
  void set_call_timeout(double seconds) { call_timeout_s_.store(seconds); }
  double call_timeout() const { return call_timeout_s_.load(std::memory_order_relaxed); }

  // First asynchronous (or communication) error, batonSuccess if none.
  batonResult_t async_error() const { return async_error_.load(); }

  void set_last_error(const std::string& message);
  std::string last_error() const;

  // Work queued on host streams that still refers to this communicator;
  // destruction waits for it.
  void AddPending();
  // The smallest call on registered buffers that takes the registered path
  // (BATON_REGISTERED_MIN_BYTES, or RegisteredMinBytes's default for this
  // communicator's hosts; set with the cost model).
  uint64_t registered_min_bytes() const { return registered_min_bytes_; }
  // Whether allreduces on ordinary buffers may take the copy-in path
  // (comm/copy_in.cc): every rank on this host, and CopyInChosen.
  bool copy_in_open() const {
    return nranks_ > 1 && channels_ && channels_->has_mailboxes() && cost_model_ &&
           CopyInChosen(config_.copy_in, cost_model_->Oversubscribed(), config_.algorithms);
  }

  // The smallest allreduce copy-in takes (CopyInMinBytes).
  uint64_t copy_in_min_bytes() const {
    return CopyInMinBytes(config_.copy_in, config_.copy_in_min_bytes, selection_.rhd_below());
  }

  // The largest allreduce that runs on the lines (comm/lines.cc): every
  // rank shares memory with every other; 0 where the lines are closed.
  uint64_t lines_max_bytes() const {
    return nranks_ > 1 && channels_ && channels_->has_mailboxes() ? lines_max_bytes_ : 0;
  }

  void RemovePending();
  void WaitPending();

 private:
  int rank_ = 0;
  int nranks_ = 1;
  CommConfig config_;
  std::vector<PeerInfo> peers_;
  std::vector<int> ring_;
  CommTopology topology_;
  HostLayout host_layout_{0, 0, {}, {}};
  std::unique_ptr<CostModel> cost_model_;
  SelectionTable selection_;
  uint64_t registered_min_bytes_ = kRegisteredMinBytes;
  uint64_t lines_max_bytes_ = 0;  // LinesMaxBytes, set with the cost model (0: closed until then)
  RedOpTable red_ops_;
  Registrations registrations_;
  // Before channels_: the watchdog (in channels_) reads it until it stops.
  std::unique_ptr<FlightRecorder> recorder_;
  uint32_t first_record_ = 0;  // the recorder's entry of numbered_[0]
  std::unique_ptr<ChannelSet> channels_;
  std::unique_ptr<Executor> executor_;
  // BATON_TRACE_FILE's timeline (null without one); guarded by run_mu_.
  std::unique_ptr<TraceRecorder> trace_;
  void WriteTraceLocked();

  std::mutex run_mu_;
  Schedule reusable_;  // guarded by run_mu_
  // The key reusable_ was last built for by RunRepeatable (valid: it was,
  // and nothing rebuilt reusable_ since), and the buffers its ops point
  // into now. Guarded by run_mu_.
  RepeatKey repeat_key_;
  const void* repeat_send_ = nullptr;
  const void* repeat_recv_ = nullptr;
  bool repeat_valid_ = false;
  // Empties reusable_ for a new build (which no repeat may take for the
  // previous one's).
  void ClearReusable() {
    reusable_.Clear();
    repeat_valid_ = false;
  }
  std::atomic<batonResult_t> async_error_{batonSuccess};
  // Why the communicator became unusable: the first failure's or abort's
  // reason (an abort may come from any thread: a device worker, the user).
  std::mutex sticky_mu_;
  std::string sticky_message_;
  void KeepFirstReason(const std::string& why);
  std::string UnusableMessage();
  std::atomic<double> call_timeout_s_{-1};

  // unchanged: `schedule` is the one the executor ran last time, as it was
  // then (a repeated call: its queues are kept).
  Status RunLocked(const Schedule& schedule, bool unchanged = false);
  // After NumberCalls: BATON_CHECK, the executor, the calls' end.
  Status RunNumberedLocked(const Schedule& schedule, bool unchanged = false);
  // A call on registered buffers (comm/host_ipc.h): the IPC plan over the
  // peers' mapped buffers when every rank's are registered, else the
  // schedule as usual.
  Status RunRegisteredLocked(const Schedule& schedule);
  std::unique_ptr<HostIpcState> host_ipc_;  // guarded by run_mu_
  // A small allreduce on the lines (comm/lines.cc): each rank publishes
  // its input in its segment and reduces everyone's from theirs.
  Status RunLinesLocked(const Schedule& schedule);
  // The error of a lines call whose peer `q` began this collective without
  // a line for it (it took another path): the peer's call named from its
  // mailbox where it is there.
  Status OtherPathError(const ChannelSet& ch, int q, size_t bytes) const;
  // Guarded by run_mu_: lines calls so far (the same on every rank),
  // whether every peer is connected, and the reduction's buffers.
  uint64_t lines_calls_ = 0;
  bool lines_connected_ = false;
  std::vector<const uint8_t*> lines_inputs_, lines_values_;
  std::vector<uint8_t> lines_scratch_;
  // The single-copy path was refused by the kernel somewhere (host_cma.cc):
  // calls stop offering it (read without run_mu_ by launch/call.cc).
  std::atomic<bool> single_copy_refused_{false};
  // Collectives numbered so far, 64 bits (the mailboxes' call numbers), and
  // whether NumberCalls must leave the mailbox alone (a record is in it).
  uint64_t collective_seq_ = 0;
  bool record_published_ = false;
  // A run failed: the error sticks, and the peers are told why. Returns it.
  [[gnu::cold, gnu::noinline]] Status Fail(Status st);
  // Numbers the calls of `schedule` into numbered_ (see CallDescriptor) and
  // records them as running; EndCalls records how they ended.
  void NumberCalls(const Schedule& schedule);
  void EndCalls(batonResult_t result);
  // BATON_CHECK: gathers every rank's numbered calls and compares them with
  // this rank's, before any of their data moves.
  Status CheckAgreementLocked(double timeout_s);
  Schedule check_schedule_;  // guarded by run_mu_
  // Guarded by run_mu_: the calls so far, and their numbered descriptors.
  uint32_t collective_calls_ = 0;
  std::vector<uint32_t> sends_to_, recvs_from_;
  int any_source_last_ = -1;  // the peer the last any-source receive took (round robin)
  std::vector<CallDescriptor> numbered_;
  // The layout, cost model and algorithm table (after the channels are up:
  // calibration runs over them).
  Status SetUpTuning();
  // Hosts sharing a machine: BATON_BIND applied over the machine's ranks,
  // then every rank's new place exchanged.
  Status BindAmongMachine();
  Status ExchangePlaces();

  mutable std::mutex error_mu_;
  std::string last_error_;

  std::mutex grow_mu_;
  bool grow_id_pending_ = false;  // guarded by grow_mu_, as grow_id_
  batonUniqueId grow_id_{};

  // Atomic: every call queued on a host stream adds and removes one, where
  // a lock each way was a tenth of a small queued call's time.
  std::atomic<int> pending_{0};
  std::mutex pending_mu_;  // for pending_cv_ only
  std::condition_variable pending_cv_;
};

// What this process tells its peers at the rendezvous; `ifname` is the
// interface it listens on.
PeerInfo LocalPeerInfo(int rank, const SockAddr& listen_addr, const std::string& ifname,
                       const CommConfig& config);
// Whether ranks of different hosts run on one machine (MachineHash).
bool HostsShareMachines(const std::vector<PeerInfo>& peers);
// BATON_TRANSPORT=shm on any rank: every rank on that rank's host and none
// asking for tcp, else batonInvalidUsage, decided alike from the one table.
Status CheckTransportsAgree(const std::vector<PeerInfo>& peers);
// The places the ranks reported, for CommTopology.
std::vector<RankPlace> PlacesOf(const std::vector<PeerInfo>& peers);

}  // namespace baton
