#include "transport/rdma/rdma_setup.h"


#include <algorithm>
#include <climits>
#include <cstring>
#include <mutex>

#include "base/log.h"
#include "base/socket.h"
#include "bootstrap/handshake.h"
#include "transport/rdma/emulated_verbs.h"
#include "transport/rdma/rdma_channel.h"

namespace baton::rdma {

HcaFilter ParseHcaFilter(const std::string& spec) {
  HcaFilter f;
  size_t i = 0;
  if (i < spec.size() && spec[i] == '^') {
    f.exclude = true;
    ++i;
  }
  if (i < spec.size() && spec[i] == '=') {
    f.exact = true;
    ++i;
  }
  while (i < spec.size()) {
    size_t end = spec.find(',', i);
    if (end == std::string::npos) end = spec.size();
    std::string item = spec.substr(i, end - i);
    i = end + 1;
    if (item.empty()) continue;
    HcaFilter::Entry e;
    const size_t colon = item.find(':');
    e.name = item.substr(0, colon);
    if (colon != std::string::npos) {
      const std::string port = item.substr(colon + 1);
      e.port = !port.empty() && std::all_of(port.begin(), port.end(), ::isdigit)
                   ? std::stoi(port.substr(0, 6))
                   : -1;
    }
    f.entries.push_back(e);
  }
  return f;
}

bool HcaMatches(const HcaFilter& f, const DeviceInfo& d) {
  if (f.entries.empty()) return true;
  bool listed = false;
  for (const HcaFilter::Entry& e : f.entries) {
    const bool name_ok = f.exact ? d.name == e.name : d.name.compare(0, e.name.size(), e.name) == 0;
    if (name_ok && (e.port < 0 || e.port == d.port)) listed = true;
  }
  return listed != f.exclude;
}

bool ChooseDevice(const std::vector<DeviceInfo>& devices, const HcaFilter& filter,
                  const std::vector<NicPreference>& gpu_nics, int numa_node, DeviceInfo* out,
                  std::string* why) {
  std::vector<const DeviceInfo*> usable;
  int inactive = 0, filtered = 0;
  for (const DeviceInfo& d : devices) {
    if (!HcaMatches(filter, d)) {
      ++filtered;
    } else if (!d.active) {
      ++inactive;
    } else {
      usable.push_back(&d);
    }
  }
  if (usable.empty()) {
    if (devices.empty())
      *why = "no RDMA device: ibv_get_device_list found none";
    else
      *why = "no usable RDMA port: " + std::to_string(devices.size()) + " found, " +
             std::to_string(filtered) + " excluded by BATON_IB_HCA, " + std::to_string(inactive) +
             " not active";
    return false;
  }
  // Nearest first. With a GPU, the NIC with the shortest PCIe path to it:
  // GPU Direct and the staging copies both cross that path, and NICs under
  // the GPU's own switch keep the traffic off the CPU's root complex. Then
  // a NIC on the rank's NUMA node saves a socket crossing per byte; then
  // the fastest; stable, so the listing order breaks ties.
  auto gpu_distance = [&](const DeviceInfo* d) {
    for (const NicPreference& p : gpu_nics)
      if (p.name == d->name) return p.distance;
    return INT_MAX;  // hwloc did not see it: after every NIC it placed
  };
  std::stable_sort(usable.begin(), usable.end(), [&](const DeviceInfo* a, const DeviceInfo* b) {
    const int a_gpu = gpu_distance(a), b_gpu = gpu_distance(b);
    if (a_gpu != b_gpu) return a_gpu < b_gpu;
    const bool a_near = numa_node >= 0 && a->numa_node == numa_node;
    const bool b_near = numa_node >= 0 && b->numa_node == numa_node;
    if (a_near != b_near) return a_near;
    return a->speed_mbps > b->speed_mbps;
  });
  *out = *usable.front();
  return true;
}

std::unique_ptr<Provider> MakeProvider(const RdmaConfig& config, std::string* why) {
  if (config.emulate) return MakeEmulatedProvider();
  std::unique_ptr<Provider> p = MakeIbverbsProvider();
  if (!p) *why = "Baton was built without libibverbs (install libibverbs-dev and rebuild)";
  return p;
}

namespace {

// Ok with the chosen device (and, when asked, the provider that listed
// it, to open it), or why there is none.
bool FindDevice(const RdmaConfig& config, int numa_node, DeviceInfo* device, std::string* why,
                std::unique_ptr<Provider>* provider_out = nullptr) {
  std::unique_ptr<Provider> provider = MakeProvider(config, why);
  if (!provider) return false;
  std::vector<DeviceInfo> devices;
  const Status st = provider->ListDevices(&devices);
  if (!st.ok()) {
    *why = st.message();
    return false;
  }
  if (!ChooseDevice(devices, ParseHcaFilter(config.hca), config.gpu_nics, numa_node, device, why))
    return false;
  if (provider_out != nullptr) *provider_out = std::move(provider);
  return true;
}

// For the INFO line: what made ChooseDevice take `device`.
std::string WhyThisDevice(const RdmaConfig& config, const DeviceInfo& device, int numa_node) {
  for (const NicPreference& p : config.gpu_nics)
    if (p.name == device.name) return "the nearest to GPU " + config.gpu_pci;
  if (!config.gpu_pci.empty() && config.gpu_nics.empty()) {
    const std::string fallback = "no NIC placed near GPU " + config.gpu_pci + " by hwloc, so ";
    if (numa_node >= 0 && device.numa_node == numa_node)
      return fallback + "on NUMA node " + std::to_string(numa_node);
    return fallback + "the fastest";
  }
  if (numa_node >= 0 && device.numa_node == numa_node)
    return "on the rank's NUMA node " + std::to_string(numa_node);
  return "the fastest";
}

}  // namespace

bool RdmaOffered(const RdmaConfig& config, int numa_node) {
  if (config.mode == RdmaConfig::Mode::kOff) return false;
  DeviceInfo device;
  std::string why;
  if (FindDevice(config, numa_node, &device, &why)) return true;
  static std::once_flag logged;
  std::call_once(logged, [&] {
    BATON_INFO(kLogNet, "RDMA not used (%s): TCP carries the traffic between hosts", why.c_str());
  });
  return false;
}

Status CheckForcedRdma(const RdmaConfig& config, int numa_node) {
  if (config.mode != RdmaConfig::Mode::kForce) return Status::Ok();
  DeviceInfo device;
  std::string why;
  if (FindDevice(config, numa_node, &device, &why)) return Status::Ok();
  return SystemError("BATON_TRANSPORT=ib: " + why);
}

// ---- The hello ----

struct RdmaHello {
  uint32_t magic;
  uint32_t version;
  uint64_t comm_id;
  int32_t from;
  int32_t to;
  RdmaEndpoint endpoint;
  uint8_t mac[32];
};

namespace {
constexpr uint32_t kHelloMagic = 0x42544e49;  // "BTNI"
// 2: the reply record of zero-copy offers follows the clear-to-send words.
constexpr uint32_t kHelloVersion = 2;
constexpr char kHelloLabel[] = "baton rdma hello v1";

void SealHello(const UniqueIdData& id, const RdmaHello& h, uint8_t* mac) {
  uint8_t buffer[sizeof(kHelloLabel) + sizeof(RdmaHello)];
  memcpy(buffer, kHelloLabel, sizeof(kHelloLabel));
  memcpy(buffer + sizeof(kHelloLabel), &h, offsetof(RdmaHello, mac));
  const Mac sealed = JobHmac(id, buffer, sizeof(kHelloLabel) + offsetof(RdmaHello, mac));
  memcpy(mac, sealed.bytes, kMacBytes);
}
}  // namespace

size_t RdmaHelloBytes() {
  return sizeof(RdmaHello);
}

std::vector<uint8_t> MakeRdmaHello(const UniqueIdData& id, int from, int to,
                                   const RdmaEndpoint& endpoint) {
  RdmaHello h{};
  h.magic = kHelloMagic;
  h.version = kHelloVersion;
  h.comm_id = id.comm_id;
  h.from = from;
  h.to = to;
  h.endpoint = endpoint;
  SealHello(id, h, h.mac);
  std::vector<uint8_t> out(sizeof(h));
  memcpy(out.data(), &h, sizeof(h));
  return out;
}

Status CheckRdmaHello(const UniqueIdData& id, int from, int to, const std::vector<uint8_t>& bytes,
                      RdmaEndpoint* out) {
  RdmaHello h;
  if (bytes.size() != sizeof(h)) return InvalidUsage("RDMA hello of the wrong size");
  memcpy(&h, bytes.data(), sizeof(h));
  if (h.magic != kHelloMagic || h.version != kHelloVersion)
    return InvalidUsage("RDMA hello from rank " + std::to_string(from) +
                        " is not this version's (another version of Baton?)");
  uint8_t mac[32];
  SealHello(id, h, mac);
  if (!SecretsEqual(mac, h.mac, sizeof(mac)) || h.comm_id != id.comm_id)
    return InvalidUsage("RDMA hello from rank " + std::to_string(from) +
                        " is not sealed by this communicator's secret");
  if (h.from != from || h.to != to)
    return InvalidUsage("RDMA hello addressed from " + std::to_string(h.from) + " to " +
                        std::to_string(h.to) + " arrived on the socket of " + std::to_string(from) +
                        " to " + std::to_string(to));
  if (h.endpoint.nqps < 1 || h.endpoint.nqps > kMaxQpsPerPeer)
    return InvalidUsage("RDMA hello from rank " + std::to_string(from) +
                        " has a bad queue pair count");
  *out = h.endpoint;
  return Status::Ok();
}

Status ConnectRdmaPeers(const RdmaConfig& config, const RdmaPeers& peers,
                        std::vector<std::unique_ptr<Channel>>* channels) {
  std::string why;
  DeviceInfo device;
  std::unique_ptr<Provider> provider;
  if (!FindDevice(config, peers.numa_node, &device, &why, &provider))
    return SystemError("RDMA set-up: " + why);
  std::unique_ptr<Context> opened;
  BATON_RETURN_IF_ERROR(provider->Open(device, config.gid_index, config.traffic_class, &opened)
                            .WithContext("RDMA device " + device.name));
  std::shared_ptr<Context> context(std::move(opened));
  RdmaChannel::Options options;
  options.slots = std::clamp<uint32_t>(config.slots, 2, kMaxSlots);
  options.slot_bytes = static_cast<uint32_t>(
      std::clamp<uint64_t>(config.buffsize / options.slots / 4096 * 4096, 4096, 8 << 20));
  options.qps = std::clamp(config.qps, 1, kMaxQpsPerPeer);
  options.inline_bytes = std::clamp(config.inline_bytes, 0, kMaxInlineBytes);
  if (peers.user_memory != nullptr && config.zcopy_min > 0) {
    options.zcopy_min = config.zcopy_min;
    options.user_memory = peers.user_memory;
    options.mr_cache = std::make_shared<UserMrCache>(context, kUserMrCacheEntries);
    UserMrCache::Watch(options.mr_cache, peers.user_memory);
  }
  const size_t n = peers.peers.size();
  std::vector<std::unique_ptr<RdmaChannel>> made(n);
  for (size_t i = 0; i < n; ++i) {
    BATON_RETURN_IF_ERROR(
        RdmaChannel::Create(context, options, peers.peers[i], peers.closed[i], &made[i]));
    const std::vector<uint8_t> hello =
        MakeRdmaHello(*peers.id, peers.rank, peers.peers[i], made[i]->endpoint());
    // Every hello goes out before any is read: each is far smaller than a
    // socket buffer, so no order of peers can deadlock.
    BATON_RETURN_IF_ERROR(
        SendAll(peers.sockets[i], hello.data(), hello.size(), peers.deadline)
            .WithContext("RDMA set-up with rank " + std::to_string(peers.peers[i])));
  }
  for (size_t i = 0; i < n; ++i) {
    std::vector<uint8_t> hello(RdmaHelloBytes());
    BATON_RETURN_IF_ERROR(
        RecvAll(peers.sockets[i], hello.data(), hello.size(), peers.deadline)
            .WithContext("RDMA set-up with rank " + std::to_string(peers.peers[i])));
    RdmaEndpoint remote;
    BATON_RETURN_IF_ERROR(CheckRdmaHello(*peers.id, peers.peers[i], peers.rank, hello, &remote));
    BATON_RETURN_IF_ERROR(made[i]->Connect(remote));
  }
  // Both ends connected their queue pairs before either writes: a write to
  // a queue pair not yet in RTR would be dropped (or fail).
  for (size_t i = 0; i < n; ++i) {
    uint8_t ready = 1;
    BATON_RETURN_IF_ERROR(SendAll(peers.sockets[i], &ready, 1, peers.deadline));
  }
  for (size_t i = 0; i < n; ++i) {
    uint8_t ready = 0;
    BATON_RETURN_IF_ERROR(RecvAll(peers.sockets[i], &ready, 1, peers.deadline));
    if (ready != 1) return InternalError("RDMA set-up: a bad ready byte");
  }
  BATON_INFO(kLogNet,
             "RDMA over %s port %d (%s, %s; %s): %zu peers, %d QPs each, %u slots of %u bytes",
             device.name.c_str(), device.port, provider->name().c_str(),
             device.ethernet ? "RoCE" : "InfiniBand",
             WhyThisDevice(config, device, peers.numa_node).c_str(), n, options.qps, options.slots,
             options.slot_bytes);
  channels->clear();
  for (auto& ch : made) channels->push_back(std::move(ch));
  return Status::Ok();
}

}  // namespace baton::rdma
