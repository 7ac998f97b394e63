// Binding plans; see binding.h.
#include "topology/binding.h"

#include <sched.h>
#include <strings.h>

#include <algorithm>
#include <cerrno>
#include <set>

namespace baton {
namespace {

// The allowed PUs of core c (all of them when `allowed` is empty).
std::vector<int> AllowedPus(const Core& core, const std::set<int>& allowed) {
  if (allowed.empty()) return core.pus;
  std::vector<int> out;
  for (int pu : core.pus)
    if (allowed.count(pu)) out.push_back(pu);
  return out;
}

// The NUMA node rank r should live on: its own GPU's, else its own NIC's,
// else the next node in turn (among those with usable cores).
int PreferredNuma(const Machine& m, int r, int local_ranks, const std::vector<int>& usable_numa) {
  if (local_ranks <= static_cast<int>(m.gpus.size()) && m.gpus[r].numa >= 0) return m.gpus[r].numa;
  std::vector<const Device*> rdma;
  for (const Device& d : m.nics)
    if (d.rdma) rdma.push_back(&d);
  if (local_ranks <= static_cast<int>(rdma.size()) && rdma[r]->numa >= 0) return rdma[r]->numa;
  return usable_numa[r % usable_numa.size()];
}

}  // namespace

bool ParseBindPolicy(const std::string& text, BindPolicy* out) {
  static constexpr struct {
    const char* name;
    BindPolicy policy;
  } kNames[] = {{"auto", BindPolicy::kAuto},
                {"core", BindPolicy::kCore},
                {"numa", BindPolicy::kNuma},
                {"none", BindPolicy::kNone}};
  for (const auto& n : kNames) {
    if (strcasecmp(text.c_str(), n.name) == 0) {
      *out = n.policy;
      return true;
    }
  }
  return false;
}

const char* BindPolicyName(BindPolicy policy) {
  switch (policy) {
    case BindPolicy::kAuto:
      return "auto";
    case BindPolicy::kCore:
      return "core";
    case BindPolicy::kNuma:
      return "numa";
    case BindPolicy::kNone:
      return "none";
  }
  return "?";
}

std::vector<std::vector<int>> PlanBinding(const Machine& machine, int local_ranks,
                                          BindPolicy policy, const std::vector<int>& allowed) {
  std::vector<std::vector<int>> plan(std::max(local_ranks, 0));
  const std::set<int> allowed_set(allowed.begin(), allowed.end());
  // Usable cores (some allowed PU) by NUMA node.
  std::vector<std::vector<int>> cores_of(machine.numa_nodes);
  int usable_cores = 0;
  for (int c = 0; c < machine.core_count(); ++c) {
    const Core& core = machine.cores[c];
    if (AllowedPus(core, allowed_set).empty() || core.numa >= machine.numa_nodes) continue;
    cores_of[core.numa].push_back(c);
    ++usable_cores;
  }
  std::vector<int> usable_numa;
  for (int n = 0; n < machine.numa_nodes; ++n)
    if (!cores_of[n].empty()) usable_numa.push_back(n);
  if (local_ranks <= 0 || usable_cores == 0 || policy == BindPolicy::kNone) return plan;
  if (policy == BindPolicy::kAuto) {
    if (local_ranks <= usable_cores) {
      policy = BindPolicy::kCore;
    } else if (usable_numa.size() > 1) {
      policy = BindPolicy::kNuma;
    } else {
      // One NUMA node (binding to it would bind to everything): the cores
      // are shared round robin. Left to the scheduler, 4 ranks on 2 cores
      // land per launch in a fast or a slow placement (docs/tuning.md,
      // "Binding").
      policy = BindPolicy::kCore;
    }
  }

  if (policy == BindPolicy::kNuma) {
    for (int r = 0; r < local_ranks; ++r) {
      int numa = PreferredNuma(machine, r, local_ranks, usable_numa);
      if (cores_of[numa].empty()) numa = usable_numa[r % usable_numa.size()];
      for (int c : cores_of[numa]) {
        const std::vector<int> pus = AllowedPus(machine.cores[c], allowed_set);
        plan[r].insert(plan[r].end(), pus.begin(), pus.end());
      }
    }
    return plan;
  }

  // kCore: each rank takes the first free core of its preferred NUMA node,
  // else of its package, else any; once every core is taken (more ranks
  // than cores), they are handed out again from the start.
  std::vector<bool> taken(machine.core_count(), false);
  int free_cores = usable_cores;
  for (int r = 0; r < local_ranks; ++r) {
    if (free_cores == 0) {
      std::fill(taken.begin(), taken.end(), false);
      free_cores = usable_cores;
    }
    int numa = PreferredNuma(machine, r, local_ranks, usable_numa);
    if (numa < 0 || numa >= machine.numa_nodes) numa = usable_numa[r % usable_numa.size()];
    auto pick = [&](auto accept) -> int {
      for (int n : usable_numa)
        for (int c : cores_of[n])
          if (!taken[c] && accept(machine.cores[c])) return c;
      return -1;
    };
    const int package = cores_of[numa].empty() ? -1 : machine.cores[cores_of[numa][0]].package;
    int core = pick([&](const Core& c) { return c.numa == numa; });
    if (core < 0) core = pick([&](const Core& c) { return c.package == package; });
    if (core < 0) core = pick([](const Core&) { return true; });
    taken[core] = true;
    --free_cores;
    plan[r] = AllowedPus(machine.cores[core], allowed_set);
  }
  return plan;
}

Status BindThisRank(const std::string& policy_text, const std::string& topo_file, int local_rank,
                    int local_size, bool* bound) {
  *bound = false;
  if (policy_text.empty()) return Status::Ok();
  BindPolicy policy;
  if (!ParseBindPolicy(policy_text, &policy))
    return InvalidArgument("BATON_BIND=" + policy_text + ": expected core, numa, none or auto");
  if (policy == BindPolicy::kNone || local_rank < 0 || local_rank >= local_size)
    return Status::Ok();
  const Machine* machine = nullptr;
  BATON_RETURN_IF_ERROR(CachedMachine(topo_file, &machine));
  std::vector<int> allowed;
  BATON_RETURN_IF_ERROR(CurrentAffinity(&allowed));
  if (static_cast<int>(allowed.size()) < machine->pus) return Status::Ok();  // bound already
  const std::vector<std::vector<int>> plan = PlanBinding(*machine, local_size, policy, allowed);
  BATON_RETURN_IF_ERROR(BindTo(plan[local_rank]));
  *bound = !plan[local_rank].empty();
  return Status::Ok();
}

Status BindAmongMachineRanks(const std::string& policy_text, const std::string& topo_file,
                             int index, int count, bool* bound) {
  *bound = false;
  if (policy_text.empty()) return Status::Ok();
  BindPolicy policy;
  if (!ParseBindPolicy(policy_text, &policy))
    return InvalidArgument("BATON_BIND=" + policy_text + ": expected core, numa, none or auto");
  if (policy == BindPolicy::kNone || index < 0 || index >= count) return Status::Ok();
  const Machine* machine = nullptr;
  BATON_RETURN_IF_ERROR(CachedMachine(topo_file, &machine));
  std::vector<int> all;
  for (const Core& core : machine->cores) all.insert(all.end(), core.pus.begin(), core.pus.end());
  const std::vector<std::vector<int>> plan = PlanBinding(*machine, count, policy, all);
  BATON_RETURN_IF_ERROR(BindTo(plan[index]));
  *bound = !plan[index].empty();
  return Status::Ok();
}

Status BindTo(const std::vector<int>& pus) {
  if (pus.empty()) return Status::Ok();
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int pu : pus)
    if (pu >= 0 && pu < CPU_SETSIZE) CPU_SET(pu, &set);
  if (sched_setaffinity(0, sizeof(set), &set) != 0)
    return ErrnoError("sched_setaffinity(" + PuListString(pus) + ")", errno);
  return Status::Ok();
}

std::string PuListString(const std::vector<int>& pus) {
  std::vector<int> sorted(pus);
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  std::string out;
  for (size_t i = 0; i < sorted.size();) {
    size_t j = i;
    while (j + 1 < sorted.size() && sorted[j + 1] == sorted[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(sorted[i]);
    if (j > i) out += '-' + std::to_string(sorted[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace baton
