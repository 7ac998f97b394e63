// The flight recorders of a job's ranks as a table: each rank's last calls
// on each communicator, and where the ranks diverge (a rank that never
// entered the call the others wait in, or ranks in different calls under
// one number). batonrun prints it when a job fails or times out, when it
// receives SIGUSR1, and for `batonrun --dump PID`.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace batonrun {

// Calls shown per rank: the table printed on a failure comes among other messages and stays
// short; one that was asked for (--dump, SIGUSR1) shows more of the history.
inline constexpr size_t kCallsOnFailure = 4;
inline constexpr size_t kCallsOnRequest = 8;

// The table for the ranks running as `pids` (on this host); "" when none of
// them has a flight recorder. `per_rank` calls a rank at most.
std::string FlightTable(const std::vector<pid_t>& pids, size_t per_rank);

// The pids a `--dump PID` means: PID's children when it is a batonrun (or
// any process whose children have flight recorders), else PID itself.
std::vector<pid_t> DumpTargets(pid_t pid);

// Removes the flight recorder files of `pids` (ranks that died before
// removing theirs).
void RemoveFlightFiles(const std::vector<pid_t>& pids);

}  // namespace batonrun
