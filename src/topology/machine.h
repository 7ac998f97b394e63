// Machine: what one host has, as hwloc sees it (packages, NUMA nodes, cores
// with their hardware threads, GPUs and NICs with their PCI locality), kept
// as plain data so that nothing above this layer needs hwloc's types.
//
// The machine is this process's own, or the one an hwloc XML export
// describes (BATON_TOPO_FILE, and the tests' XMLs of machines we do not
// have). Indices of packages and NUMA nodes are hwloc's logical ones
// (0..n-1 in topology order); PUs are OS indices, what sched_setaffinity
// takes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace baton {

// One core: where it sits and its hardware threads.
struct Core {
  int package = 0;
  int numa = 0;
  std::vector<int> pus;  // OS indices
};

// A GPU or a NIC: one PCI function.
struct Device {
  std::string name;    // "cuda0", "nvml3", "mlx5_0", "eth1"
  std::string pci;     // "0000:3b:00.0"
  int numa = -1;       // the nearest NUMA node; -1 when none is nearer than the others
  int package = -1;    // the package it hangs off; -1 when above the packages
  std::string netdev;  // NICs: the network interface ("ib0"), empty if none
  bool rdma = false;   // NICs: it has an OpenFabrics (verbs) device
  // Its PCIe path: the host bridge it hangs off ("0000:[2b-3b]", its bus
  // range) and the bus ids of the PCI-to-PCI bridges (root ports, switch
  // ports) between that and the device, outermost first. Two devices with a
  // bridge in common talk through PCIe switches without crossing the CPU.
  std::string host_bridge;
  std::vector<std::string> pci_bridges;
  // The outermost bridge, which names the PCIe tree it sits in; "" when the
  // device sits right under its host bridge.
  const std::string& pci_switch() const {
    static const std::string kNone;
    return pci_bridges.empty() ? kNone : pci_bridges.front();
  }
};

// How data goes between two GPUs (or a GPU and a NIC), fastest first; NCCL
// calls these NVL, PIX/PXB, PHB, NODE and SYS.
enum class GpuPath : uint8_t {
  kSelf,
  kNvLink,      // NVLink, directly or through NVSwitches
  kPciSwitch,   // PCIe switches only: they share a PCI-to-PCI bridge
  kHostBridge,  // through the PCIe host bridge of one CPU
  kSameNuma,    // across host bridges of one NUMA node
  kSystem,      // across NUMA nodes or packages (the CPUs' interconnect)
};
// "self", "nvlink", "pcie-switch", "host-bridge", "numa", "system".
const char* GpuPathName(GpuPath p);

// The PCIe part of that: what lies between two PCI devices.
GpuPath PciPath(const Device& a, const Device& b);

// The PCI-to-PCI bridges between two devices below one host bridge (the
// ports of the switches crossed: 2 for two devices on one switch), or -1
// when they hang off different host bridges. Finer than PciPath, whose
// kPciSwitch only says that they share the outermost bridge (on a DGX-2
// that is the root port above four GPUs and their NICs).
int PciBridgesBetween(const Device& a, const Device& b);

// A PCI bus id as hwloc writes it ("0000:3b:00.0") from another spelling
// (CUDA's "0000:3B:00.0", NVML's "00000000:3B:00.0"); "" when malformed.
std::string NormalizePciBusId(const std::string& bus_id);

struct Machine {
  std::string source;  // "this machine", or the XML file it came from
  int packages = 1;
  int numa_nodes = 1;
  int pus = 1;
  // The smallest level-2 data (or unified) cache hwloc lists, in bytes: a
  // core's own cache on most CPUs; 0 when it lists none (some exports).
  uint64_t l2_bytes = 0;
  // The smallest level-3 cache hwloc lists, in bytes: what a package's
  // cores share on most CPUs; 0 when it lists none.
  uint64_t llc_bytes = 0;
  std::vector<Core> cores;  // in hwloc's logical order
  std::vector<Device> gpus;
  std::vector<Device> nics;
  // NVLink bandwidth between GPUs i and j in MB/s at [i * gpus.size() + j],
  // as hwloc's NVLinkBandwidth matrix gives it (through NVSwitches: the
  // smaller of the two GPUs' links to the switches); 0: no NVLink. Empty
  // when hwloc knows of no NVLink.
  std::vector<int> nvlink_mbytes;

  int core_count() const { return static_cast<int>(cores.size()); }
  int NvLinkMBytes(int gpu_a, int gpu_b) const;
  // The path between GPUs `gpu_a` and `gpu_b` (indices into gpus).
  GpuPath GpuLink(int gpu_a, int gpu_b) const;
  // The core holding OS PU `pu`, or -1.
  int CoreOfPu(int pu) const;
};

// How far an RDMA NIC (one with a verbs device) is from a GPU, for the
// choice of the NIC that carries the traffic of a rank using that GPU.
struct NicDistance {
  std::string name;  // the verbs device, "mlx5_0"
  GpuPath path = GpuPath::kSystem;
  int bridges = -1;  // PciBridgesBetween
};
// The RDMA NICs of `m`, nearest to the GPU with PCI bus id `gpu_pci` first
// (by path, then bridges crossed; ties keep hwloc's bus order). Empty when
// `m` has no such GPU or no RDMA NIC.
std::vector<NicDistance> RdmaNicsNearGpu(const Machine& m, const std::string& gpu_pci);

// This machine when `xml_path` is empty, else the hwloc XML export at that
// path. batonSystemError when hwloc cannot load it. Without `with_devices`
// only packages, NUMA nodes and cores are read (no GPUs or NICs): hwloc's
// PCI discovery is most of its cost, which every rank pays at creation.
Status LoadMachine(const std::string& xml_path, Machine* out, bool with_devices = true);

// The same, loaded once per process (and per file) and kept: hwloc takes
// milliseconds to look at a machine, and the machine does not change.
Status CachedMachine(const std::string& xml_path, const Machine** out, bool with_devices = true);

// The PUs this process may run on (its CPU affinity), as OS indices.
Status CurrentAffinity(std::vector<int>* pus);

// Where a set of PUs lies on `machine`: the one package and NUMA node that
// hold all of them, or -1 where they span several.
struct Placement {
  int package = -1;
  int numa = -1;
  int cores = 0;  // cores with at least one of the PUs
};
Placement PlacementOf(const Machine& machine, const std::vector<int>& pus);

}  // namespace baton
