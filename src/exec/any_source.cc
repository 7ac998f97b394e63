// Any-source receives: which peer's next message opens a send to this rank.
// Nothing extra travels with ordinary sends: every message that opens a call
// on a connection already carries the call's descriptor (shared memory: in
// the slot's cell; TCP: in the message header), so the receiver looks at the
// head of each connection without consuming it, and the receive that
// follows is an ordinary batonRecv from the peer found.
#include <algorithm>
#include <string>

#include "exec/call_check.h"
#include "exec/executor.h"

namespace baton {

Status Executor::WaitAnySource(int rank, int after, int* peer, CallDescriptor* theirs) {
  const int n = channels_->nranks();
  WaitSet& ws = wait_set_;
  const Clock::time_point start = Clock::now();
  Spinner spinner(config_.spin, start);
  // Peers whose next message opens something else (a collective): they
  // are in a call this rank has not reached, reported at the timeout.
  std::string elsewhere;

  // One look at every peer; true when one was found.
  auto look = [&](bool* found) -> Status {
    *found = false;
    elsewhere.clear();
    int left = 0;
    for (int i = 1; i <= n; ++i) {  // every rank, `after` last
      const int p = (after + i) % n;
      if (p == rank) continue;
      Channel* ch = channels_->channel(p);
      if (ch == nullptr)
        return InternalError("any-source receive without a channel to " + Label(p));
      bool ready = false, tagged = false;
      CallDescriptor tag;
      if (Status st = ch->PeekOpening(&ready, &tagged, &tag); !st.ok()) {
        // A peer that freed its communicator on purpose will send nothing
        // more: not a failure, as long as another peer may still send. Its
        // goodbye travels on the control socket, which the watchdog may not
        // have read yet when a TCP data socket shows the close.
        if (!channels_->PeerLeft(p)) channels_->SweepControl();
        if (channels_->PeerLeft(p)) {
          ++left;
          continue;
        }
        return st.WithContext("any-source receive on rank " + std::to_string(rank));
      }
      if (!ready) continue;
      if (tagged && tag.kind == kCallKindPointToPoint) {
        *peer = p;
        *theirs = tag;
        *found = true;
        return Status::Ok();
      }
      elsewhere += "; " + Label(p) + "'s next message " +
                   (tagged ? "opens " + DescribeCall(tag) : std::string("continues another call"));
    }
    if (left == n - 1)
      return RemoteError("any-source receive on rank " + std::to_string(rank) +
                         ": every other rank has freed the communicator");
    return Status::Ok();
  };

  while (true) {
    if (channels_->aborted()) return RemoteError("communicator aborted");
    bool found;
    BATON_RETURN_IF_ERROR(look(&found));
    if (found) return Status::Ok();
    const auto now = Clock::now();
    if (spinner.Pause(now)) continue;
    if (channels_->note_arrived()) return channels_->FirstNote().AsStatus();
    const std::chrono::duration<double> waited = now - start;
    if (waited.count() > config_.timeout_s)
      return TimeoutError("any-source receive on rank " + std::to_string(rank) +
                          ": no rank sent to it within " + std::to_string(config_.timeout_s) +
                          " s (BATON_TIMEOUT)" + elsewhere);
    ws.Clear();
    for (int p = 0; p < n; ++p) {
      if (p == rank) continue;
      Channel* ch = channels_->channel(p);
      if (ch->kind() == Channel::Kind::kShm) {
        ws.any_shm = true;
      } else {
        ch->AddWaitFds(false, p, &ws);
      }
    }
    const double left_ms = (config_.timeout_s - waited.count()) * 1000.0 + 1;
    const int timeout_ms = std::min<int>(static_cast<int>(std::min(left_ms, 1e9)),
                                         std::max<int>(10, config_.probe.count() / 2));
    uint32_t seq = 0;
    if (ws.any_shm) {
      seq = channels_->PrepareSleep();
      // Re-check after announcing the sleep: a peer that published before
      // seeing our flag will not ring.
      BATON_RETURN_IF_ERROR(look(&found));
      if (found) {
        channels_->CancelSleep();
        return Status::Ok();
      }
    }
    channels_->Wait(ws, seq, timeout_ms);
    spinner.Restart(Clock::now());
  }
}

}  // namespace baton
