// Choosing and connecting the RDMA transport: device discovery with
// BATON_IB_HCA (NCCL_IB_HCA's syntax), the choice of the NIC nearest the
// rank's GPU or else its NUMA node, whether this rank offers RDMA at all, and the set-up
// of RdmaChannels over the bootstrap's authenticated sockets.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/deadline.h"
#include "base/fd.h"
#include "base/status.h"
#include "bootstrap/unique_id.h"
#include "transport/channel.h"
#include "transport/rdma/verbs.h"
#include "transport/user_memory.h"

namespace baton::rdma {

// A NIC's distance from the GPU the rank uses, from the topology model
// (comm/ computes it: transport/ does not see topology/); smaller is nearer.
struct NicPreference {
  std::string name;  // the verbs device, "mlx5_0"
  int distance = 0;
};

struct RdmaConfig {
  enum class Mode { kOff, kAuto, kForce };
  Mode mode = Mode::kAuto;       // BATON_TRANSPORT: tcp (off), auto, ib (force)
  std::string hca;               // BATON_IB_HCA
  int gid_index = -1;            // BATON_IB_GID_INDEX (-1: choose)
  int traffic_class = 0;         // BATON_IB_TC
  int qps = 1;                   // BATON_IB_QPS_PER_PEER
  int inline_bytes = 128;        // inline writes asked of each queue pair (no variable)
  bool emulate = false;          // BATON_IB_EMULATE: the emulated device (tests)
  uint64_t zcopy_min = 1 << 20;  // BATON_IB_ZCOPY_MIN (0: never in place)
  uint32_t slots = 8;
  uint64_t buffsize = 4 << 20;  // per direction, split into the slots
  // The rank's GPU (its PCI bus id; empty for a rank without one) and the
  // RDMA NICs hwloc sees, nearest to it first; empty: NUMA node decides.
  std::string gpu_pci;
  std::vector<NicPreference> gpu_nics;
};

// BATON_IB_HCA: "mlx5_0:1,mlx5_1" (prefixes, optional port), "^mlx5_0"
// (all but), "=mlx5_0" (exact names), "^=mlx5_0". Empty: every device.
struct HcaFilter {
  struct Entry {
    std::string name;
    int port = -1;  // -1: any
  };
  bool exclude = false;
  bool exact = false;
  std::vector<Entry> entries;
};
HcaFilter ParseHcaFilter(const std::string& spec);
bool HcaMatches(const HcaFilter& filter, const DeviceInfo& device);

// Of `devices`, the active ports the filter admits: the one nearest the
// rank's GPU (`gpu_nics`; devices not in it come after those that are),
// then the one on `numa_node`, then the fastest, then the first listed.
// False, with `why`, when none is usable.
bool ChooseDevice(const std::vector<DeviceInfo>& devices, const HcaFilter& filter,
                  const std::vector<NicPreference>& gpu_nics, int numa_node, DeviceInfo* out,
                  std::string* why);

// The provider the config asks for: the emulation, or libibverbs (null,
// with `why`, when Baton was built without it).
std::unique_ptr<Provider> MakeProvider(const RdmaConfig& config, std::string* why);

// Whether this rank offers RDMA to its peers on other hosts (PeerInfo::rdma).
// Without a usable device: false, and one INFO line per process saying why.
bool RdmaOffered(const RdmaConfig& config, int numa_node);

// BATON_TRANSPORT=ib: a batonSystemError naming what is missing when this
// rank has no usable device; Ok otherwise (and for the other modes).
Status CheckForcedRdma(const RdmaConfig& config, int numa_node);

// The set-up message, one per direction of each RDMA pair: versioned,
// fixed size, sealed with the job secret over both ranks' numbers.
struct RdmaHello;
// Builds and checks hellos (pure: the unit tests reach the checks).
std::vector<uint8_t> MakeRdmaHello(const UniqueIdData& id, int from, int to,
                                   const struct RdmaEndpoint& endpoint);
Status CheckRdmaHello(const UniqueIdData& id, int from, int to, const std::vector<uint8_t>& bytes,
                      struct RdmaEndpoint* out);
size_t RdmaHelloBytes();

// Creates the channels to `peers` (each with its set-up socket in
// `sockets[i]`) on one opened device, exchanges the hellos, connects.
struct RdmaPeers {
  const UniqueIdData* id = nullptr;
  int rank = 0;
  std::vector<int> peers;
  std::vector<int> sockets;  // the set-up socket of each peer
  std::vector<const std::atomic<bool>*> closed;
  int numa_node = -1;
  Deadline deadline;
  UserMemory* user_memory = nullptr;  // registered buffers (zero-copy); may be null
};
Status ConnectRdmaPeers(const RdmaConfig& config, const RdmaPeers& peers,
                        std::vector<std::unique_ptr<Channel>>* channels);

}  // namespace baton::rdma
