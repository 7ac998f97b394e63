// baton-topo: what Baton sees of a machine, how it would bind and order
// ranks on it, and which algorithm its cost model would pick.
//
//   baton-topo [--json] [--xml FILE] [--ranks N] [--hosts H] [--nic-mbps M]
//              [--bind-to POLICY] [--one-machine]
//
// Prints the machine (packages, NUMA nodes, cores, hardware threads, GPUs and
// NICs with their nearest NUMA node) that hwloc reports for this host, or
// for the hwloc XML export FILE (BATON_TOPO_FILE works too), then the
// binding batonrun would give N ranks on it, the ring order and link
// classes those ranks would get, and, for H such hosts (N ranks each) on a
// network of M Mbit/s, the algorithm and chunk size the cost model chooses
// for every collective from 8 B to 1 GiB (float32; BATON_ALGO and
// BATON_CHUNKSIZE and BATON_RHD_SWITCH apply). --one-machine puts the H hosts
// on this one machine, sharing its cores, as simulated hosts in network
// namespaces are (scripts/netns.sh). --json prints one JSON object instead.
//
// SPDX-License-Identifier: BSD-3-Clause
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/settings.h"
#include "base/socket.h"
#include "topology/binding.h"
#include "topology/comm_topology.h"
#include "topology/machine.h"
#include "tuning/cost_model.h"
#include "tuning/report.h"
#include "tuning/select.h"

namespace {

using baton::Device;
using baton::Machine;

constexpr char kUsage[] =
    "Usage: baton-topo [--json] [--xml FILE] [--ranks N] [--hosts H] [--nic-mbps M]\n"
    "                  [--bind-to POLICY] [--one-machine]\n"
    "Prints the machine Baton sees (hwloc), the binding of N ranks (default: one per core,\n"
    "at most 8) under POLICY (auto, core, numa, none; default auto), their ring order, and\n"
    "the algorithm table of the cost model for H such hosts (default 1) on an M Mbit/s\n"
    "network (default: this host's fastest NIC, else 10000); --one-machine: the H hosts\n"
    "share this machine's cores, as simulated hosts in network namespaces do.\n"
    "--xml FILE (or BATON_TOPO_FILE) reads an hwloc XML export instead of this machine.\n";

struct Options {
  bool json = false;
  std::string xml;
  int ranks = 0;
  int hosts = 1;
  int nic_mbps = 0;
  bool one_machine = false;
  std::string bind_to = "auto";
};

bool ParseOptions(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    if (arg == "--json") {
      o->json = true;
    } else if (arg == "--one-machine") {
      o->one_machine = true;
    } else if (arg == "--xml") {
      const char* v = value();
      if (v == nullptr) return false;
      o->xml = v;
    } else if (arg == "--ranks") {
      const char* v = value();
      if (v == nullptr || atoi(v) < 1) return false;
      o->ranks = atoi(v);
    } else if (arg == "--hosts" || arg == "--nic-mbps") {
      const char* v = value();
      if (v == nullptr || atoi(v) < 1) return false;
      (arg == "--hosts" ? o->hosts : o->nic_mbps) = atoi(v);
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
    out += ", \"pci_switch\": " + (d.pci_switch().empty() ? "null" : JsonString(d.pci_switch()));
    out += ", \"host_bridge\": " + (d.host_bridge.empty() ? "null" : JsonString(d.host_bridge));
    out += "}";
  }
  return out + "]";
}

// The path between every two GPUs, and from each GPU to each NIC (what
// GPUDirect would cross), as a JSON object of matrices.
std::string GpuLinksJson(const Machine& m) {
  const int gpus = static_cast<int>(m.gpus.size());
  std::string paths = "[", nvlink = "[", nics = "[";
  for (int a = 0; a < gpus; ++a) {
    paths += a ? ", [" : "[";
    nvlink += a ? ", [" : "[";
    for (int b = 0; b < gpus; ++b) {
      if (b > 0) {
        paths += ", ";
        nvlink += ", ";
      }
      paths += JsonString(baton::GpuPathName(m.GpuLink(a, b)));
      nvlink += std::to_string(m.NvLinkMBytes(a, b));
    }
    paths += "]";
    nvlink += "]";
    nics += a ? ", [" : "[";
    for (size_t n = 0; n < m.nics.size(); ++n) {
      if (n > 0) nics += ", ";
      nics += JsonString(baton::GpuPathName(baton::PciPath(m.gpus[a], m.nics[n])));
    }
    nics += "]";
  }
  return "{\"paths\": " + paths + "], \"nvlink_mbytes\": " + nvlink + "], \"to_nics\": " + nics +
         "]}";
}

// Like `nvidia-smi topo -m`: one row a GPU, one column each GPU and NIC.
void PrintGpuLinks(const Machine& m) {
  if (m.gpus.empty()) return;
  printf("GPU paths (NVLink MB/s where there is NVLink):\n  %-8s", "");
  for (const Device& g : m.gpus) printf(" %-12s", g.name.c_str());
  for (const Device& n : m.nics) printf(" %-12s", n.name.c_str());
  printf("\n");
  for (int a = 0; a < static_cast<int>(m.gpus.size()); ++a) {
    printf("  %-8s", m.gpus[a].name.c_str());
    for (int b = 0; b < static_cast<int>(m.gpus.size()); ++b) {
      char cell[32];
      if (m.GpuLink(a, b) == baton::GpuPath::kNvLink)
        snprintf(cell, sizeof(cell), "nvlink:%d", m.NvLinkMBytes(a, b));
      else
        snprintf(cell, sizeof(cell), "%s", baton::GpuPathName(m.GpuLink(a, b)));
      printf(" %-12s", cell);
    }
    for (const Device& n : m.nics)
      printf(" %-12s", baton::GpuPathName(baton::PciPath(m.gpus[a], n)));
    printf("\n");
  }
}

void PrintAlgorithms(const baton::CostModel& model, const baton::SelectionTable& table, int hosts,
                     int per_host) {
  using baton::Collective;
  printf("cost figures: %s\n", baton::DescribeCostParams(model.params()).c_str());
  printf("algorithms for %d host%s x %d rank%s (float32; predicted time):\n", hosts,
         hosts == 1 ? "" : "s", per_host, per_host == 1 ? "" : "s");
  printf("  %-10s", "bytes");
  for (const char* name : baton::kCollectiveNames) printf(" %-24s", name);
  printf("\n");
  for (size_t bytes = 8; bytes <= (size_t{1} << 30); bytes *= 4) {
    char size[16];
    snprintf(size, sizeof(size),
             bytes >= (1 << 20) ? "%zuM"
             : bytes >= 1024    ? "%zuK"
                                : "%zu",
             bytes >= (1 << 20) ? bytes >> 20
             : bytes >= 1024    ? bytes >> 10
                                : bytes);
    printf("  %-10s", size);
    for (int c = 0; c < baton::kNumCollectives; ++c) {
      const auto coll = static_cast<Collective>(c);
      const baton::Choice& ch = table.Lookup(coll, batonFloat32, bytes);
      char cell[64];
      if (ch.build == nullptr) {
        snprintf(cell, sizeof(cell), "-");
      } else {
        // The chunk size only matters for messages larger than it.
        char chunk[16] = "";
        if (ch.chunk_bytes != 0 && ch.chunk_bytes < bytes)
          snprintf(chunk, sizeof(chunk), ",%uK", ch.chunk_bytes >> 10);
        snprintf(
            cell, sizeof(cell), "%s%s%s%s %.3gus", baton::AlgorithmName(ch.algorithm),
            ch.algorithm == baton::Algorithm::kHierarchical ? "/" : "",
            ch.algorithm == baton::Algorithm::kHierarchical ? baton::AlgorithmName(ch.inter) : "",
            chunk, ch.predicted_us);
      }
      printf(" %-24s", cell);
    }
    printf("\n");
  }
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") {
      fputs(kUsage, stdout);
      return 0;
    }
  }
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
  // The fastest NIC with a known speed stands for the network.
  int nic_mbps = opt.nic_mbps;
  for (const Device& n : m.nics)
    if (opt.nic_mbps == 0 && !n.netdev.empty())
      nic_mbps = std::max(nic_mbps, baton::InterfaceSpeedMbps(n.netdev));
  const int total = ranks * opt.hosts;
  std::vector<baton::RankPlace> places(total);
  for (int r = 0; r < total; ++r) {
    const baton::Placement where = baton::PlacementOf(m, plan[r % ranks]);
    places[r] = {static_cast<uint64_t>(r / ranks + 1),
                 where.package,
                 where.numa,
                 m.packages,
                 m.numa_nodes,
                 false,
                 m.core_count(),
                 nic_mbps,
                 opt.one_machine ? 1u : 0u};
  }
  const baton::CommTopology topology(places);
  const std::vector<int> ring = topology.RingOrder();
  baton::CostParams params = baton::DefaultCostParams(nic_mbps);
  params.rhd_switch_bytes = settings.rhd_switch;
  params.hot_reduce_bytes = baton::HotReduceBytes(m.l2_bytes);
  params.llc_bytes = m.llc_bytes;
  const baton::CostModel model(topology, ring, std::vector<int>(opt.hosts, m.core_count()), params);
  baton::AlgorithmFilter filter;
  if (baton::Status st = baton::AlgorithmFilter::Parse(settings.algo, &filter); !st.ok()) {
    fprintf(stderr, "baton-topo: %s\n", st.message().c_str());
    return 1;
  }
  baton::SelectionTable table;
  table.Build(model, filter, settings.chunksize,
              baton::FoldedRhdMaxBytes(opt.hosts, total, m.core_count(), m.llc_bytes));

  if (opt.json) {
    printf("{\"source\": %s, \"packages\": %d, \"numa_nodes\": %d, \"cores\": %d, \"pus\": %d,\n",
           JsonString(m.source).c_str(), m.packages, m.numa_nodes, m.core_count(), m.pus);
    printf(" \"gpus\": %s,\n \"nics\": %s,\n \"gpu_links\": %s,\n", DevicesJson(m.gpus).c_str(),
           DevicesJson(m.nics).c_str(), GpuLinksJson(m).c_str());
    printf(" \"binding\": {\"policy\": %s, \"ranks\": [", JsonString(opt.bind_to).c_str());
    for (int r = 0; r < ranks; ++r)
      printf("%s%s", r ? ", " : "", JsonString(baton::PuListString(plan[r])).c_str());
    printf("]},\n \"ring\": [");
    for (int r = 0; r < ranks; ++r) printf("%s%d", r ? ", " : "", ring[r]);
    printf("],\n \"hosts\": %d, \"ranks\": %d, \"cost\": %s,\n \"algorithms\": %s}\n", opt.hosts,
           total, baton::CostParamsJson(model.params()).c_str(), table.Json(model).c_str());
    return 0;
  }
  printf("machine: %s\n", m.source.c_str());
  printf("  %d packages, %d NUMA nodes, %d cores, %d hardware threads", m.packages, m.numa_nodes,
         m.core_count(), m.pus);
  if (m.l2_bytes > 0)
    printf(", level-2 caches of %llu KiB", (unsigned long long)(m.l2_bytes >> 10));
  if (m.llc_bytes > 0)
    printf(", level-3 caches of %llu KiB", (unsigned long long)(m.llc_bytes >> 10));
  printf("\n");
  for (const Device& g : m.gpus)
    printf("  GPU %-8s %s  NUMA node %s\n", g.name.c_str(), g.pci.c_str(),
           JsonNuma(g.numa).c_str());
  for (const Device& n : m.nics)
    printf("  NIC %-8s %s  NUMA node %s%s%s\n", n.name.c_str(), n.pci.c_str(),
           JsonNuma(n.numa).c_str(),
           n.netdev.empty() || n.netdev == n.name ? "" : ("  " + n.netdev).c_str(),
           n.rdma ? "  (RDMA)" : "");
  PrintGpuLinks(m);
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
  PrintAlgorithms(model, table, opt.hosts, ranks);
  // Small allreduces between ranks of one host take the lines (comm/lines.cc).
  const bool crowded = model.Oversubscribed();
  const uint64_t lines = baton::LinesMaxBytes(settings.lines_max_bytes, crowded, ranks);
  if (opt.hosts == 1 && ranks > 1 && lines != 0 && !filter.Restricts(baton::Collective::kAllReduce))
    printf(
        "all buffers: allreduce up to %zu bytes (but PreMulSum) reads each rank's input from its "
        "lines (%s), not the table\n",
        static_cast<size_t>(lines),
        settings.lines_max_bytes != baton::kSizeFromMachine ? "BATON_LINES_MAX_BYTES"
        : crowded                                           ? "ranks outnumber cores"
                                                            : "each rank has a core");
  // Registered buffers (comm/host_ipc.h) skip the table from a size that
  // depends on the ranks per core.
  if (opt.hosts == 1 && ranks > 1) {
    const bool machine = settings.registered_min_bytes == baton::kSizeFromMachine;
    const uint64_t from = baton::RegisteredMinBytes(settings.registered_min_bytes, crowded);
    printf(
        "registered buffers: collectives but alltoall from %zu KiB read the peers' buffers in "
        "place (%s), not the table\n",
        static_cast<size_t>(from >> 10),
        !machine  ? "BATON_REGISTERED_MIN_BYTES"
        : crowded ? "ranks outnumber cores"
                  : "a core per rank");
  }
  if (table.rhd_below() != 0)
    printf(
        "all buffers: allreduce below %zu KiB takes rhd, not copy-in or the model's choice: %d "
        "ranks on %d cores fold to a rank per core\n",
        static_cast<size_t>(table.rhd_below() >> 10), total, m.core_count());
  // The copy-in path (comm/copy_in.cc) runs instead of the table's choice.
  if (opt.hosts == 1 && ranks > 1 && baton::CopyInChosen(settings.copy_in, crowded, filter)) {
    const uint64_t from = baton::CopyInMinBytes(static_cast<int>(settings.copy_in),
                                                settings.copy_in_min_bytes, table.rhd_below());
    const std::string upto =
        settings.copy_in_max_bytes == 0
            ? " up"
            : " to " + std::to_string(settings.copy_in_max_bytes >> 10) + " KiB";
    printf(
        "ordinary buffers: allreduce from %zu KiB%s takes the copy-in path (BATON_COPY_IN%s), "
        "not the table\n",
        static_cast<size_t>(from >> 10), upto.c_str(),
        settings.copy_in == 1 ? "=1" : ": ranks outnumber cores");
  }
  return 0;
}
