// batonrun: starts the ranks of a Baton job on one host, like `mpirun -n N` or `torchrun`.
//
//   batonrun [options] -n N prog [args...]
//
// Every rank is a child process started with fork + execvp. It finds its place in the job in its
// environment (read by batonCommInitFromEnv):
//
//   BATON_RANK, BATON_WORLD_SIZE         global rank and number of ranks of the job
//   BATON_LOCAL_RANK, BATON_LOCAL_SIZE   rank and number of ranks on this host
//   BATON_UNIQUE_ID                      single-host jobs: the batonUniqueId made by batonrun,
//                                        as 256 lowercase hex digits
//   BATON_ROOT                           multi-host jobs (--root): HOST:PORT of the rendezvous,
//                                        hosted by global rank 0
//
// A job spanning hosts is started by one batonrun per host, each with the same --world-size and
// --root and its own --rank-offset; or by one batonrun with -H or --hostfile, which starts the
// others over ssh or --launch-agent (remote_launch.h).
//
// SIGUSR1 to batonrun prints every rank's last calls (their flight recorders) to stderr, as
// `batonrun --dump PID` does, and the job goes on; the ranks do not receive it.
//
// The job fails as a whole: when a rank exits non-zero or dies of a signal, batonrun stops the
// others (SIGTERM, then SIGKILL after a grace period) and exits with that rank's status, encoded
// like a shell does (128 + signal number for a signal). With --elastic a rank killed by a signal
// does not stop the job (the others must go on without it, as baton-train --elastic does with
// batonCommShrink), and --replace starts a replacement that joins with batonCommGrow; the ranks
// find each other's grow id through BATON_ELASTIC_DIR (docs/reliability.md, "Elastic jobs").
//
// SPDX-License-Identifier: BSD-3-Clause

#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/settings.h"
#include "baton.h"
#include "tools/batonrun/binding_plan.h"
#include "tools/batonrun/flight_table.h"
#include "tools/batonrun/job.h"
#include "tools/batonrun/options.h"
#include "tools/batonrun/remote_launch.h"
#include "tools/batonrun/signals.h"
#include "tools/batonrun/trace_merge.h"

using baton::SettingName;
using namespace batonrun;  // NOLINT: main is batonrun's entry point

int main(int argc, char** argv) {
  Options options;
  std::string error;
  if (argc >= 2 && strcmp(argv[1], "--merge-trace") == 0) {
    if (argc < 4) {
      fprintf(stderr, "batonrun: usage: batonrun --merge-trace OUT IN...\n");
      return kExitUsage;
    }
    if (!MergeTraceFiles(std::vector<std::string>(argv + 3, argv + argc), argv[2], &error)) {
      fprintf(stderr, "batonrun: --merge-trace: %s\n", error.c_str());
      return kExitLauncherError;
    }
    return 0;
  }
  switch (ParseArgs(argc, argv, &options, &error)) {
    case ParseOutcome::kHelp:
      fputs(kUsage, stdout);
      return 0;
    case ParseOutcome::kVersion:
      printf("batonrun (Baton) %d.%d.%d\n", BATON_MAJOR, BATON_MINOR, BATON_PATCH);
      return 0;
    case ParseOutcome::kDump: {
      const std::string table = FlightTable(DumpTargets(options.dump_pid), kCallsOnRequest);
      if (table.empty()) {
        fprintf(stderr, "batonrun: no flight recorder of process %d or of its children\n",
                options.dump_pid);
        return kExitLauncherError;
      }
      fputs(table.c_str(), stdout);
      return 0;
    }
    case ParseOutcome::kUsageError:
      fprintf(stderr, "batonrun: %s\nTry 'batonrun --help' for more information.\n", error.c_str());
      return kExitUsage;
    case ParseOutcome::kRun:
      break;
  }

  // Before batonGetUniqueId, which starts a thread (see SignalWatcher::Init).
  SignalWatcher signals;
  if (!signals.Init(&error)) {
    fprintf(stderr, "batonrun: %s\n", error.c_str());
    return kExitLauncherError;
  }

  if (options.MultiHost()) return RunMultiHostJob(options, &signals);

  std::string rendezvous_var;
  baton::Fd launcher;
  if (!options.remote_host.empty()) {
    // One host's part of a job started with -H: the launching batonrun serves the rendezvous.
    if (!ReceiveJobEnvironment(&launcher, &rendezvous_var, &error)) {
      fprintf(stderr, "batonrun: on %s: %s\n", options.remote_host.c_str(), error.c_str());
      return kExitLauncherError;
    }
  } else if (!options.root.empty()) {
    // Global rank 0, wherever it runs, listens on --root; every rank connects there.
    rendezvous_var = std::string(SettingName::root) + "=" + options.root;
  } else {
    // The listener lives in this process, served by a library thread, for as long as batonrun
    // runs: no port is picked here and handed over, so no other process can take it meanwhile.
    // A single-host job needs no network at all: unless the user chose an interface, the
    // rendezvous and every rank's sockets stay on loopback (the ranks inherit this variable).
    setenv(SettingName::socket_ifname, "lo", /*overwrite=*/0);
    if (!ServeRendezvous(&rendezvous_var)) return kExitLauncherError;
  }

  // The clock file times come from, so that every file the ranks write counts.
  timespec start;
  clock_gettime(CLOCK_REALTIME_COARSE, &start);
  const std::string trace_list = PrepareTraceList();
  Job job(options, &signals, std::move(rendezvous_var), PlanRankBindings(options));
  if (launcher.valid()) job.WatchLauncher(std::move(launcher));
  int status = job.Run();
  MergeJobTrace(options,
                static_cast<double>(start.tv_sec) + static_cast<double>(start.tv_nsec) * 1e-9,
                trace_list);
  fflush(stdout);
  return status;
}
