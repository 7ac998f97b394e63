#include "topology/comm_topology.h"

#include <algorithm>
#include <climits>
#include <map>
#include <tuple>

namespace baton {
namespace {

// Unknown places (-1) sort after known ones, so bound ranks stay together.
int SortKey(int index) {
  return index < 0 ? INT_MAX : index;
}

}  // namespace

const char* LinkClassName(LinkClass c) {
  switch (c) {
    case LinkClass::kSelf:
      return "self";
    case LinkClass::kSameNuma:
      return "numa";
    case LinkClass::kSamePackage:
      return "package";
    case LinkClass::kCrossPackage:
      return "host";
    case LinkClass::kNetwork:
      return "network";
  }
  return "?";
}

CommTopology::CommTopology(std::vector<RankPlace> ranks) : ranks_(std::move(ranks)) {
  const int n = nranks();
  host_of_.assign(n, -1);
  std::map<uint64_t, int> index_of_host;
  for (int r = 0; r < n; ++r) {
    auto [it, fresh] = index_of_host.try_emplace(ranks_[r].host, hosts());
    if (fresh) host_ranks_.emplace_back();
    host_of_[r] = it->second;
    host_ranks_[it->second].push_back(r);
  }
  for (auto& members : host_ranks_) {
    std::stable_sort(members.begin(), members.end(), [&](int a, int b) {
      return std::make_tuple(SortKey(ranks_[a].package), SortKey(ranks_[a].numa), a) <
             std::make_tuple(SortKey(ranks_[b].package), SortKey(ranks_[b].numa), b);
    });
  }
}

LinkClass CommTopology::Link(int a, int b) const {
  if (a == b) return LinkClass::kSelf;
  const RankPlace& x = ranks_[a];
  const RankPlace& y = ranks_[b];
  if (x.host != y.host || x.tcp || y.tcp) return LinkClass::kNetwork;
  if (x.numa >= 0 && x.numa == y.numa) return LinkClass::kSameNuma;
  if (x.numa_nodes <= 1) return LinkClass::kSameNuma;  // one NUMA node: all ranks share it
  if (x.package >= 0 && x.package == y.package) return LinkClass::kSamePackage;
  if (x.packages <= 1) return LinkClass::kSamePackage;
  // Unbound ranks of a multi-package host may be anywhere: assume the worst.
  return LinkClass::kCrossPackage;
}

std::vector<int> CommTopology::RingOrder() const {
  std::vector<int> order;
  order.reserve(nranks());
  for (const auto& members : host_ranks_) order.insert(order.end(), members.begin(), members.end());
  return order;
}

std::string CommTopology::Describe() const {
  std::string out;
  for (int h = 0; h < hosts(); ++h) {
    const auto& members = host_ranks_[h];
    const RankPlace& first = ranks_[members[0]];
    out += "host " + std::to_string(h) + ": " + std::to_string(members.size()) +
           (members.size() == 1 ? " rank" : " ranks") + " (" + std::to_string(first.packages) +
           " packages, " + std::to_string(first.numa_nodes) + " NUMA nodes):";
    for (int r : members) {
      // Appended piece by piece: GCC 12 warns falsely (-Wrestrict) on
      // "literal" + std::string.
      out += ' ';
      out += std::to_string(r);
      if (ranks_[r].numa >= 0) {
        out += "@numa";
        out += std::to_string(ranks_[r].numa);
      }
    }
    if (h + 1 < hosts()) out += "; ";
  }
  return out;
}

}  // namespace baton
