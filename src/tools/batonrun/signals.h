// How batonrun watches signals: child exits and the signals it forwards to
// the ranks, as events in its poll loop.
#pragma once

#include <signal.h>

#include <string>
#include <vector>

#include "base/fd.h"

namespace batonrun {

// Signals that batonrun passes on to every running rank. Children share batonrun's process group,
// so a terminal's Ctrl-C reaches them directly; forwarding covers signals sent to batonrun alone
// (kill, a batch scheduler, a parent launcher).
inline constexpr int kForwardedSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};

// Turns SIGCHLD and the forwarded signals into readable events on a signalfd, so the main loop
// waits for child exits, signals and rank output in one poll() and never misses a wakeup (a
// self-pipe would need handlers; a plain waitpid() loop could not watch output at the same time).
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
