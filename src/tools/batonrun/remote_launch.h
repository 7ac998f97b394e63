// batonrun's multi-host jobs (-H, --hostfile): the launching batonrun starts one batonrun per
// host through a launch agent (ssh by default, as Open MPI's plm_rsh_agent), and each of those
// runs its host's ranks with the single-host code (Job), as if started by hand with
// --world-size and --rank-offset.
//
// The launching batonrun serves the rendezvous (batonGetUniqueId) and sends the job's
// environment, BATON_UNIQUE_ID included, to each host's batonrun on the agent's stdin rather than
// on its command line: the unique id holds the job's secret, and command lines are visible to
// every user of a host in ps. The agent's stdin stays open for the whole job; a host's batonrun
// stops its ranks when it closes (the launcher died or gave up), or when asked to on it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/fd.h"
#include "tools/batonrun/options.h"
#include "tools/batonrun/signals.h"

namespace batonrun {

// Requests the launching batonrun writes, one byte each, after the environment.
inline constexpr char kStopRequest = 'S';     // Stop the ranks quietly: the job ends elsewhere.
inline constexpr char kTimeoutRequest = 'T';  // The job timed out: print flight recorders, stop.
inline constexpr char kDumpRequest = 'D';     // Print the flight recorders; the job goes on.

// Creates a unique id whose rendezvous this process serves (a library thread) for as long as
// it runs, on BATON_SOCKET_IFNAME, and sets *assignment to "BATON_UNIQUE_ID=<hex>" for the
// ranks; false, with the reason printed, when it cannot.
bool ServeRendezvous(std::string* assignment);

// The launching side: places the ranks on the hosts of -H or --hostfile, serves the rendezvous,
// starts and supervises the hosts' batonruns, and returns batonrun's exit status.
int RunMultiHostJob(const Options& options, SignalWatcher* signals);

// The remote side (--remote-host): reads the job's environment from stdin (with a deadline) into
// this process's environment, sets *rendezvous_var ("BATON_UNIQUE_ID=..."), and moves stdin to
// *launcher (close-on-exec), leaving /dev/null as fd 0 so that no rank reads the requests.
bool ReceiveJobEnvironment(baton::Fd* launcher, std::string* rendezvous_var, std::string* error);

// The environment on the wire: each NAME=VALUE followed by a NUL byte, then one more NUL.
std::string EncodeEnvironment(const std::vector<std::string>& assignments);

// WORD quoted for a POSIX shell: 'it'\''s' for it's.
std::string ShellQuote(std::string_view word);

// --launch-agent's command, split at blanks ("ssh -p 2222" -> ssh, -p, 2222).
std::vector<std::string> SplitAgent(std::string_view agent);

}  // namespace batonrun
