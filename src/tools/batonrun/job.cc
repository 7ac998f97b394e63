#include "tools/batonrun/job.h"

#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <string_view>

#include "base/settings.h"
#include "base/shm_names.h"
#include "tools/batonrun/flight_table.h"
#include "tools/batonrun/remote_launch.h"

extern char** environ;

namespace batonrun {
namespace {

// Launch variables batonrun sets. Inherited copies are removed first, so that a batonrun started
// from inside a rank (or a shell left with stale values) cannot leak them into the new job.
using baton::SettingName;
constexpr std::string_view kLaunchVariables[] = {
    SettingName::rank,        SettingName::world_size,  SettingName::local_rank,
    SettingName::local_size,  SettingName::unique_id,   SettingName::root,
    SettingName::elastic_dir, SettingName::elastic_join};

std::string DescribeStatus(int status) {
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    const char* name = strsignal(sig);
    return "killed by signal " + std::to_string(sig) + " (" + (name ? name : "?") + ")";
  }
  return "exited with status " + std::to_string(WEXITSTATUS(status));
}

// Exit status a shell would report for a child with this wait status.
int ShellStatus(int status) {
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

}  // namespace

int Job::Run() {
  start_time_ = Clock::now();
  if (options_.elastic) {
    std::string error;
    if (!elastic_dir_.Create(&error)) {
      fprintf(stderr, "batonrun: %s\n", error.c_str());
      return kExitLauncherError;
    }
  }
  BuildSharedParts();
  ranks_.resize(static_cast<size_t>(options_.num_ranks));
  next_label_ = options_.WorldSize();
  for (int local = 0; local < options_.num_ranks && !stopping_; ++local) {
    Rank& rank = ranks_[static_cast<size_t>(local)];
    rank.slot = local;
    rank.global_rank = options_.RankOffset() + local;
    if (!StartRank(rank)) {
      launch_failed_ = true;
      Stop("");
    }
  }
  while (running_count_ > 0) WaitForEvents();
  // Output that arrived after the last exit (the loop ends as soon as the last rank is
  // reaped, and a rank's own output is flushed before that).
  for (Rank& rank : ranks_) {
    for (LineRelay& relay : rank.relays) relay.Finish();
  }
  // Ranks that died (or were killed) left their flight recorders behind.
  RemoveFlightFiles(StartedPids());
  if (timed_out_) return kExitTimeout;
  if (failure_status_) return *failure_status_;
  if (launch_failed_ || launcher_lost_) return kExitLauncherError;
  // --elastic: the job succeeded if the ranks that were left finished it; if every rank was
  // lost, it failed as the first one did.
  if (!any_success_ && first_loss_status_) return *first_loss_status_;
  return 0;
}

void Job::BuildSharedParts() {
  std::vector<std::string> overridden(std::begin(kLaunchVariables), std::end(kLaunchVariables));
  for (const std::string& assignment : options_.exports) {
    overridden.push_back(assignment.substr(0, assignment.find('=')));
  }
  for (char** entry = environ; *entry != nullptr; ++entry) {
    std::string_view assignment = *entry;
    std::string_view name = assignment.substr(0, assignment.find('='));
    if (std::find(overridden.begin(), overridden.end(), name) == overridden.end()) {
      base_env_.emplace_back(assignment);
    }
  }
  base_env_.insert(base_env_.end(), options_.exports.begin(), options_.exports.end());
  base_env_.push_back(rendezvous_var_);
  base_env_.push_back(std::string(SettingName::world_size) + "=" +
                      std::to_string(options_.WorldSize()));
  base_env_.push_back(std::string(SettingName::local_size) + "=" +
                      std::to_string(options_.num_ranks));
  if (options_.elastic)
    base_env_.push_back(std::string(SettingName::elastic_dir) + "=" + elastic_dir_.path());

  for (const std::string& word : options_.command) argv_.push_back(const_cast<char*>(word.c_str()));
  argv_.push_back(nullptr);
  exec_error_prefix_ = "batonrun: cannot run '" + options_.command[0] + "': ";
  cpusets_.resize(bindings_.size());
  for (size_t r = 0; r < bindings_.size(); ++r) {
    CPU_ZERO(&cpusets_[r]);
    for (int pu : bindings_[r])
      if (pu >= 0 && pu < CPU_SETSIZE) CPU_SET(pu, &cpusets_[r]);
  }
}

bool Job::StartRank(Rank& rank) {
  std::vector<std::string> own_env = {
      std::string(SettingName::rank) + "=" + std::to_string(rank.global_rank),
      std::string(SettingName::local_rank) + "=" + std::to_string(rank.slot),
  };
  if (rank.replacement) own_env.push_back(std::string(SettingName::elastic_join) + "=1");
  std::vector<char*> envp;
  envp.reserve(base_env_.size() + own_env.size() + 1);
  for (const std::string& s : base_env_) envp.push_back(const_cast<char*>(s.c_str()));
  for (const std::string& s : own_env) envp.push_back(const_cast<char*>(s.c_str()));
  envp.push_back(nullptr);

  // With --prefix, the child's stdout and stderr are pipes read by this process. Both ends are
  // close-on-exec so no rank (nor the program) inherits another's pipe and keeps it open.
  baton::Fd child_out, child_err;
  if (options_.prefix) {
    // Appended, not concatenated: GCC 12 warns falsely (-Wrestrict) on "[" + std::string.
    std::string prefix = "[";
    prefix += std::to_string(rank.global_rank);
    if (!options_.remote_host.empty()) prefix += "@" + options_.remote_host;
    prefix += "] ";
    for (int stream = 0; stream < 2; ++stream) {
      int fds[2];
      if (pipe2(fds, O_CLOEXEC) != 0) {
        fprintf(stderr, "batonrun: cannot create a pipe for rank %d: %s\n", rank.global_rank,
                strerror(errno));
        rank.relays.clear();
        return false;
      }
      baton::Fd read_end(fds[0]);
      (stream == 0 ? child_out : child_err).reset(fds[1]);
      fcntl(read_end.get(), F_SETFL, fcntl(read_end.get(), F_GETFL) | O_NONBLOCK);
      rank.relays.emplace_back(std::move(read_end), stream == 0 ? &stdout_sink_ : &stderr_sink_,
                               prefix);
    }
  }

  // Anything buffered in stdio would otherwise be written again by the child.
  fflush(nullptr);
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    fprintf(stderr, "batonrun: cannot start rank %d: fork: %s\n", rank.global_rank,
            strerror(errno));
    rank.relays.clear();
    return false;
  }
  if (pid == 0) ExecChild(parent, rank.slot, child_out.get(), child_err.get(), envp.data());

  rank.pid = pid;
  rank.running = true;
  ++running_count_;
  return true;
}

void Job::ExecChild(pid_t parent, int slot, int out_fd, int err_fd, char** envp) {
  // The rank must not outlive batonrun, even when batonrun is SIGKILLed and cannot stop it.
  // If batonrun died before prctl took effect, the signal will never come: leave now.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(kExitLauncherError);
  // dup2 clears close-on-exec on the copies, so only fds 1 and 2 survive the exec.
  if (out_fd >= 0 && dup2(out_fd, STDOUT_FILENO) < 0) _exit(kExitLauncherError);
  if (err_fd >= 0 && dup2(err_fd, STDERR_FILENO) < 0) _exit(kExitLauncherError);
  signals_->RestoreInChild();
  // Bound before exec, as mpirun does, so the program's first allocations are
  // local too. A failure leaves the rank unbound: it still runs correctly.
  if (static_cast<size_t>(slot) < cpusets_.size() && CPU_COUNT(&cpusets_[slot]) > 0 &&
      sched_setaffinity(0, sizeof(cpu_set_t), &cpusets_[slot]) != 0) {
    static const char kWarning[] = "batonrun: warning: cannot bind a rank; it runs unbound\n";
    ssize_t ignored = write(STDERR_FILENO, kWarning, sizeof(kWarning) - 1);
    (void)ignored;
  }

  execvpe(argv_[0], argv_.data(), envp);

  // strerrordesc_np returns a static string; strerror may allocate for unknown codes.
  const char* reason = strerrordesc_np(errno);
  if (reason == nullptr) reason = "unknown error";
  iovec parts[] = {
      {const_cast<char*>(exec_error_prefix_.data()), exec_error_prefix_.size()},
      {const_cast<char*>(reason), strlen(reason)},
      {const_cast<char*>("\n"), 1},
  };
  ssize_t ignored = writev(STDERR_FILENO, parts, 3);
  (void)ignored;
  _exit(kExitCannotRun);
}

void Job::WaitForEvents() {
  std::vector<pollfd> fds;
  std::vector<LineRelay*> relays;
  fds.push_back({signals_->fd(), POLLIN, 0});
  const size_t launcher_index = launcher_.valid() ? fds.size() : 0;
  if (launcher_.valid()) fds.push_back({launcher_.get(), POLLIN, 0});
  const size_t first_relay = fds.size();
  for (Rank& rank : ranks_) {
    for (LineRelay& relay : rank.relays) {
      if (!relay.open()) continue;
      fds.push_back({relay.fd(), POLLIN, 0});
      relays.push_back(&relay);
    }
  }

  int n = poll(fds.data(), fds.size(), PollTimeoutMs());
  if (n < 0 && errno != EINTR) {
    // Cannot happen with valid arguments; avoid spinning if it somehow does.
    perror("batonrun: poll");
    sleep(1);
  }
  if (n > 0) {
    // Output first, so a rank's last lines come before the message about its exit.
    for (size_t k = first_relay; k < fds.size(); ++k) {
      if (fds[k].revents != 0) relays[k - first_relay]->Pump();
    }
    if (fds[0].revents != 0) HandleSignals();
    if (launcher_index != 0 && fds[launcher_index].revents != 0) HandleLauncher();
  }
  CheckDeadlines();
}

void Job::HandleLauncher() {
  char requests[64];
  ssize_t n = read(launcher_.get(), requests, sizeof(requests));
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  for (ssize_t i = 0; i < n; ++i) {
    if (requests[i] == kDumpRequest) {
      PrintRequestedFlightTable();
    } else if (requests[i] == kTimeoutRequest && !stopping_) {
      PrintFlightTable();
      Stop("");
    } else if (requests[i] == kStopRequest) {
      Stop("");
    }
  }
  if (n > 0) return;
  // End of file: the launching batonrun closed it (after a request, or before it died).
  launcher_.reset();
  if (stopping_) return;
  launcher_lost_ = true;
  Stop("batonrun: lost the launching batonrun on " + options_.remote_host +
       " (its stdin closed); stopping the ranks\n");
}

int Job::PollTimeoutMs() const {
  std::optional<Clock::time_point> deadline;
  if (stopping_ && !killed_) {
    deadline = kill_deadline_;
  } else if (!stopping_ && options_.timeout_s > 0) {
    deadline = start_time_ + Seconds(options_.timeout_s);
  }
  if (!deadline) return -1;
  auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<decltype(left)>(left, 0, INT_MAX));
}

Clock::duration Job::Seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

void Job::HandleSignals() {
  for (int sig : signals_->Drain()) {
    if (sig == SIGCHLD) {
      ReapChildren();
    } else if (sig == kDumpSignal) {
      // Here in the loop, not in a handler: reading the files and formatting allocate.
      PrintRequestedFlightTable();
    } else {
      // Ranks that die of it now are the job being ended, not ranks lost (--elastic).
      if (sig != SIGUSR2) user_signaled_ = true;
      SignalAll(sig);
    }
  }
}

void Job::ReapChildren() {
  // SIGCHLD is not queued per child: one notification may stand for several exits.
  for (;;) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid < 0 && errno == EINTR) continue;
    if (pid <= 0) return;
    auto it = std::find_if(ranks_.begin(), ranks_.end(),
                           [pid](const Rank& r) { return r.running && r.pid == pid; });
    if (it != ranks_.end()) OnRankExit(*it, status);
  }
}

void Job::OnRankExit(Rank& rank, int status) {
  rank.running = false;
  --running_count_;
  for (LineRelay& relay : rank.relays) relay.Finish();
  // A rank killed before every local peer mapped its shared-memory segment
  // cannot remove the segment's name, and when the whole job dies no peer
  // outlives it to do so (base/shm_names.h).
  baton::RemoveShmSegmentsOf(rank.pid);
  bool failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  if (!failed) any_success_ = true;
  // Only the first failure is reported: later ones are usually ranks we stopped, or peers
  // reacting to the first, and would bury the cause.
  if (!failed || stopping_) return;
  // A rank that exits with a status said it failed, whatever --elastic says; one killed by a
  // signal (SIGKILL, the OOM killer, a lost machine's stand-in) is the loss elastic jobs survive.
  if (options_.elastic && !user_signaled_ && WIFSIGNALED(status)) {
    LoseRank(rank, status);
    return;
  }
  failure_status_ = ShellStatus(status);
  std::string message = "batonrun: rank " + std::to_string(rank.global_rank) + " (pid " +
                        std::to_string(rank.pid) +
                        (options_.remote_host.empty() ? "" : " on " + options_.remote_host) + ") " +
                        DescribeStatus(status);
  if (running_count_ > 0) message += "; stopping the other ranks";
  stderr_sink_.Write(message + "\n");
  PrintFlightTable();
  Stop("");
}

void Job::LoseRank(const Rank& rank, int status) {
  if (!first_loss_status_) first_loss_status_ = ShellStatus(status);
  std::string message = "batonrun: rank " + std::to_string(rank.global_rank) + " (pid " +
                        std::to_string(rank.pid) + ") " + DescribeStatus(status);
  if (running_count_ == 0) {
    stderr_sink_.Write(message + "; no rank is left\n");
    return;
  }
  message += "; the job goes on without it (--elastic)";
  if (!options_.replace) {
    stderr_sink_.Write(message + "\n");
    return;
  }
  // Bounded, so that a program that dies as soon as it starts cannot make batonrun start
  // replacements for ever.
  if (replacements_ >= options_.num_ranks) {
    stderr_sink_.Write(message + "; no replacement: --replace started " +
                       std::to_string(replacements_) + " already (at most -n)\n");
    return;
  }
  ++replacements_;
  Rank& fresh = ranks_.emplace_back();
  fresh.slot = rank.slot;
  fresh.global_rank = next_label_++;
  fresh.replacement = true;
  stderr_sink_.Write(message + "; starting rank " + std::to_string(fresh.global_rank) +
                     " to replace it (--replace)\n");
  // A replacement that cannot start leaves the job as --elastic alone would.
  if (!StartRank(fresh)) fresh.pid = -1;
}

void Job::CheckDeadlines() {
  Clock::time_point now = Clock::now();
  if (!stopping_ && options_.timeout_s > 0 && now >= start_time_ + Seconds(options_.timeout_s)) {
    timed_out_ = true;
    char message[128];
    snprintf(message, sizeof(message), "batonrun: job timed out after %g s; stopping all ranks\n",
             options_.timeout_s);
    stderr_sink_.Write(message);
    PrintFlightTable();
    Stop("");
  }
  if (stopping_ && !killed_ && now >= kill_deadline_) {
    killed_ = true;
    SignalAll(SIGKILL);
  }
}

void Job::PrintFlightTable() {
  if (flight_table_printed_) return;
  flight_table_printed_ = true;
  const std::string table = FlightTable(StartedPids(), kCallsOnFailure);
  if (!table.empty()) stderr_sink_.Write(table);
}

void Job::PrintRequestedFlightTable() {
  char head[128];
  snprintf(head, sizeof(head), "batonrun: SIGUSR1 after %.1f s (%d of %zu ranks running; %s)\n",
           std::chrono::duration<double>(Clock::now() - start_time_).count(), running_count_,
           ranks_.size(), stopping_ ? "stopping them" : "the job goes on");
  std::string text = head;
  const std::string table = FlightTable(StartedPids(), kCallsOnRequest);
  // An answer either way, so whoever sent the signal is not left wondering whether it arrived.
  text += table.empty() ? "batonrun: no flight recorder among the ranks (no communicator yet, or "
                          "BATON_FLIGHT_RECORDER=0)\n"
                        : table;
  stderr_sink_.Write(text);
}

std::vector<pid_t> Job::StartedPids() const {
  std::vector<pid_t> pids;
  for (const Rank& rank : ranks_)
    if (rank.pid > 0) pids.push_back(rank.pid);
  return pids;
}

void Job::Stop(const std::string& message) {
  if (stopping_) return;
  if (!message.empty()) stderr_sink_.Write(message);
  stopping_ = true;
  kill_deadline_ = Clock::now() + Seconds(options_.kill_grace_s);
  SignalAll(SIGTERM);
}

void Job::SignalAll(int sig) {
  for (const Rank& rank : ranks_) {
    // A rank reaped already must not be signaled: its pid may belong to another process now.
    if (rank.running) kill(rank.pid, sig);
  }
}

}  // namespace batonrun
