// How batonrun watches signals: child exits, the signals it forwards to the
// ranks and the one that asks it for the flight recorder table, as events in
// its poll loop.
#pragma once

#include <signal.h>

#include <string>
#include <vector>

#include "base/fd.h"

namespace batonrun {

// Signals that batonrun passes on to every running rank. Children share batonrun's process group,
// so a terminal's Ctrl-C reaches them directly; forwarding covers signals sent to batonrun alone
// (kill, a batch scheduler, a parent launcher).
inline constexpr int kForwardedSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR2};

// Asks batonrun to print its ranks' flight recorders (as `--dump` would) and go on: a look at a
// hung job from another terminal without stopping it. Not forwarded, since its default action
// would kill every rank that does not handle it.
inline constexpr int kDumpSignal = SIGUSR1;

// Turns SIGCHLD, the forwarded signals and kDumpSignal into readable events on a signalfd, so the
// main loop waits for child exits, signals and rank output in one poll() and never misses a wakeup
// (a self-pipe would need handlers; a plain waitpid() loop could not watch output at the same
// time). Whatever a signal asks for is then done in the loop, where any call is allowed.
class SignalWatcher {
 public:
  // Blocks the watched signals and opens the signalfd. Must run before any thread exists: threads
  // inherit the mask, so the rendezvous thread that batonGetUniqueId starts keeps the signals
  // blocked too, and none can be delivered to it with its default action (killing batonrun).
  bool Init(std::string* error);

  int fd() const { return fd_.get(); }

  // Returns the signals received since the last call, without blocking.
  std::vector<int> Drain();

  // In a forked child before exec: gives the program the signal state batonrun was started with.
  // Only async-signal-safe calls, since batonrun has other threads.
  void RestoreInChild() const;

 private:
  baton::Fd fd_;
  sigset_t old_mask_{};
  struct sigaction old_sigchld_ = {};
  struct sigaction old_sigpipe_ = {};
};

}  // namespace batonrun
