// baton-topo: what Baton sees of a machine, and how it would bind and order
// ranks on it.
//
//   baton-topo [--json] [--xml FILE] [--ranks N] [--bind-to POLICY]
//
// Prints the machine (packages, NUMA nodes, cores, hardware threads, GPUs and
// NICs with their nearest NUMA node) that hwloc reports for this host, or
// for the hwloc XML export FILE (BATON_TOPO_FILE works too), then the
// binding batonrun would give N ranks on it, and the ring order and link
// classes those ranks would get. --json prints one JSON object instead.
//
// SPDX-License-Identifier: BSD-3-Clause
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/settings.h"
#include "topology/binding.h"
#include "topology/comm_topology.h"
#include "topology/machine.h"

namespace {

using baton::Device;
using baton::Machine;

constexpr char kUsage[] =
    "Usage: baton-topo [--json] [--xml FILE] [--ranks N] [--bind-to POLICY]\n"
    "Prints the machine Baton sees (hwloc), the binding of N ranks (default: one per core,\n"
    "at most 8) under POLICY (auto, core, numa, none; default auto), and their ring order.\n"
    "--xml FILE (or BATON_TOPO_FILE) reads an hwloc XML export instead of this machine.\n";

struct Options {
  bool json = false;
  std::string xml;
  int ranks = 0;
  std::string bind_to = "auto";
};

bool ParseOptions(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    if (arg == "--json") {
      o->json = true;
    } else if (arg == "--xml") {
      const char* v = value();
      if (v == nullptr) return false;
      o->xml = v;
    } else if (arg == "--ranks") {
      const char* v = value();
      if (v == nullptr || atoi(v) < 1) return false;
      o->ranks = atoi(v);
    } else if (arg == "--bind-to") {
      const char* v = value();
      baton::BindPolicy unused;
      if (v == nullptr || !baton::ParseBindPolicy(v, &unused)) return false;
      o->bind_to = v;
    } else {
      return false;
    }
  }
  return true;
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string JsonNuma(int numa) {
  return numa < 0 ? "null" : std::to_string(numa);
}

std::string DevicesJson(const std::vector<Device>& devices) {
  std::string out = "[";
  for (size_t i = 0; i < devices.size(); ++i) {
    const Device& d = devices[i];
    if (i > 0) out += ", ";
    out += "{\"name\": " + JsonString(d.name) + ", \"pci\": " + JsonString(d.pci) +
           ", \"numa\": " + JsonNuma(d.numa);
    if (!d.netdev.empty()) out += ", \"netdev\": " + JsonString(d.netdev);
    if (d.rdma) out += ", \"rdma\": true";
    out += "}";
  }
  return out + "]";
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  if (!ParseOptions(argc, argv, &opt)) {
    fputs(kUsage, stderr);
    return 2;
  }
  const baton::Settings settings = baton::ReadSettings(/*log=*/false);
  const std::string xml = opt.xml.empty() ? settings.topo_file : opt.xml;
  Machine m;
  if (baton::Status st = baton::LoadMachine(xml, &m); !st.ok()) {
    fprintf(stderr, "baton-topo: %s\n", st.message().c_str());
    return 1;
  }
  const int ranks = opt.ranks > 0 ? opt.ranks : std::min(m.core_count(), 8);
  baton::BindPolicy policy = baton::BindPolicy::kAuto;
  baton::ParseBindPolicy(opt.bind_to, &policy);
  const std::vector<std::vector<int>> plan = baton::PlanBinding(m, ranks, policy, {});
  std::vector<baton::RankPlace> places(ranks);
  for (int r = 0; r < ranks; ++r) {
    const baton::Placement where = baton::PlacementOf(m, plan[r]);
    places[r] = {1, where.package, where.numa, m.packages, m.numa_nodes, false};
  }
  const baton::CommTopology topology(places);
  const std::vector<int> ring = topology.RingOrder();

  if (opt.json) {
    printf("{\"source\": %s, \"packages\": %d, \"numa_nodes\": %d, \"cores\": %d, \"pus\": %d,\n",
           JsonString(m.source).c_str(), m.packages, m.numa_nodes, m.core_count(), m.pus);
    printf(" \"gpus\": %s,\n \"nics\": %s,\n", DevicesJson(m.gpus).c_str(),
           DevicesJson(m.nics).c_str());
    printf(" \"binding\": {\"policy\": %s, \"ranks\": [", JsonString(opt.bind_to).c_str());
    for (int r = 0; r < ranks; ++r)
      printf("%s%s", r ? ", " : "", JsonString(baton::PuListString(plan[r])).c_str());
    printf("]},\n \"ring\": [");
    for (int r = 0; r < ranks; ++r) printf("%s%d", r ? ", " : "", ring[r]);
    printf("]}\n");
    return 0;
  }
  printf("machine: %s\n", m.source.c_str());
  printf("  %d packages, %d NUMA nodes, %d cores, %d hardware threads\n", m.packages, m.numa_nodes,
         m.core_count(), m.pus);
  for (const Device& g : m.gpus)
    printf("  GPU %-8s %s  NUMA node %s\n", g.name.c_str(), g.pci.c_str(),
           JsonNuma(g.numa).c_str());
  for (const Device& n : m.nics)
    printf("  NIC %-8s %s  NUMA node %s%s%s\n", n.name.c_str(), n.pci.c_str(),
           JsonNuma(n.numa).c_str(),
           n.netdev.empty() || n.netdev == n.name ? "" : ("  " + n.netdev).c_str(),
           n.rdma ? "  (RDMA)" : "");
  printf("binding of %d ranks (--bind-to %s):\n", ranks, opt.bind_to.c_str());
  for (int r = 0; r < ranks; ++r) {
    const baton::Placement where = baton::PlacementOf(m, plan[r]);
    printf("  rank %d: %s", r, plan[r].empty() ? "unbound" : baton::PuListString(plan[r]).c_str());
    if (!plan[r].empty()) printf("  (package %d, NUMA node %d)", where.package, where.numa);
    printf("\n");
  }
  printf("ring order:");
  for (int r : ring) printf(" %d", r);
  printf("\nlinks around the ring:");
  for (int i = 0; i < ranks; ++i)
    printf(" %s", baton::LinkClassName(topology.Link(ring[i], ring[(i + 1) % ranks])));
  printf("\n");
  return 0;
}
