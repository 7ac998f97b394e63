// Fuzz target: batonrun's host lists (-H) and hostfiles, and the placement of ranks on them.
// Refused or accepted, never a crash; what is accepted places every rank exactly once.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "tools/batonrun/hosts.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (bool is_file : {false, true}) {
    std::vector<batonrun::HostSlots> hosts;
    std::string error;
    const bool parsed = is_file ? batonrun::ParseHostfile(text, &hosts, &error)
                                : batonrun::ParseHostList(text, &hosts, &error);
    if (!parsed) continue;
    const int num_ranks = static_cast<int>(size % 16);
    std::vector<batonrun::HostRanks> placement;
    if (!batonrun::PlaceRanks(hosts, num_ranks, &placement, &error)) continue;
    int next = 0;
    for (const batonrun::HostRanks& host : placement) {
      if (host.first_rank != next || host.num_ranks < 1) abort();
      next += host.num_ranks;
    }
    if (num_ranks != 0 && next != num_ranks) abort();
  }
  return 0;
}
