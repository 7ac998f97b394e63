// Creation plans; see bootstrap_plan.h.
#include "algorithms/bootstrap_plan.h"

#include <algorithm>

#include "base/table_tree.h"

namespace baton {
namespace {

int HostsOf(const PlanShape& s) {
  const int rph = std::max(1, s.ranks_per_host);
  return (s.nranks + rph - 1) / rph;
}

int LeaderOf(const PlanShape& s, int host) {
  return host * std::max(1, s.ranks_per_host);
}

int RanksOnHost(const PlanShape& s, int host) {
  const int rph = std::max(1, s.ranks_per_host);
  return std::min(rph, s.nranks - host * rph);
}

// Ring neighbours of every rank: 2, or fewer in tiny communicators.
std::vector<uint32_t> RingNeighbours(int nranks) {
  return std::vector<uint32_t>(nranks, nranks > 2 ? 2u : static_cast<uint32_t>(nranks - 1));
}

}  // namespace

BootstrapPlan PlanStarMesh(const PlanShape& shape) {
  BootstrapPlan plan;
  plan.name = "star + full mesh (today)";
  plan.nranks = shape.nranks;
  plan.hosts = HostsOf(shape);
  plan.root_window = shape.nranks;
  PlanRound reg{"register with the root", {}}, table{"table from the root", {}};
  for (int r = 0; r < shape.nranks; ++r) {
    reg.messages.push_back({r, kPlanRoot, shape.peer_info_bytes, true});
    table.messages.push_back({kPlanRoot, r, shape.peer_info_bytes * shape.nranks, true});
  }
  plan.rounds.push_back(std::move(reg));
  plan.rounds.push_back(std::move(table));
  plan.eager_connections.assign(shape.nranks, static_cast<uint32_t>(shape.nranks - 1));
  return plan;
}

BootstrapPlan PlanHierarchical(const PlanShape& shape, int root_window) {
  BootstrapPlan plan;
  plan.name = "host leaders + table tree + lazy connections";
  plan.nranks = shape.nranks;
  const int hosts = plan.hosts = HostsOf(shape);
  plan.root_window = std::max(1, std::min(root_window, hosts));
  const uint64_t info = shape.peer_info_bytes;

  PlanRound local{"ranks to their host leader", {}};
  for (int h = 0; h < hosts; ++h)
    for (int r = LeaderOf(shape, h) + 1; r < LeaderOf(shape, h) + RanksOnHost(shape, h); ++r)
      local.messages.push_back({r, LeaderOf(shape, h), info, true});
  plan.rounds.push_back(std::move(local));

  // The root reads at most root_window leaders' batches at once (short
  // connections: the host's hellos in, nothing kept open).
  for (int first = 0; first < hosts; first += plan.root_window) {
    PlanRound reg{"leaders register their hosts with the root", {}};
    for (int h = first; h < std::min(hosts, first + plan.root_window); ++h)
      reg.messages.push_back({LeaderOf(shape, h), kPlanRoot, RanksOnHost(shape, h) * info, true});
    plan.rounds.push_back(std::move(reg));
  }
  // The table down the tree over the leaders (in registration order, here
  // host order): one round per level.
  const uint64_t table = info * shape.nranks;
  std::vector<int> level = {-1};
  while (true) {
    PlanRound down{"table down the tree of leaders", {}};
    std::vector<int> next;
    for (int node : level)
      for (int child : TableTreeChildren(node, hosts)) {
        down.messages.push_back(
            {node < 0 ? kPlanRoot : LeaderOf(shape, node), LeaderOf(shape, child), table, true});
        next.push_back(child);
      }
    if (next.empty()) break;
    plan.rounds.push_back(std::move(down));
    level = std::move(next);
  }
  PlanRound hand_out{"leaders hand the table to their ranks", {}};
  for (int h = 0; h < hosts; ++h)
    for (int r = LeaderOf(shape, h) + 1; r < LeaderOf(shape, h) + RanksOnHost(shape, h); ++r)
      hand_out.messages.push_back({LeaderOf(shape, h), r, table, true});
  plan.rounds.push_back(std::move(hand_out));
  plan.eager_connections = RingNeighbours(shape.nranks);
  return plan;
}

}  // namespace baton
