#include "tools/batonrun/binding_plan.h"

#include <cstdio>
#include <string>

#include "base/settings.h"
#include "topology/binding.h"
#include "topology/machine.h"

namespace batonrun {

std::vector<std::vector<int>> PlanRankBindings(const Options& options) {
  const baton::Settings settings = baton::ReadSettings(/*log=*/false);
  std::string policy_name = options.bind_to;
  if (policy_name.empty()) policy_name = settings.bind.empty() ? "auto" : settings.bind;
  baton::BindPolicy policy = baton::BindPolicy::kAuto;
  if (!baton::ParseBindPolicy(policy_name, &policy)) {
    fprintf(stderr, "batonrun: warning: ignoring BATON_BIND=%s (core, numa, none or auto)\n",
            policy_name.c_str());
  }
  const int n = options.num_ranks;
  if (policy == baton::BindPolicy::kNone) return std::vector<std::vector<int>>(n);

  baton::Machine machine;
  if (baton::Status st = baton::LoadMachine(settings.topo_file, &machine); !st.ok()) {
    fprintf(stderr, "batonrun: warning: ranks run unbound: %s\n", st.message().c_str());
    return std::vector<std::vector<int>>(n);
  }
  const bool other_machine = !settings.topo_file.empty();
  std::vector<int> allowed;
  if (!other_machine && !baton::CurrentAffinity(&allowed).ok()) allowed.clear();
  std::vector<std::vector<int>> plan = baton::PlanBinding(machine, n, policy, allowed);
  if (options.report_bindings) {
    for (int r = 0; r < n; ++r) {
      const baton::Placement where = baton::PlacementOf(machine, plan[r]);
      const std::string pus = plan[r].empty() ? "unbound" : "PUs " + baton::PuListString(plan[r]);
      std::string place;
      if (!plan[r].empty()) {
        place = " (" + std::to_string(where.cores) + (where.cores == 1 ? " core" : " cores");
        if (where.package >= 0) place += ", package " + std::to_string(where.package);
        if (where.numa >= 0) place += ", NUMA node " + std::to_string(where.numa);
        place += ")";
      }
      fprintf(stderr, "batonrun: rank %d: %s%s, --bind-to %s%s\n", options.RankOffset() + r,
              pus.c_str(), place.c_str(), baton::BindPolicyName(policy),
              other_machine ? " (planned for BATON_TOPO_FILE, not applied)" : "");
    }
  }
  if (other_machine) return std::vector<std::vector<int>>(n);
  return plan;
}

}  // namespace batonrun
