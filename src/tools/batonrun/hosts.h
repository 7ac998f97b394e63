// batonrun's hosts for a multi-host job: -H and --hostfile as Open MPI reads them, and how the
// ranks are spread over the hosts' slots.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace batonrun {

// One host of the job and how many ranks it may run.
struct HostSlots {
  std::string name;
  int slots = 1;
};

// The ranks one host runs: global ranks first_rank .. first_rank + num_ranks - 1.
struct HostRanks {
  std::string name;
  int first_rank = 0;
  int num_ranks = 0;
};

// Parses -H's "host0:2,host1,host2:4" (slots default to 1). A host named twice adds up its slots,
// as in Open MPI. Returns false with *error set on malformed input.
bool ParseHostList(std::string_view list, std::vector<HostSlots>* hosts, std::string* error);

// Parses the text of a hostfile: one host per line, "NAME [slots=N]", '#' starts a comment,
// blank lines are skipped; Open MPI's other keys (max_slots=N) are accepted and ignored.
bool ParseHostfile(std::string_view text, std::vector<HostSlots>* hosts, std::string* error);

// Reads and parses a hostfile; *error names the file and line of a problem.
bool ReadHostfile(const std::string& path, std::vector<HostSlots>* hosts, std::string* error);

// Spreads num_ranks ranks over the hosts in order, filling each host's slots before the next
// (Open MPI's default --map-by slot). num_ranks 0 means one rank per slot. Hosts left without a
// rank are not in *placement. Fails when the ranks do not fit the slots.
bool PlaceRanks(const std::vector<HostSlots>& hosts, int num_ranks,
                std::vector<HostRanks>* placement, std::string* error);

// Whether NAME is this host (localhost, a loopback address or this host's name), whose ranks
// batonrun starts directly instead of through the launch agent, as mpirun does.
bool IsLocalHost(std::string_view name);

}  // namespace batonrun
