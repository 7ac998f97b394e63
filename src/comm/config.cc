#include "comm/config.h"

#include <algorithm>

#include "base/log.h"
#include "topology/machine.h"

namespace baton {

Status CommConfig::FromSettings(const Settings& s, CommConfig* out) {
  CommConfig c;
  c.timeout_s = TimeoutSeconds(s);
  c.check = s.check;
  c.flight_recorder = s.flight_recorder;
  c.trace_file = s.trace_file;
  c.trace_events = s.trace_events;
  c.trace_list = s.trace_list;
  if (int64_t rank = -1; ParseInt(s.rank, &rank) && rank >= 0 && rank < (int64_t{1} << 30))
    c.trace_rank = static_cast<int>(rank);
  const std::string& t = s.transport;
  if (t == "tcp" || t == "TCP" || t == "net") {
    c.transport.force_tcp = true;
    c.transport.rdma.mode = rdma::RdmaConfig::Mode::kOff;
  } else if (t == "ib" || t == "IB" || t == "rdma") {
    c.transport.rdma.mode = rdma::RdmaConfig::Mode::kForce;
  } else if (t == "shm" || t == "SHM") {
    c.transport.shm_only = true;
  } else if (t != "auto") {
    BATON_WARN(kLogEnv, "ignoring BATON_TRANSPORT=%s (use shm, tcp, ib or auto)", t.c_str());
  }
  c.transport.rdma.hca = s.ib_hca;
  c.transport.rdma.gid_index = static_cast<int>(std::clamp<int64_t>(s.ib_gid_index, -1, 255));
  c.transport.rdma.traffic_class = static_cast<int>(std::clamp<int64_t>(s.ib_tc, 0, 255));
  c.transport.rdma.qps = static_cast<int>(std::clamp<int64_t>(s.ib_qps_per_peer, 1, 8));
  c.transport.rdma.emulate = s.ib_emulate;
  c.transport.rdma.zcopy_min = s.ib_zcopy_min;
  c.transport.buffsize = std::max<uint64_t>(s.buffsize, 64 << 10);
  c.transport.tcp_sockets =
      static_cast<int>(std::clamp<int64_t>(s.nsocks_perpeer, 1, kMaxSocketsPerPeer));
  c.transport.rdma.buffsize = c.transport.buffsize;
  c.transport.cma = s.cma;
  c.transport.runtime_connect = s.runtime_connect;
  c.transport.shm_stream = static_cast<int>(std::clamp<int64_t>(s.shm_stream, -1, 1));
  c.transport.cma_threshold = s.cma_threshold;
  c.cma_coll = static_cast<int>(std::clamp<int64_t>(s.cma_coll, -1, 1));
  c.transport.cma_coll = c.cma_coll != 0;
  c.cma_coll_min_bytes = s.cma_coll_min_bytes;
  c.cma_coll_min_speed = static_cast<int>(std::clamp<int64_t>(s.cma_coll_min_speed, 0, 100000));
  c.registered_min_bytes = s.registered_min_bytes;
  c.copy_in = static_cast<int>(std::clamp<int64_t>(s.copy_in, -1, 1));
  c.copy_in_min_bytes = s.copy_in_min_bytes;
  c.copy_in_max_bytes = s.copy_in_max_bytes;
  c.lines_max_bytes = s.lines_max_bytes;
  c.chunk_bytes = s.chunksize == 0 ? 0 : std::max<uint64_t>(s.chunksize, 4096);
  c.rhd_switch_bytes = s.rhd_switch;
  c.net_mbps = s.net_mbps;
  BATON_RETURN_IF_ERROR(AlgorithmFilter::Parse(s.algo, &c.algorithms));
  c.socket_ifname = s.socket_ifname;
  c.hostid = s.hostid;
  c.topo_file = s.topo_file;
  c.bind = s.bind;
  c.calibrate = s.calibrate;
  c.calibration_cache = s.calibration_cache;
  c.topo_dump_file = s.topo_dump_file;
  c.spin_us = s.spin_us;
  c.spin_yield = s.spin_yield;
  c.spin_yield_ns = s.spin_yield_ns;
  *out = std::move(c);
  return Status::Ok();
}

std::vector<rdma::NicPreference> GpuNicPreferences(const Machine& machine,
                                                   const std::string& gpu_pci) {
  std::vector<rdma::NicPreference> out;
  for (const NicDistance& d : RdmaNicsNearGpu(machine, gpu_pci)) {
    // Bridges only order NICs of one path class (-1: none in common).
    const int bridges = std::clamp(d.bridges, 0, 99);
    out.push_back({d.name, static_cast<int>(d.path) * 100 + (d.bridges < 0 ? 99 : bridges)});
  }
  return out;
}

void CommConfig::PlaceGpu(const std::string& gpu_pci) {
  transport.rdma.gpu_pci = gpu_pci;
  transport.rdma.gpu_nics.clear();
  if (gpu_pci.empty() || transport.rdma.mode == rdma::RdmaConfig::Mode::kOff) return;
  const Machine* machine = nullptr;
  if (const Status st = CachedMachine(topo_file, &machine, /*with_devices=*/true); !st.ok()) {
    BATON_WARN(kLogInit, "no machine topology (%s): the RDMA NIC is not chosen by GPU",
               st.message().c_str());
    return;
  }
  transport.rdma.gpu_nics = GpuNicPreferences(*machine, gpu_pci);
  if (transport.rdma.gpu_nics.empty())
    BATON_INFO(kLogInit, "GPU %s: hwloc places no RDMA NIC near it (%s): NUMA node decides",
               gpu_pci.c_str(), machine->source.c_str());
}

}  // namespace baton
