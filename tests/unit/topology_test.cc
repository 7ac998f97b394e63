// The topology layer on real machines we do not have (hwloc XML exports in
// tests/data/topologies) and on this one: what Baton makes of each machine
// (packages, NUMA nodes, cores, GPUs and NICs with their NUMA node), the
// binding plans batonrun would apply there, and the ring order and link
// classes of the ranks so bound.
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "topology/binding.h"
#include "topology/comm_topology.h"
#include "topology/machine.h"

namespace baton {
namespace {

std::string Xml(const char* name) {
  return std::string(BATON_TEST_DATA) + "/topologies/" + name;
}

Machine Load(const char* name) {
  Machine m;
  const Status st = LoadMachine(Xml(name), &m);
  EXPECT_TRUE(st.ok()) << name << ": " << st.message();
  return m;
}

// The NUMA node and package of each rank of a plan, and that no two ranks
// share a core (when `distinct`).
struct PlanPlaces {
  std::vector<int> numa, package;
};
PlanPlaces PlacesOfPlan(const Machine& m, const std::vector<std::vector<int>>& plan,
                        bool distinct) {
  PlanPlaces out;
  std::set<int> cores;
  for (const auto& pus : plan) {
    const Placement p = PlacementOf(m, pus);
    out.numa.push_back(p.numa);
    out.package.push_back(p.package);
    EXPECT_EQ(p.cores, 1) << PuListString(pus);
    if (distinct) {
      EXPECT_TRUE(cores.insert(m.CoreOfPu(pus[0])).second) << PuListString(pus);
    }
  }
  return out;
}

// Places of ranks bound as `plan` says, all on one host.
std::vector<RankPlace> Places(const Machine& m, const std::vector<std::vector<int>>& plan,
                              uint64_t host = 1) {
  std::vector<RankPlace> places;
  for (const auto& pus : plan) {
    const Placement p = PlacementOf(m, pus);
    places.push_back({host, p.package, p.numa, m.packages, m.numa_nodes, false});
  }
  return places;
}

// ---- What hwloc says of each machine ------------------------------------------

TEST(MachineTest, TwentyFourNumaServer) {
  const Machine m = Load("192em64t-24n8c2t.xml");
  EXPECT_EQ(m.packages, 24);
  EXPECT_EQ(m.numa_nodes, 24);
  EXPECT_EQ(m.core_count(), 192);
  EXPECT_EQ(m.pus, 384);
  EXPECT_EQ(m.l2_bytes, 256u << 10);
  EXPECT_EQ(m.llc_bytes, 20u << 20);
  EXPECT_TRUE(m.gpus.empty());
  ASSERT_EQ(m.nics.size(), 7u);
  int ethernet_numa0 = 0, ethernet_numa4 = 0;
  for (const Device& d : m.nics) {
    if (d.rdma) {
      EXPECT_EQ(d.name, "mlx4_0");
      EXPECT_EQ(d.netdev, "ib0");
      EXPECT_EQ(d.numa, 6);
      EXPECT_EQ(d.package, 6);
    } else {
      ethernet_numa0 += d.numa == 0;
      ethernet_numa4 += d.numa == 4;
    }
  }
  EXPECT_EQ(ethernet_numa0, 2);  // eth0, eth1
  EXPECT_EQ(ethernet_numa4, 4);  // eth2 .. eth5
  // 8 cores of 2 threads on every package, each in its package's NUMA node.
  for (const Core& c : m.cores) {
    EXPECT_EQ(c.pus.size(), 2u);
    EXPECT_EQ(c.numa, c.package);
  }
}

TEST(MachineTest, TwoSocketBoxWithGpuAndMlx5) {
  const Machine m = Load("32em64t-2n8c2t-pci-wholeio.xml");
  EXPECT_EQ(m.packages, 2);
  EXPECT_EQ(m.numa_nodes, 2);
  EXPECT_EQ(m.core_count(), 16);
  EXPECT_EQ(m.pus, 32);
  EXPECT_EQ(m.l2_bytes, 256u << 10);
  EXPECT_EQ(m.llc_bytes, 20u << 20);
  ASSERT_EQ(m.gpus.size(), 1u);  // the AMD OpenCL device beside it computes nothing CUDA can use
  EXPECT_EQ(m.gpus[0].name, "cuda0");
  EXPECT_EQ(m.gpus[0].pci, "0000:84:00.0");
  EXPECT_EQ(m.gpus[0].numa, 1);
  ASSERT_EQ(m.nics.size(), 3u);
  EXPECT_EQ(m.nics[0].name, "mlx5_0");
  EXPECT_EQ(m.nics[0].netdev, "ib0");
  EXPECT_TRUE(m.nics[0].rdma);
  EXPECT_EQ(m.nics[0].pci, "0000:04:00.0");
  for (const Device& d : m.nics) EXPECT_EQ(d.numa, 1) << d.name;
  EXPECT_EQ(m.nics[1].name, "eth0");
  EXPECT_FALSE(m.nics[1].rdma);
  // The GPU and the mlx5 sit below one root port of the host bridge
  // [80-84]; the Ethernet ports below another.
  EXPECT_EQ(m.gpus[0].host_bridge, "0000:[80-84]");
  EXPECT_EQ(m.gpus[0].pci_switch(), "0000:80:03.0");
  EXPECT_EQ(m.nics[0].pci_switch(), "0000:80:03.0");
  EXPECT_EQ(m.nics[1].pci_switch(), "0000:80:01.0");
  EXPECT_EQ(PciPath(m.gpus[0], m.nics[0]), GpuPath::kPciSwitch);
  EXPECT_EQ(PciPath(m.gpus[0], m.nics[1]), GpuPath::kHostBridge);
  EXPECT_TRUE(m.nvlink_mbytes.empty());
  EXPECT_EQ(m.GpuLink(0, 0), GpuPath::kSelf);
}

TEST(MachineTest, Dgx2) {
  const Machine m = Load("nvidiaDGX2.xml");
  EXPECT_EQ(m.packages, 2);
  EXPECT_EQ(m.numa_nodes, 2);
  EXPECT_EQ(m.core_count(), 4);  // trimmed to 2 cores a socket
  EXPECT_EQ(m.l2_bytes, 1u << 20);
  EXPECT_EQ(m.llc_bytes, 33u << 20);
  ASSERT_EQ(m.gpus.size(), 16u);
  for (size_t g = 0; g < m.gpus.size(); ++g) {
    EXPECT_EQ(m.gpus[g].name, "nvml" + std::to_string(g));
    EXPECT_EQ(m.gpus[g].numa, g < 8 ? 0 : 1) << m.gpus[g].name;
    EXPECT_EQ(m.gpus[g].package, g < 8 ? 0 : 1) << m.gpus[g].name;
  }
  EXPECT_TRUE(m.nics.empty());
}

// The DGX-2's 16 V100s: four PCIe trees (a root port, then PLX switches) of
// four GPUs, two trees a socket, and every GPU on the 12 NVSwitches by six
// NVLinks of 25 GB/s.
TEST(MachineTest, Dgx2GpuPaths) {
  const Machine m = Load("nvidiaDGX2.xml");
  ASSERT_EQ(m.gpus.size(), 16u);
  const char* kRootPorts[] = {"0000:2b:00.0", "0000:4e:00.0", "0000:ae:00.0", "0000:d7:00.0"};
  const char* kHostBridges[] = {"0000:[2b-3b]", "0000:[4e-67]", "0000:[ae-c7]", "0000:[d7-e7]"};
  for (int g = 0; g < 16; ++g) {
    EXPECT_EQ(m.gpus[g].pci_switch(), kRootPorts[g / 4]) << g;
    EXPECT_EQ(m.gpus[g].host_bridge, kHostBridges[g / 4]) << g;
    EXPECT_GE(m.gpus[g].pci_bridges.size(), 3u) << g;  // root port, switch up and down ports
  }
  ASSERT_EQ(m.nvlink_mbytes.size(), 256u);
  for (int a = 0; a < 16; ++a) {
    for (int b = 0; b < 16; ++b) {
      if (a == b) {
        EXPECT_EQ(m.GpuLink(a, b), GpuPath::kSelf);
        continue;
      }
      EXPECT_EQ(m.GpuLink(a, b), GpuPath::kNvLink) << a << " " << b;
      EXPECT_EQ(m.NvLinkMBytes(a, b), 6 * 25000) << a << " " << b;
      // Under the NVLinks, the PCIe path they would take without them.
      const GpuPath pci = PciPath(m.gpus[a], m.gpus[b]);
      if (a / 4 == b / 4)
        EXPECT_EQ(pci, GpuPath::kPciSwitch) << a << " " << b;
      else if (a / 8 == b / 8)
        EXPECT_EQ(pci, GpuPath::kSameNuma) << a << " " << b;
      else
        EXPECT_EQ(pci, GpuPath::kSystem) << a << " " << b;
    }
  }
}

// The NIC nearest each GPU, on the DGX-2 export with its eight ConnectX-5s
// put back where a DGX-2 has them (tests/data/topologies/README.md): each
// pair of GPUs shares its last PCIe switch with one NIC, at the bus between
// theirs. The expected pairs are read off the XML, not computed.
TEST(MachineTest, Dgx2NicNearestEachGpu) {
  const Machine m = Load("nvidiaDGX2-nics.xml");
  ASSERT_EQ(m.gpus.size(), 16u);
  ASSERT_EQ(m.nics.size(), 8u);
  const char* kGpuBus[16] = {"34", "36", "39", "3b", "57", "59", "5c", "5e",
                             "b7", "b9", "bc", "be", "e0", "e2", "e5", "e7"};
  const char* kNicBus[8] = {"35", "3a", "58", "5d", "b8", "bd", "e1", "e6"};
  for (int n = 0; n < 8; ++n) {
    EXPECT_EQ(m.nics[n].name, "mlx5_" + std::to_string(n));
    EXPECT_EQ(m.nics[n].pci, std::string("0000:") + kNicBus[n] + ":00.0");
    EXPECT_TRUE(m.nics[n].rdma);
    EXPECT_EQ(m.nics[n].numa, n < 4 ? 0 : 1);
  }
  for (int g = 0; g < 16; ++g) {
    const std::string bus = std::string("0000:") + kGpuBus[g] + ":00.0";
    ASSERT_EQ(m.gpus[g].pci, bus);
    // CUDA spells it in capitals, NVML with an 8-digit domain.
    std::string cuda_style = bus;
    for (char& c : cuda_style) c = static_cast<char>(toupper(c));
    for (const std::string& asked : {bus, cuda_style, "0000" + bus}) {
      const std::vector<NicDistance> near = RdmaNicsNearGpu(m, asked);
      ASSERT_EQ(near.size(), 8u) << asked;
      // Nearest: the NIC on the GPU's own switch (two switch ports apart).
      EXPECT_EQ(near[0].name, "mlx5_" + std::to_string(g / 2)) << asked;
      EXPECT_EQ(near[0].path, GpuPath::kPciSwitch) << asked;
      EXPECT_EQ(near[0].bridges, 2) << asked;
      // Then the other NIC of the same root port, three switch levels up
      // and down; then the other tree of the socket; then the other socket.
      EXPECT_EQ(near[1].name, "mlx5_" + std::to_string((g / 2) ^ 1)) << asked;
      EXPECT_EQ(near[1].path, GpuPath::kPciSwitch) << asked;
      EXPECT_EQ(near[1].bridges, 6) << asked;
      for (int i = 2; i < 4; ++i) {
        EXPECT_EQ(near[i].path, GpuPath::kSameNuma) << asked << " " << i;
        EXPECT_EQ(near[i].bridges, -1);
        EXPECT_EQ(near[i].name.back() - '0', ((g / 4) ^ 1) * 2 + i - 2) << asked << " " << i;
      }
      for (int i = 4; i < 8; ++i) {
        EXPECT_EQ(near[i].path, GpuPath::kSystem) << asked << " " << i;
        EXPECT_EQ(near[i].name.back() - '0', (g < 8 ? 4 : 0) + i - 4) << asked << " " << i;
      }
    }
  }
}

// Machines with no GPU, no RDMA NIC, or not that GPU: no GPU-based choice.
TEST(MachineTest, NicsNearGpuOnTheOtherMachines) {
  const Machine box = Load("32em64t-2n8c2t-pci-wholeio.xml");
  // One GPU and one mlx5 below the same root port; the Ethernet ports are
  // no RDMA NICs.
  const std::vector<NicDistance> near = RdmaNicsNearGpu(box, "0000:84:00.0");
  ASSERT_EQ(near.size(), 1u);
  EXPECT_EQ(near[0].name, "mlx5_0");
  EXPECT_EQ(near[0].path, GpuPath::kPciSwitch);
  EXPECT_EQ(near[0].bridges, PciBridgesBetween(box.gpus[0], box.nics[0]));
  EXPECT_GE(near[0].bridges, 0);
  // The 3D controller at 83:00.0 has no CUDA or NVML device: not a GPU here.
  EXPECT_TRUE(RdmaNicsNearGpu(box, "0000:83:00.0").empty());
  EXPECT_TRUE(RdmaNicsNearGpu(Load("nvidiaDGX2.xml"), "0000:34:00.0").empty());  // no NIC
  EXPECT_TRUE(RdmaNicsNearGpu(Load("power8gpudistances.xml"), "0002:01:00.0").empty());
  EXPECT_TRUE(RdmaNicsNearGpu(Load("192em64t-24n8c2t.xml"), "0000:01:00.0").empty());  // no GPU
  for (const char* bad : {"", "0000:84:00", "0000:84:00.0x", "zz:84:00.0", "0000:184:00.0",
                          "0000:84:20.0", "0000:84:00.8", "0000:84: 0.0", "-000:84:00.0"}) {
    EXPECT_EQ(NormalizePciBusId(bad), "") << bad;
    EXPECT_TRUE(RdmaNicsNearGpu(box, bad).empty()) << bad;
  }
  EXPECT_EQ(NormalizePciBusId("0000:3B:00.0"), "0000:3b:00.0");
  EXPECT_EQ(NormalizePciBusId("00000002:01:1f.7"), "0002:01:1f.7");
}

TEST(MachineTest, Power8WithFourGpus) {
  const Machine m = Load("power8gpudistances.xml");
  EXPECT_EQ(m.packages, 2);
  EXPECT_EQ(m.numa_nodes, 2);
  EXPECT_EQ(m.core_count(), 8);
  EXPECT_EQ(m.pus, 16);
  EXPECT_EQ(m.l2_bytes, 0u);         // the export lists no level-2 caches,
  EXPECT_EQ(m.llc_bytes, 8u << 20);  // only level-3 ones
  ASSERT_EQ(m.gpus.size(), 4u);  // CUDA, OpenCL and NVML devices of one GPU count once
  for (size_t g = 0; g < 4; ++g) {
    EXPECT_EQ(m.gpus[g].name, "cuda" + std::to_string(g));
    EXPECT_EQ(m.gpus[g].numa, g < 2 ? 0 : 1);
  }
  EXPECT_TRUE(m.nics.empty());
  // NVLink pairs the GPUs of a socket at 40 GB/s (and each to its CPU);
  // between sockets data crosses the CPUs.
  EXPECT_EQ(m.GpuLink(0, 1), GpuPath::kNvLink);
  EXPECT_EQ(m.NvLinkMBytes(0, 1), 40000);
  EXPECT_EQ(m.NvLinkMBytes(1, 0), 40000);
  EXPECT_EQ(m.GpuLink(2, 3), GpuPath::kNvLink);
  EXPECT_EQ(m.NvLinkMBytes(0, 2), 0);
  EXPECT_EQ(m.GpuLink(0, 2), GpuPath::kSystem);
  EXPECT_EQ(m.GpuLink(1, 3), GpuPath::kSystem);
  EXPECT_STREQ(GpuPathName(GpuPath::kNvLink), "nvlink");
}

TEST(MachineTest, ThisMachine) {
  Machine m;
  ASSERT_TRUE(LoadMachine("", &m).ok());
  EXPECT_EQ(m.source, "this machine");
  EXPECT_GE(m.core_count(), 1);
  EXPECT_GE(m.pus, m.core_count());
  std::vector<int> pus;
  ASSERT_TRUE(CurrentAffinity(&pus).ok());
  ASSERT_FALSE(pus.empty());
  for (int pu : pus) EXPECT_GE(m.CoreOfPu(pu), 0) << pu;
  // The level-2 and level-3 caches as Linux lists CPU 0's (on machines
  // whose cores' caches are alike, as every one this runs on).
  auto Bytes = [](const std::string& size) {
    return std::stoull(size) << (size.back() == 'M' ? 20 : 10);
  };
  for (int i = 0; i < 8; ++i) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    std::ifstream level_file(dir + "level"), type_file(dir + "type"), size_file(dir + "size");
    int level = 0;
    std::string type, size;
    if (!(level_file >> level >> std::ws) || !(type_file >> type) || !(size_file >> size)) break;
    if (type == "Instruction") continue;
    if (level == 2) {
      EXPECT_EQ(m.l2_bytes, Bytes(size)) << size;
    } else if (level == 3) {
      EXPECT_EQ(m.llc_bytes, Bytes(size)) << size;
    }
  }
  const Machine* cached = nullptr;
  ASSERT_TRUE(CachedMachine("", &cached).ok());
  EXPECT_EQ(cached->core_count(), m.core_count());
}

TEST(MachineTest, BadFileIsAnError) {
  Machine m;
  const Status st = LoadMachine("/nonexistent/machine.xml", &m);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("/nonexistent/machine.xml"), std::string::npos) << st.message();
}

// ---- Binding plans ------------------------------------------------------------

TEST(BindingTest, SpreadsOverNumaNodesOneCoreEach) {
  const Machine m = Load("32em64t-2n8c2t-pci-wholeio.xml");
  const auto plan = PlanBinding(m, 4, BindPolicy::kAuto, {});
  const PlanPlaces p = PlacesOfPlan(m, plan, /*distinct=*/true);
  EXPECT_EQ(p.numa, (std::vector<int>{0, 1, 0, 1}));
  for (const auto& pus : plan) EXPECT_EQ(pus.size(), 2u);  // both threads of the core
}

TEST(BindingTest, OneNumaNodePerRankOnTheBigServer) {
  const Machine m = Load("192em64t-24n8c2t.xml");
  const auto plan = PlanBinding(m, 24, BindPolicy::kCore, {});
  const PlanPlaces p = PlacesOfPlan(m, plan, true);
  for (int r = 0; r < 24; ++r) EXPECT_EQ(p.numa[r], r);
}

TEST(BindingTest, RanksWithAGpuEachSitNearIt) {
  const Machine power8 = Load("power8gpudistances.xml");
  EXPECT_EQ(PlacesOfPlan(power8, PlanBinding(power8, 4, BindPolicy::kAuto, {}), true).numa,
            (std::vector<int>{0, 0, 1, 1}));
  const Machine dgx = Load("nvidiaDGX2.xml");
  // GPUs 0-3 are all on NUMA node 0, which has 2 cores: ranks 0 and 1 get
  // them, the others the other package's.
  const PlanPlaces d = PlacesOfPlan(dgx, PlanBinding(dgx, 4, BindPolicy::kAuto, {}), true);
  EXPECT_EQ(d.numa, (std::vector<int>{0, 0, 1, 1}));
  // One GPU, one rank: next to it; two ranks share it, so they spread.
  const Machine box = Load("32em64t-2n8c2t-pci-wholeio.xml");
  EXPECT_EQ(PlacesOfPlan(box, PlanBinding(box, 1, BindPolicy::kAuto, {}), true).numa,
            (std::vector<int>{1}));
  EXPECT_EQ(PlacesOfPlan(box, PlanBinding(box, 2, BindPolicy::kAuto, {}), true).numa,
            (std::vector<int>{0, 1}));
}

TEST(BindingTest, OversubscribedAutoBindsToNumaNodes) {
  const Machine m = Load("32em64t-2n8c2t-pci-wholeio.xml");
  const auto plan = PlanBinding(m, 20, BindPolicy::kAuto, {});
  ASSERT_EQ(plan.size(), 20u);
  for (int r = 0; r < 20; ++r) {
    EXPECT_EQ(plan[r].size(), 16u) << r;  // 8 cores x 2 threads
    EXPECT_EQ(PlacementOf(m, plan[r]).numa, r % 2) << r;
  }
  // Forcing cores then wraps around: 20 ranks on 16 cores.
  const auto cores = PlanBinding(m, 20, BindPolicy::kCore, {});
  std::set<int> used;
  for (const auto& pus : cores) {
    ASSERT_EQ(pus.size(), 2u);
    used.insert(m.CoreOfPu(pus[0]));
  }
  EXPECT_EQ(used.size(), 16u);
}

TEST(BindingTest, NoneAndSingleNumaOversubscription) {
  const Machine m = Load("32em64t-2n8c2t-pci-wholeio.xml");
  for (const auto& pus : PlanBinding(m, 4, BindPolicy::kNone, {})) EXPECT_TRUE(pus.empty());
  Machine small;  // one NUMA node, two cores: 3 ranks share the cores round robin
  small.cores = {{0, 0, {0}}, {0, 0, {1}}};
  small.pus = 2;
  const auto three = PlanBinding(small, 3, BindPolicy::kAuto, {});
  ASSERT_EQ(three.size(), 3u);
  EXPECT_EQ(three[0], std::vector<int>{0});
  EXPECT_EQ(three[1], std::vector<int>{1});
  EXPECT_EQ(three[2], std::vector<int>{0});
  const auto five = PlanBinding(small, 5, BindPolicy::kAuto, {});
  for (int r = 0; r < 5; ++r) EXPECT_EQ(five[r], std::vector<int>{r % 2}) << r;
  const auto two = PlanBinding(small, 2, BindPolicy::kAuto, {});
  EXPECT_EQ(two[0], std::vector<int>{0});
  EXPECT_EQ(two[1], std::vector<int>{1});
}

TEST(BindingTest, StaysWithinTheLaunchersCpus) {
  const Machine m = Load("32em64t-2n8c2t-pci-wholeio.xml");
  std::vector<int> numa1;
  for (const Core& c : m.cores)
    if (c.numa == 1) numa1.insert(numa1.end(), c.pus.begin(), c.pus.end());
  const PlanPlaces p = PlacesOfPlan(m, PlanBinding(m, 4, BindPolicy::kAuto, numa1), true);
  EXPECT_EQ(p.numa, (std::vector<int>{1, 1, 1, 1}));
}

TEST(BindingTest, PolicyNamesAndPuLists) {
  BindPolicy p;
  EXPECT_TRUE(ParseBindPolicy("CORE", &p));
  EXPECT_EQ(p, BindPolicy::kCore);
  EXPECT_FALSE(ParseBindPolicy("socket", &p));
  EXPECT_STREQ(BindPolicyName(BindPolicy::kNuma), "numa");
  EXPECT_EQ(PuListString({3, 0, 1, 2, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(PuListString({}), "");
}

// The library's own binding, in a child so that this process keeps its CPUs.
TEST(BindingTest, BindThisRankBindsOnlyWhenAskedAndUnbound) {
  auto in_child = [](auto body) {
    const pid_t pid = fork();
    if (pid == 0) _exit(body());
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 99;
  };
  Machine m;
  ASSERT_TRUE(LoadMachine("", &m).ok());
  std::vector<int> all;
  ASSERT_TRUE(CurrentAffinity(&all).ok());
  if (static_cast<int>(all.size()) < m.pus) GTEST_SKIP() << "this test process is bound already";
  // Asked: bound to the core PlanBinding gives the last local rank.
  EXPECT_EQ(in_child([&] {
              bool bound = false;
              const int n = m.core_count();
              if (!BindThisRank("core", "", n - 1, n, &bound).ok() || !bound) return 1;
              std::vector<int> now;
              if (!CurrentAffinity(&now).ok()) return 2;
              return now == PlanBinding(m, n, BindPolicy::kCore, all)[n - 1] ? 0 : 3;
            }),
            0);
  // Not asked, or bound already: left alone.
  EXPECT_EQ(in_child([&] {
              bool bound = true;
              if (!BindThisRank("", "", 0, 2, &bound).ok() || bound) return 1;
              if (!BindTo({all[0]}).ok()) return 2;
              if (!BindThisRank("core", "", 1, 2, &bound).ok() || bound) return 3;
              std::vector<int> now;
              return CurrentAffinity(&now).ok() && now == std::vector<int>{all[0]} ? 0 : 4;
            }),
            0);
  bool bound = false;
  EXPECT_EQ(BindThisRank("sockets", "", 0, 1, &bound).code(), batonInvalidArgument);
}

// ---- Ring order and link classes ------------------------------------------------

TEST(CommTopologyTest, RingFollowsPackagesAndNumaNodes) {
  const Machine m = Load("32em64t-2n8c2t-pci-wholeio.xml");
  const CommTopology t(Places(m, PlanBinding(m, 4, BindPolicy::kAuto, {})));
  EXPECT_EQ(t.RingOrder(), (std::vector<int>{0, 2, 1, 3}));
  EXPECT_EQ(t.Link(0, 2), LinkClass::kSameNuma);
  EXPECT_EQ(t.Link(0, 1), LinkClass::kCrossPackage);
  EXPECT_EQ(t.Link(3, 3), LinkClass::kSelf);
  EXPECT_EQ(t.hosts(), 1);

  const Machine big = Load("192em64t-24n8c2t.xml");
  const auto plan = PlanBinding(big, 48, BindPolicy::kCore, {});
  const CommTopology b(Places(big, plan));
  const std::vector<int> ring = b.RingOrder();
  int crossings = 0;
  for (size_t i = 0; i < ring.size(); ++i)
    crossings += b.Link(ring[i], ring[(i + 1) % ring.size()]) == LinkClass::kCrossPackage;
  EXPECT_EQ(crossings, 24);  // once into each package: the fewest a ring can do
}

TEST(CommTopologyTest, HostsAndNetworkLinks) {
  const Machine m = Load("power8gpudistances.xml");
  const auto plan = PlanBinding(m, 2, BindPolicy::kCore, {});
  std::vector<RankPlace> places = Places(m, plan, /*host=*/7);
  const std::vector<RankPlace> other = Places(m, plan, /*host=*/3);
  // Ranks 0, 1 on host 7, ranks 2, 3 on host 3, rank 4 on host 7 again.
  places.insert(places.end(), other.begin(), other.end());
  places.push_back(places[0]);
  const CommTopology t(places);
  EXPECT_EQ(t.hosts(), 2);
  EXPECT_EQ(t.host_of(4), 0);
  EXPECT_EQ(t.Link(0, 2), LinkClass::kNetwork);
  EXPECT_EQ(t.Link(2, 3), LinkClass::kSameNuma);
  const std::vector<int> ring = t.RingOrder();
  EXPECT_EQ(ring.size(), 5u);
  EXPECT_EQ(ring[3], 2);  // the second host's ranks come after all of the first's
  // A rank that asked for TCP is a network link even on its own host.
  places[1].tcp = true;
  EXPECT_EQ(CommTopology(places).Link(0, 1), LinkClass::kNetwork);
}

TEST(CommTopologyTest, UnboundRanks) {
  RankPlace one_numa{1, -1, -1, 1, 1, false};
  EXPECT_EQ(CommTopology({one_numa, one_numa}).Link(0, 1), LinkClass::kSameNuma);
  RankPlace two_packages{1, -1, -1, 2, 2, false};
  EXPECT_EQ(CommTopology({two_packages, two_packages}).Link(0, 1), LinkClass::kCrossPackage);
  // Unbound ranks keep rank order in the ring.
  EXPECT_EQ(CommTopology({two_packages, two_packages, two_packages}).RingOrder(),
            (std::vector<int>{0, 1, 2}));
}

}  // namespace
}  // namespace baton
