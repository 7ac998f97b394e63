#include "tools/batonrun/signals.h"

#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace batonrun {

bool SignalWatcher::Init(std::string* error) {
  // Children must be reaped by us: an inherited SIGCHLD = SIG_IGN would make the kernel reap
  // them and hide their exit status.
  struct sigaction dfl = {};
  dfl.sa_handler = SIG_DFL;
  sigaction(SIGCHLD, &dfl, &old_sigchld_);
  // A closed stdout (`batonrun ... | head`) must not kill batonrun before it has stopped the
  // ranks; writes then fail with EPIPE and the output is dropped.
  struct sigaction ign = {};
  ign.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ign, &old_sigpipe_);

  sigset_t watched;
  sigemptyset(&watched);
  sigaddset(&watched, SIGCHLD);
  // Watched even when ignored on entry: the ranks keep an inherited SIG_IGN (exec keeps it), but
  // this signal is a request to batonrun itself, sent on purpose to its own pid.
  sigaddset(&watched, kDumpSignal);
  for (int sig : kForwardedSignals) {
    // A signal ignored on entry (nohup, a shell's background job) stays ignored, as shells
    // do: whoever started batonrun chose that, for the ranks too.
    struct sigaction current = {};
    sigaction(sig, nullptr, &current);
    if (current.sa_handler != SIG_IGN) sigaddset(&watched, sig);
  }
  if (sigprocmask(SIG_BLOCK, &watched, &old_mask_) != 0) {
    *error = std::string("cannot block signals: ") + strerror(errno);
    return false;
  }
  fd_.reset(signalfd(-1, &watched, SFD_NONBLOCK | SFD_CLOEXEC));
  if (!fd_.valid()) {
    *error = std::string("cannot create a signalfd: ") + strerror(errno);
    return false;
  }
  return true;
}

std::vector<int> SignalWatcher::Drain() {
  std::vector<int> signals;
  signalfd_siginfo info[16];
  for (;;) {
    ssize_t n = read(fd_.get(), info, sizeof(info));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    for (size_t k = 0; k < static_cast<size_t>(n) / sizeof(info[0]); ++k) {
      signals.push_back(static_cast<int>(info[k].ssi_signo));
    }
  }
  return signals;
}

void SignalWatcher::RestoreInChild() const {
  sigaction(SIGCHLD, &old_sigchld_, nullptr);
  sigaction(SIGPIPE, &old_sigpipe_, nullptr);
  sigprocmask(SIG_SETMASK, &old_mask_, nullptr);
}

}  // namespace batonrun
