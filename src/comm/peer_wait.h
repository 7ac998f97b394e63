// Waiting for one peer through shared memory: what the registered,
// single-copy, copy-in and lines paths (comm/host_ipc.cc, comm/lines.cc)
// share with the executor's waits: the spin policy, then the doorbell; a
// deadline with a verdict on where the peer is; an error as soon as the
// peer dies or the communicator is aborted.
#pragma once

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>

#include "base/deadline.h"
#include "base/spin.h"
#include "base/status.h"
#include "transport/channel_set.h"

namespace baton {

// Weighs where a peer that was asked says it is (exec/call_check.h's
// CheckPeerState): an error for a peer in another call, else a line for
// *behind when it has not entered this one.
using PeerJudge = std::function<Status(int peer, const CallState& state, std::string* behind)>;

// Waits until `ready()` holds, `peer` being the rank it waits for: a
// deadline, and an error as soon as that peer's sockets close or the
// communicator is aborted. Polls as the set's spin policy says, then
// sleeps on the doorbell, which a peer rings when it publishes progress or
// a record, as the executor's waits do (docs/design.md, "Waiting"). With a
// `judge`, the timeout says where the peer is, as the executor's does;
// `own_timeout`: timeout_s is the call's own (batonCommSetCallTimeout);
// with `stall` (it says the call and what it waits for; asked only at the
// deadline), the timeout is worded as the executor words its own ("no
// progress for 3 s ... in <stall()>; <verdict>").
template <typename Ready>
Status WaitForPeer(ChannelSet& ch, int peer, double timeout_s, const std::string& what, Ready ready,
                   const PeerJudge* judge = nullptr, bool own_timeout = false,
                   const std::function<std::string()>* stall = nullptr) {
  if (ready()) return Status::Ok();
  const Clock::time_point start = Clock::now();
  const Deadline deadline = DeadlineIn(timeout_s);
  // As the executor does: ask the peers where they are a while before the
  // deadline, so that its verdict can say who does not answer.
  const Deadline probe_at = DeadlineIn(std::clamp(timeout_s / 4, 0.05, 1.0));
  Clock::time_point asked_at{};
  Spinner spinner(ch.spin_policy(), start);
  for (;;) {
    if (ready()) return Status::Ok();
    if (ch.aborted()) return RemoteError("communicator was aborted");
    if (ch.peer_closed(peer)) {
      FailureNote note;
      if (ch.NoteFrom(peer, &note)) return note.AsStatus();
      return RemoteError("rank " + std::to_string(peer) + " left during " + what);
    }
    const Clock::time_point now = Clock::now();
    if (asked_at == Clock::time_point{} && now >= probe_at) {
      ch.QueryPeers();
      asked_at = now;
    }
    if (now >= deadline) {
      std::string verdict;
      CallState state;
      if (asked_at != Clock::time_point{} && !ch.PeerState(peer, asked_at, &state))
        verdict = "; rank " + std::to_string(peer) + " (pid " + std::to_string(ch.peer_pid(peer)) +
                  ") does not answer (stopped, or its process hangs)";
      else if (asked_at != Clock::time_point{} && judge != nullptr)
        BATON_RETURN_IF_ERROR((*judge)(peer, state, &verdict));
      char secs[32];
      std::snprintf(secs, sizeof(secs), "%g", timeout_s);
      const std::string limit =
          std::string(secs) + (own_timeout ? " s (the call's own timeout)" : " s (BATON_TIMEOUT)");
      if (stall != nullptr)
        return TimeoutError("no progress for " + limit + " in " + (*stall)() + verdict);
      return TimeoutError("rank " + std::to_string(peer) + " did not reach " + what + " within " +
                          limit + verdict);
    }
    if (spinner.Pause(now)) continue;
    // Announce the sleep, then look once more: a peer that published
    // before seeing the announcement did not ring. Short sleeps: what does
    // not ring (a peer's record-less state) is seen by the next look, and
    // the deadline and the probe above are checked between.
    const uint32_t seq = ch.PrepareSleep();
    if (ready()) {
      ch.CancelSleep();
      return Status::Ok();
    }
    ch.SleepOnDoorbell(seq, 2);
  }
}

}  // namespace baton
