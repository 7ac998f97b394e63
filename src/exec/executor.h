// The executor: runs one rank's Schedule over a ChannelSet.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "algorithms/schedule.h"
#include "base/deadline.h"
#include "base/spin.h"
#include "base/status.h"
#include "transport/channel_set.h"

namespace baton {

// How long to poll, how, and when to give up. A wait polls as `spin` says
// (base/spin.h), then sleeps on the doorbell or the sockets.
struct ExecutorConfig {
  double timeout_s = 300;  // BATON_TIMEOUT: fail after this long without progress
  SpinPolicy spin;         // BATON_SPIN_US, BATON_SPIN_YIELD, BATON_SPIN_YIELD_NS
  // After this long without progress, ask every peer where it is (and again
  // as often): a peer in another call is then an error at once, and the
  // timeout's message names the ranks that never came.
  std::chrono::milliseconds probe{1000};
  // How errors name each rank: "rank 3 (pid 4242 on h3)".
  std::vector<std::string> peer_labels;
};

// Runs schedules. Sends and receives to every peer progress together in one
// loop (a rank stalled sending still drains what its peers send), each
// per-peer queue in schedule order. When nothing moves it spins briefly,
// then sleeps on the doorbell or the sockets, never burning a core that an
// oversubscribed peer needs.
class Executor {
 public:
  Executor(ChannelSet* channels, ExecutorConfig config) : channels_(channels), config_(config) {}

  // Runs `schedule` as rank `rank`; `calls` are its calls' descriptors,
  // numbered (schedule.calls with sequence numbers, or the one internal
  // call that stands for a schedule without calls). timeout_s: this run's
  // timeout (a call's own, batonCommSetCallTimeout), < 0: the config's.
  // unchanged: the caller vouches that `schedule` has not changed since
  // this executor's last run, so if that run was of this same object its
  // per-peer queues are reused (a repeated call).
  Status Run(const Schedule& schedule, const std::vector<CallDescriptor>& calls, int rank,
             double timeout_s = -1, bool unchanged = false);
  // batonRecvAny (exec/any_source.cc): waits until some peer's next message
  // to rank `rank` opens a send (a point-to-point call) and names that peer
  // in *peer, with the descriptor it carries in *theirs. Peers are tried in
  // rank order from the one after `after`, so when several are ready none
  // is passed over twice in a row. Consumes nothing; every peer must be
  // connected. Fails when the timeout passes with nothing found, on abort,
  // when a peer has left (or sent a failure note), and on a transport that
  // cannot look ahead (RDMA).
  Status WaitAnySource(int rank, int after, int* peer, CallDescriptor* theirs);

  // "rank 3 (pid 4242 on h3)": how messages name a peer.
  std::string Label(int rank) const;

 private:
  // Ops to or from one peer in one direction, in schedule order.
  struct Queue {
    Channel* channel = nullptr;
    int peer = -1;
    bool is_send = false;
    std::vector<int> ops;
    size_t cursor = 0;
    size_t done = 0;     // bytes of the head op moved so far
    int open_call = -1;  // the call whose messages this queue is moving
  };

  Status DescribeStall(const Schedule& schedule, const std::vector<Queue>& queues,
                       const std::vector<CallDescriptor>& calls, int rank,
                       Clock::time_point asked_at, const std::string& behind) const;
  // Connected peers that did not answer the questions asked at asked_at.
  std::vector<int> SilentPeers(int rank, Clock::time_point asked_at) const;
  // Peers this rank holds no connection to (connections made on first use).
  int UnconnectedPeers(int rank) const;
  // Connects the peers of `schedule` that have no channel yet (connections
  // made on first use); out of line, as below.
  [[gnu::cold, gnu::noinline]] Status ConnectPeers(const Schedule& schedule);
  // Sorts the schedule's ops into per-peer queues and the local copies.
  Status PrepareQueues(const Schedule& schedule);
  // The error to report for a failed ProgressSend/Recv on queue `q`: a
  // mismatch in words, or the note of the peer that left. Out of line: the
  // loop that calls it is the latency path.
  [[gnu::cold, gnu::noinline]] Status ExplainFailure(Status st, const Queue& q, const Op& op,
                                                     const CallDescriptor& call, int rank);

  ChannelSet* channels_;
  ExecutorConfig config_;
  // The current run's timeout and probe interval: the config's, or shorter
  // for a call with its own timeout (its verdict is in before it).
  double timeout_s_ = 300;
  std::chrono::milliseconds probe_{1000};
  // Per-run state, kept between runs so a warm executor does not allocate.
  std::vector<uint8_t> complete_;
  std::vector<Queue> queues_;
  std::vector<int> send_queue_of_, recv_queue_of_, copies_;
  // The schedule queues_[0, nqueues_) and copies_ were made for (null: none).
  const Schedule* prepared_ = nullptr;
  size_t nqueues_ = 0;
  WaitSet wait_set_;
};

// Runs a schedule whose ops are all local copies (a 1-rank communicator).
void RunLocalOps(const Schedule& schedule);
// Runs one kCopy op (a copy, or a division for avg).
void RunCopyOp(const Op& op);
// Where a kRecv op's incoming bytes go.
RecvTarget RecvTargetOf(const Op& op);

}  // namespace baton
