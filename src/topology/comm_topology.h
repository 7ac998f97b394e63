// CommTopology: where every rank of a communicator runs, and what links each
// pair: the same NUMA node, the same package, two packages of one host, or a
// network. Built from what the ranks told each other at the rendezvous; every
// rank builds the same one, so decisions taken from it (ring order, the
// algorithm table) agree without another exchange.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace baton {

// How two ranks reach each other, fastest first.
enum class LinkClass : uint8_t {
  kSelf,
  kSameNuma,      // shared memory within one NUMA node
  kSamePackage,   // shared memory across NUMA nodes of one package
  kCrossPackage,  // shared memory across packages
  kNetwork,       // TCP (another host, or BATON_TRANSPORT=tcp)
};
inline constexpr int kNumLinkClasses = 5;

// "self", "numa", "package", "host", "network".
const char* LinkClassName(LinkClass c);

// One rank's place, as it reported it.
struct RankPlace {
  uint64_t host = 0;   // host identity (HostHash)
  int package = -1;    // package holding its CPUs; -1: unbound or spanning
  int numa = -1;       // NUMA node likewise
  int packages = 1;    // packages of its host
  int numa_nodes = 1;  // NUMA nodes of its host
  bool tcp = false;    // it asked for TCP even on its host
  int cores = 0;       // cores of its host (0: unknown)
  int nic_mbps = 0;    // speed of its network interface in Mbit/s (0: unknown)
  uint64_t machine = 0;  // the machine whose cores it shares (0: its host's)
};

class CommTopology {
 public:
  CommTopology() = default;
  explicit CommTopology(std::vector<RankPlace> ranks);

  int nranks() const { return static_cast<int>(ranks_.size()); }
  int hosts() const { return static_cast<int>(host_ranks_.size()); }
  const RankPlace& place(int rank) const { return ranks_[rank]; }
  // The ranks of each host, hosts in order of their lowest rank, ranks of a
  // host in ring order.
  const std::vector<std::vector<int>>& host_ranks() const { return host_ranks_; }
  // The host index (into host_ranks()) of `rank`.
  int host_of(int rank) const { return host_of_[rank]; }

  LinkClass Link(int a, int b) const;

  // The order data travels around a ring: hosts in order of their lowest
  // rank; within a host, by package, then NUMA node, then rank, so that a
  // ring crosses each slower link as few times as it can.
  std::vector<int> RingOrder() const;

  // One line a host, for logs and baton-topo: "host 0: ranks 0-3 (...)".
  std::string Describe() const;

 private:
  std::vector<RankPlace> ranks_;
  std::vector<std::vector<int>> host_ranks_;
  std::vector<int> host_of_;
};

}  // namespace baton
