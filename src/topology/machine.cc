// The machine model from hwloc; see machine.h.
#include "topology/machine.h"

#include <hwloc.h>
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <utility>

namespace baton {
namespace {

// Owns an hwloc topology.
struct TopologyDeleter {
  void operator()(hwloc_topology* t) const { hwloc_topology_destroy(t); }
};
using TopologyPtr = std::unique_ptr<hwloc_topology, TopologyDeleter>;

// OS indices of the PUs of `set`.
std::vector<int> OsIndices(hwloc_const_cpuset_t set) {
  std::vector<int> out;
  unsigned index;
  hwloc_bitmap_foreach_begin(index, set) out.push_back(static_cast<int>(index));
  hwloc_bitmap_foreach_end();
  return out;
}

// The logical index of the NUMA node whose cpuset covers `set`, or -1.
// The smallest data (or unified) cache of `type` (HWLOC_OBJ_L2CACHE, ...)
// hwloc lists, in bytes; 0 when it lists none.
uint64_t SmallestCache(hwloc_topology_t t, hwloc_obj_type_t type) {
  uint64_t smallest = 0;
  for (hwloc_obj_t c = hwloc_get_next_obj_by_type(t, type, nullptr); c != nullptr;
       c = hwloc_get_next_obj_by_type(t, type, c)) {
    if (c->attr == nullptr || c->attr->cache.type == HWLOC_OBJ_CACHE_INSTRUCTION ||
        c->attr->cache.size == 0)
      continue;
    if (smallest == 0 || c->attr->cache.size < smallest) smallest = c->attr->cache.size;
  }
  return smallest;
}

int NumaCovering(hwloc_topology_t t, hwloc_const_cpuset_t set) {
  for (hwloc_obj_t n = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_NUMANODE, nullptr); n != nullptr;
       n = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_NUMANODE, n))
    if (!hwloc_bitmap_iszero(set) && hwloc_bitmap_isincluded(set, n->cpuset))
      return static_cast<int>(n->logical_index);
  return -1;
}

// The package at or above `obj`, or -1.
int PackageOf(hwloc_topology_t t, hwloc_obj_t obj) {
  if (obj->type == HWLOC_OBJ_PACKAGE) return static_cast<int>(obj->logical_index);
  hwloc_obj_t p = hwloc_get_ancestor_obj_by_type(t, HWLOC_OBJ_PACKAGE, obj);
  return p != nullptr ? static_cast<int>(p->logical_index) : -1;
}

// The NUMA node nearest to an I/O device: the one with the same locality as
// the device's first non-I/O ancestor, or the one covering it; -1 when the
// device hangs off the machine above several NUMA nodes.
int NearestNuma(hwloc_topology_t t, hwloc_obj_t io) {
  hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(t, io);
  if (anc == nullptr || anc->cpuset == nullptr) return -1;
  const int covering = NumaCovering(t, anc->cpuset);
  if (covering >= 0) return covering;
  hwloc_location location;
  location.type = HWLOC_LOCATION_TYPE_OBJECT;
  location.location.object = anc;
  unsigned n = 2;
  hwloc_obj_t nodes[2];
  if (hwloc_get_local_numanode_objs(t, &location, &n, nodes, 0) != 0 || n != 1) return -1;
  return static_cast<int>(nodes[0]->logical_index);
}

std::string BusId(const hwloc_obj_attr_u::hwloc_pcidev_attr_s& a) {
  char id[32];
  snprintf(id, sizeof(id), "%04x:%02x:%02x.%01x", a.domain, a.bus, a.dev, a.func);
  return id;
}

std::string PciBusId(hwloc_obj_t pci) {
  return BusId(pci->attr->pcidev);
}

// The bridges above a PCI device: its host bridge (by the bus range below
// it) and the PCI-to-PCI bridges between, outermost first.
void ReadPciPath(hwloc_obj_t pci, Device* d) {
  d->pci_bridges.clear();
  for (hwloc_obj_t b = pci->parent; b != nullptr && b->type == HWLOC_OBJ_BRIDGE; b = b->parent) {
    const hwloc_obj_attr_u::hwloc_bridge_attr_s& attr = b->attr->bridge;
    if (attr.upstream_type == HWLOC_OBJ_BRIDGE_HOST) {
      char range[48];
      snprintf(range, sizeof(range), "%04x:[%02x-%02x]", attr.downstream.pci.domain,
               attr.downstream.pci.secondary_bus, attr.downstream.pci.subordinate_bus);
      d->host_bridge = range;
      break;
    }
    d->pci_bridges.insert(d->pci_bridges.begin(), BusId(attr.upstream.pci));
  }
}

// The GPU (index into m->gpus) an object of a distance matrix stands for:
// one of its OS devices or its PCI function; -1 for anything else.
int GpuIndexOf(const Machine& m, hwloc_obj_t o) {
  hwloc_obj_t pci = o;
  while (pci != nullptr && pci->type != HWLOC_OBJ_PCI_DEVICE) pci = pci->parent;
  if (pci == nullptr) return -1;
  const std::string bus = PciBusId(pci);
  for (size_t g = 0; g < m.gpus.size(); ++g)
    if (m.gpus[g].pci == bus) return static_cast<int>(g);
  return -1;
}

bool IsNvSwitch(hwloc_obj_t o) {
  return o->type == HWLOC_OBJ_PCI_DEVICE && o->subtype != nullptr &&
         strcmp(o->subtype, "NVSwitch") == 0;
}

// NVLink bandwidths from hwloc's NVLinkBandwidth matrix (the NVML backend,
// or an XML export of a machine that had it). GPUs on NVSwitches reach every
// other GPU on them at the smaller of their two totals to the switches.
void ReadNvLinks(hwloc_topology_t t, Machine* m) {
  unsigned nr = 1;
  hwloc_distances_s* dist = nullptr;
  if (hwloc_distances_get_by_name(t, "NVLinkBandwidth", &nr, &dist, 0) != 0 || nr == 0) return;
  const size_t gpus = m->gpus.size();
  std::vector<int> direct(gpus * gpus, 0);
  std::vector<uint64_t> to_switches(gpus, 0);
  bool any = false;
  const unsigned n = dist->nbobjs;
  for (unsigned i = 0; i < n; ++i) {
    const int a = GpuIndexOf(*m, dist->objs[i]);
    if (a < 0) continue;
    for (unsigned j = 0; j < n; ++j) {
      const uint64_t v = dist->values[i * n + j];
      if (i == j || v == 0) continue;
      any = true;
      if (IsNvSwitch(dist->objs[j])) {
        to_switches[a] += v;
      } else if (const int b = GpuIndexOf(*m, dist->objs[j]); b >= 0 && b != a) {
        direct[a * gpus + b] = static_cast<int>(std::min<uint64_t>(v, INT32_MAX));
      }
    }
  }
  hwloc_distances_release(t, dist);
  if (!any) return;
  for (size_t a = 0; a < gpus; ++a)
    for (size_t b = 0; b < gpus; ++b)
      if (a != b && direct[a * gpus + b] == 0 && to_switches[a] > 0 && to_switches[b] > 0)
        direct[a * gpus + b] = static_cast<int>(
            std::min<uint64_t>(std::min(to_switches[a], to_switches[b]), INT32_MAX));
  m->nvlink_mbytes = std::move(direct);
}

bool StartsWith(const char* s, const char* prefix) {
  return s != nullptr && strncmp(s, prefix, strlen(prefix)) == 0;
}

// GPUs by the names of their compute or management OS devices (CUDA,
// NVML, ROCm SMI, Level Zero); an OpenCL or display device alone is not
// counted (OpenCL devices may be CPUs, displays need not compute).
bool IsGpuOsdev(hwloc_obj_t o) {
  return StartsWith(o->name, "cuda") || StartsWith(o->name, "nvml") ||
         StartsWith(o->name, "rsmi") || StartsWith(o->name, "ze");
}

// The preferred name of a GPU among its OS devices: cudaN, then the others.
int GpuNameRank(const char* name) {
  if (StartsWith(name, "cuda")) return 0;
  if (StartsWith(name, "rsmi") || StartsWith(name, "ze")) return 1;
  return 2;  // nvml
}

void ReadDevices(hwloc_topology_t t, Machine* m) {
  std::map<std::string, Device> gpus, nics;  // by PCI bus id, in bus order
  std::map<std::string, int> gpu_name_rank;
  for (hwloc_obj_t o = hwloc_get_next_osdev(t, nullptr); o != nullptr;
       o = hwloc_get_next_osdev(t, o)) {
    hwloc_obj_t pci = o->parent;
    while (pci != nullptr && pci->type != HWLOC_OBJ_PCI_DEVICE) pci = pci->parent;
    if (pci == nullptr || o->name == nullptr) continue;
    const std::string bus = PciBusId(pci);
    const bool network = o->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK;
    const bool verbs = o->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS;
    if (!IsGpuOsdev(o) && !network && !verbs) continue;
    auto& table = IsGpuOsdev(o) ? gpus : nics;
    Device& d = table[bus];
    d.pci = bus;
    ReadPciPath(pci, &d);
    d.numa = NearestNuma(t, pci);
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(t, pci);
    d.package = anc != nullptr ? PackageOf(t, anc) : -1;
    if (IsGpuOsdev(o)) {
      auto it = gpu_name_rank.find(bus);
      if (it == gpu_name_rank.end() || GpuNameRank(o->name) < it->second) {
        d.name = o->name;
        gpu_name_rank[bus] = GpuNameRank(o->name);
      }
    } else if (verbs) {
      d.name = o->name;  // the verbs name (mlx5_0) names an RDMA NIC
      d.rdma = true;
    } else {
      d.netdev = o->name;
      if (d.name.empty()) d.name = o->name;
    }
  }
  for (auto& [bus, d] : gpus) m->gpus.push_back(d);
  for (auto& [bus, d] : nics) m->nics.push_back(d);
  ReadNvLinks(t, m);
}

}  // namespace

const char* GpuPathName(GpuPath p) {
  switch (p) {
    case GpuPath::kSelf:
      return "self";
    case GpuPath::kNvLink:
      return "nvlink";
    case GpuPath::kPciSwitch:
      return "pcie-switch";
    case GpuPath::kHostBridge:
      return "host-bridge";
    case GpuPath::kSameNuma:
      return "numa";
    case GpuPath::kSystem:
      return "system";
  }
  return "?";
}

GpuPath PciPath(const Device& a, const Device& b) {
  if (a.pci == b.pci) return GpuPath::kSelf;
  if (!a.host_bridge.empty() && a.host_bridge == b.host_bridge) {
    if (!a.pci_bridges.empty() && !b.pci_bridges.empty() &&
        a.pci_bridges.front() == b.pci_bridges.front())
      return GpuPath::kPciSwitch;
    return GpuPath::kHostBridge;
  }
  if (a.numa >= 0 && a.numa == b.numa) return GpuPath::kSameNuma;
  return GpuPath::kSystem;
}

int PciBridgesBetween(const Device& a, const Device& b) {
  if (a.host_bridge.empty() || a.host_bridge != b.host_bridge) return -1;
  size_t common = 0;
  while (common < a.pci_bridges.size() && common < b.pci_bridges.size() &&
         a.pci_bridges[common] == b.pci_bridges[common])
    ++common;
  return static_cast<int>(a.pci_bridges.size() + b.pci_bridges.size() - 2 * common);
}

std::string NormalizePciBusId(const std::string& bus_id) {
  unsigned domain = 0, bus = 0, dev = 0, func = 0;
  int used = 0;
  // Hex digits and separators only: sscanf's %x would also take "0x", signs
  // and spaces.
  if (bus_id.find_first_not_of("0123456789abcdefABCDEF:.") != std::string::npos) return "";
  if (sscanf(bus_id.c_str(), "%x:%x:%x.%x%n", &domain, &bus, &dev, &func, &used) != 4 ||
      static_cast<size_t>(used) != bus_id.size() || domain > 0xffff || bus > 0xff || dev > 0x1f ||
      func > 7)
    return "";
  char id[32];
  snprintf(id, sizeof(id), "%04x:%02x:%02x.%01x", domain, bus, dev, func);
  return id;
}

std::vector<NicDistance> RdmaNicsNearGpu(const Machine& m, const std::string& gpu_pci) {
  const std::string bus = NormalizePciBusId(gpu_pci);
  const Device* gpu = nullptr;
  for (const Device& g : m.gpus)
    if (!bus.empty() && g.pci == bus) gpu = &g;
  std::vector<NicDistance> out;
  if (gpu == nullptr) return out;
  for (const Device& nic : m.nics)
    if (nic.rdma) out.push_back({nic.name, PciPath(*gpu, nic), PciBridgesBetween(*gpu, nic)});
  // Unsigned, so "-1: different host bridges" sorts after every count.
  std::stable_sort(out.begin(), out.end(), [](const NicDistance& a, const NicDistance& b) {
    return std::make_pair(a.path, static_cast<unsigned>(a.bridges)) <
           std::make_pair(b.path, static_cast<unsigned>(b.bridges));
  });
  return out;
}

int Machine::NvLinkMBytes(int gpu_a, int gpu_b) const {
  if (nvlink_mbytes.empty()) return 0;
  return nvlink_mbytes[static_cast<size_t>(gpu_a) * gpus.size() + gpu_b];
}

GpuPath Machine::GpuLink(int gpu_a, int gpu_b) const {
  if (gpu_a == gpu_b) return GpuPath::kSelf;
  if (NvLinkMBytes(gpu_a, gpu_b) > 0) return GpuPath::kNvLink;
  return PciPath(gpus[gpu_a], gpus[gpu_b]);
}

int Machine::CoreOfPu(int pu) const {
  for (int c = 0; c < core_count(); ++c)
    if (std::find(cores[c].pus.begin(), cores[c].pus.end(), pu) != cores[c].pus.end()) return c;
  return -1;
}

Status LoadMachine(const std::string& xml_path, Machine* out, bool with_devices) {
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) return ErrnoError("hwloc_topology_init", errno);
  TopologyPtr topology(raw);
  hwloc_topology_t t = topology.get();
  hwloc_topology_set_io_types_filter(
      t, with_devices ? HWLOC_TYPE_FILTER_KEEP_IMPORTANT : HWLOC_TYPE_FILTER_KEEP_NONE);
  if (!xml_path.empty() && hwloc_topology_set_xml(t, xml_path.c_str()) != 0)
    return ErrnoError("hwloc cannot read the topology file " + xml_path, errno);
#if HWLOC_API_VERSION >= 0x00020100
  // Without hwloc's x86 backend, which binds this thread to every core in
  // turn to read CPUID there: each move waits for that core, which on a busy
  // or oversubscribed host costs every rank tens of milliseconds per core.
  // Linux's sysfs gives the packages, cores, NUMA nodes and caches used here.
  if (xml_path.empty())
    hwloc_topology_set_components(t, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "x86");
#endif
  if (hwloc_topology_load(t) != 0)
    return ErrnoError(
        "hwloc_topology_load" + (xml_path.empty() ? std::string() : " (" + xml_path + ")"), errno);

  Machine m;
  m.source = xml_path.empty() ? "this machine" : xml_path;
  m.packages = std::max(1, hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PACKAGE));
  m.numa_nodes = std::max(1, hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE));
  m.pus = std::max(1, hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PU));
  // Machines without core objects (some exports) get one core per PU.
  const hwloc_obj_type_t core_type =
      hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_CORE) > 0 ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
  for (hwloc_obj_t c = hwloc_get_next_obj_by_type(t, core_type, nullptr); c != nullptr;
       c = hwloc_get_next_obj_by_type(t, core_type, c)) {
    Core core;
    core.package = std::max(0, PackageOf(t, c));
    core.numa = std::max(0, NumaCovering(t, c->cpuset));
    core.pus = OsIndices(c->cpuset);
    if (!core.pus.empty()) m.cores.push_back(std::move(core));
  }
  if (m.cores.empty()) return InternalError("hwloc found no cores in " + m.source);
  m.l2_bytes = SmallestCache(t, HWLOC_OBJ_L2CACHE);
  m.llc_bytes = SmallestCache(t, HWLOC_OBJ_L3CACHE);
  if (with_devices) ReadDevices(t, &m);
  *out = std::move(m);
  return Status::Ok();
}

Status CachedMachine(const std::string& xml_path, const Machine** out, bool with_devices) {
  static std::mutex mu;
  // Keyed by path and parts; a full machine also answers for the CPUs.
  static std::map<std::pair<std::string, bool>, std::unique_ptr<Machine>> machines;
  std::lock_guard<std::mutex> lock(mu);
  if (!with_devices) {
    auto full = machines.find({xml_path, true});
    if (full != machines.end() && full->second != nullptr) {
      *out = full->second.get();
      return Status::Ok();
    }
  }
  std::unique_ptr<Machine>& m = machines[{xml_path, with_devices}];
  if (m == nullptr) {
    auto loaded = std::make_unique<Machine>();
    BATON_RETURN_IF_ERROR(LoadMachine(xml_path, loaded.get(), with_devices));
    m = std::move(loaded);
  }
  *out = m.get();
  return Status::Ok();
}

Status CurrentAffinity(std::vector<int>* pus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return ErrnoError("sched_getaffinity", errno);
  pus->clear();
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &set)) pus->push_back(cpu);
  return Status::Ok();
}

Placement PlacementOf(const Machine& machine, const std::vector<int>& pus) {
  Placement p;
  std::set<int> cores, packages, numas;
  for (int pu : pus) {
    const int c = machine.CoreOfPu(pu);
    if (c < 0) continue;
    cores.insert(c);
    packages.insert(machine.cores[c].package);
    numas.insert(machine.cores[c].numa);
  }
  p.cores = static_cast<int>(cores.size());
  if (packages.size() == 1) p.package = *packages.begin();
  if (numas.size() == 1) p.numa = *numas.begin();
  return p;
}

}  // namespace baton
