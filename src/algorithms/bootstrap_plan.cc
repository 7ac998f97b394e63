// Creation plans; see bootstrap_plan.h.
#include "algorithms/bootstrap_plan.h"

#include <algorithm>

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
  plan.name = "host leaders + recursive doubling + lazy connections";
  plan.nranks = shape.nranks;
  const int hosts = plan.hosts = HostsOf(shape);
  plan.root_window = std::max(1, std::min(root_window, hosts));
  const uint64_t info = shape.peer_info_bytes;

  PlanRound local{"ranks to their host leader", {}};
  for (int h = 0; h < hosts; ++h)
    for (int r = LeaderOf(shape, h) + 1; r < LeaderOf(shape, h) + RanksOnHost(shape, h); ++r)
      local.messages.push_back({r, LeaderOf(shape, h), info, true});
  plan.rounds.push_back(std::move(local));

  // The root holds at most root_window registrations at once: one round
  // per window (each a short connection: an address in, nothing kept).
  for (int first = 0; first < hosts; first += plan.root_window) {
    PlanRound reg{"leaders register with the root", {}};
    for (int h = first; h < std::min(hosts, first + plan.root_window); ++h)
      reg.messages.push_back({LeaderOf(shape, h), kPlanRoot, shape.address_bytes, false});
    plan.rounds.push_back(std::move(reg));
  }
  int pow2 = 1, steps = 0;
  while (pow2 * 2 <= hosts) {
    pow2 *= 2;
    ++steps;
  }
  const int extra = hosts - pow2;
  PlanRound partners{"partner addresses from the root", {}};
  for (int h = 0; h < hosts; ++h)
    partners.messages.push_back(
        {kPlanRoot, LeaderOf(shape, h), shape.address_bytes * (steps + (extra > 0)), false});
  plan.rounds.push_back(std::move(partners));

  // Recursive doubling among the first pow2 leaders; the others fold in
  // before and are answered after. Bytes: the host tables the sender has.
  std::vector<uint64_t> ranks_known(hosts);
  for (int h = 0; h < hosts; ++h) ranks_known[h] = RanksOnHost(shape, h);
  if (extra > 0) {
    PlanRound fold{"extra leaders fold in", {}};
    for (int h = pow2; h < hosts; ++h) {
      fold.messages.push_back(
          {LeaderOf(shape, h), LeaderOf(shape, h - pow2), ranks_known[h] * info, true});
      ranks_known[h - pow2] += ranks_known[h];
    }
    plan.rounds.push_back(std::move(fold));
  }
  for (int bit = 1; bit < pow2; bit *= 2) {
    PlanRound round{"leaders allgather (recursive doubling)", {}};
    std::vector<uint64_t> next = ranks_known;
    for (int h = 0; h < pow2; ++h) {
      round.messages.push_back(
          {LeaderOf(shape, h), LeaderOf(shape, h ^ bit), ranks_known[h] * info, true});
      next[h ^ bit] += ranks_known[h];
    }
    ranks_known = std::move(next);
    plan.rounds.push_back(std::move(round));
  }
  if (extra > 0) {
    PlanRound unfold{"extra leaders get the table", {}};
    for (int h = pow2; h < hosts; ++h)
      unfold.messages.push_back(
          {LeaderOf(shape, h - pow2), LeaderOf(shape, h), ranks_known[h - pow2] * info, true});
    plan.rounds.push_back(std::move(unfold));
  }
  PlanRound hand_out{"leaders hand the table to their ranks", {}};
  for (int h = 0; h < hosts; ++h)
    for (int r = LeaderOf(shape, h) + 1; r < LeaderOf(shape, h) + RanksOnHost(shape, h); ++r)
      hand_out.messages.push_back({LeaderOf(shape, h), r, info * shape.nranks, true});
  plan.rounds.push_back(std::move(hand_out));
  plan.eager_connections = RingNeighbours(shape.nranks);
  return plan;
}

}  // namespace baton
