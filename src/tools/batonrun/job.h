// batonrun's job: the ranks it starts on this host, their output, signals
// and exits, and the exit status batonrun reports for them.
#pragma once

#include <sched.h>
#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "tools/batonrun/elastic_dir.h"
#include "tools/batonrun/options.h"
#include "tools/batonrun/output_relay.h"
#include "tools/batonrun/signals.h"

namespace batonrun {

using Clock = std::chrono::steady_clock;

inline constexpr int kExitLauncherError = 1;  // batonrun itself failed (fork, pipe, unique id...).
inline constexpr int kExitUsage = 2;          // Bad command line, as for most Unix tools.
inline constexpr int kExitTimeout = 124;      // --timeout expired, as for timeout(1).
inline constexpr int kExitCannotRun = 127;    // exec failed, as for shells.

// One rank of the job: its process and, with --prefix, the relays of its stdout and stderr.
struct Rank {
  int global_rank = 0;  // a replacement's is a new one, from the world size up
  int slot = 0;         // local rank: its CPUs and BATON_LOCAL_RANK (a replacement takes its
                        // predecessor's)
  bool replacement = false;
  pid_t pid = -1;
  bool running = false;
  std::vector<LineRelay> relays;
};

// Runs one job: starts the ranks, relays their output, forwards signals, reaps the ranks, prints
// their flight recorders on request, stops them all when one fails or time runs out, and works
// out batonrun's exit status.
class Job {
 public:
  // rendezvous_var is "BATON_UNIQUE_ID=..." or "BATON_ROOT=...", the same for every rank.
  // bindings[r] are local rank r's CPUs (empty: unbound).
  Job(const Options& options, SignalWatcher* signals, std::string rendezvous_var,
      std::vector<std::vector<int>> bindings)
      : options_(options),
        signals_(signals),
        rendezvous_var_(std::move(rendezvous_var)),
        bindings_(std::move(bindings)),
        stdout_sink_(STDOUT_FILENO),
        stderr_sink_(STDERR_FILENO) {}

  // Returns batonrun's exit status once every rank has been reaped.
  int Run();

  // This host's part of a multi-host job (--remote-host): requests of the launching batonrun
  // arrive on `launcher` (see remote_launch.h), and its closing stops the ranks.
  void WatchLauncher(baton::Fd launcher) { launcher_ = std::move(launcher); }

 private:
  // Everything the children need that does not depend on the rank, prepared once: after fork
  // the child may only make async-signal-safe calls (no allocation), since batonrun has threads.
  void BuildSharedParts();

  // Forks and execs one rank. Returns false (after saying why) if it could not be started; a
  // failing exec is reported by the child itself and seen as exit status 127.
  bool StartRank(Rank& rank);

  // Runs in the forked child; never returns. Async-signal-safe calls only.
  [[noreturn]] void ExecChild(pid_t parent, int slot, int out_fd, int err_fd, char** envp);

  // Sleeps until a signal, output or a deadline, then handles whatever happened.
  void WaitForEvents();

  int PollTimeoutMs() const;

  static Clock::duration Seconds(double s);

  void HandleSignals();

  void ReapChildren();

  void OnRankExit(Rank& rank, int status);
  // --elastic: a rank killed by a signal; the job goes on, with a replacement under --replace.
  void LoseRank(const Rank& rank, int status);
  // Prints the ranks' flight recorders (once per job): why a job failed or
  // timed out, before its ranks are stopped.
  void PrintFlightTable();
  bool flight_table_printed_ = false;

  // kDumpSignal: prints the table now, every time it is asked, and leaves the job running.
  void PrintRequestedFlightTable();

  // Every rank that was started, running or not: one that died left its flight recorder behind.
  std::vector<pid_t> StartedPids() const;

  void CheckDeadlines();

  // Reads the launching batonrun's requests, or notices it went away.
  void HandleLauncher();

  // Asks every running rank to terminate, and schedules SIGKILL for those still running after
  // the grace period, which gives them a chance to flush output and release resources.
  void Stop(const std::string& message);

  void SignalAll(int sig);

  const Options& options_;
  SignalWatcher* signals_;
  const std::string rendezvous_var_;
  const std::vector<std::vector<int>> bindings_;
  Sink stdout_sink_;
  Sink stderr_sink_;

  // Prepared before forking (see BuildSharedParts).
  std::vector<std::string> base_env_;
  std::vector<char*> argv_;
  std::string exec_error_prefix_;
  std::vector<cpu_set_t> cpusets_;  // per local rank, from bindings_

  std::deque<Rank> ranks_;  // a deque: replacements are appended while references are held
  int running_count_ = 0;
  Clock::time_point start_time_;
  bool stopping_ = false;  // SIGTERM sent to all ranks.
  bool killed_ = false;    // SIGKILL sent to all ranks.
  Clock::time_point kill_deadline_;
  bool timed_out_ = false;
  bool launch_failed_ = false;
  std::optional<int> failure_status_;  // Exit status of the first rank that failed.
  baton::Fd launcher_;                 // See WatchLauncher.
  bool launcher_lost_ = false;

  // --elastic (see LoseRank).
  ElasticDir elastic_dir_;
  int replacements_ = 0;        // started so far (at most -n)
  int next_label_ = 0;          // the next replacement's global_rank
  bool user_signaled_ = false;  // a signal was passed on to the ranks: deaths are no longer lost
                                // ranks but the job ending
  bool any_success_ = false;    // a rank exited with status 0
  std::optional<int> first_loss_status_;  // shell status of the first rank lost
};

}  // namespace batonrun
