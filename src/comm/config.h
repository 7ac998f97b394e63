// CommConfig: one communicator's settings, taken from a Settings snapshot
// at creation and checked there (a bad BATON_ALGO fails the creation).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/settings.h"
#include "base/status.h"
#include "transport/channel_set.h"
#include "tuning/algorithm_filter.h"

namespace baton {

struct CommConfig {
  std::string name;        // batonConfig_t.commName ("" without one)
  double timeout_s = 300;  // BATON_TIMEOUT (0 there: kForeverSeconds here)
  bool check = false;      // BATON_CHECK
  // BATON_REGISTERED_MIN_BYTES: smaller calls on registered buffers take
  // the ordinary path (launch/call.cc); kSizeFromMachine: decided by the
  // communicator (Communicator::registered_min_bytes). Ranks that differ
  // still agree per call (then on the ordinary path).
  uint64_t registered_min_bytes = kSizeFromMachine;
  // BATON_CMA_COLL_MIN_BYTES: smaller calls on ordinary buffers take the
  // slot path even where the single-copy one is open (launch/call.cc).
  uint64_t cma_coll_min_bytes = 1 << 20;
  // BATON_CMA_COLL: -1 single copy unless a host has more ranks than cores
  // (measured slower there, docs/performance.md), 1 always, 0 never.
  int cma_coll = -1;
  // BATON_CMA_COLL_MIN_SPEED: with cma_coll -1, the single-copy path also
  // needs the kernel's copy at this percentage of memcpy's rate or more
  // (transport/cma.h, CmaCopySpeed); 0 skips the measurement.
  int cma_coll_min_speed = 60;
  // BATON_COPY_IN (-1 where ranks outnumber cores, 1 always, 0 never),
  // _MIN_BYTES, _MAX_BYTES: which allreduces on ordinary buffers of one host
  // take the copy-in path (comm/copy_in.cc, launch/call.cc).
  int copy_in = -1;
  uint64_t copy_in_min_bytes = 16 << 10;
  uint64_t copy_in_max_bytes = 0;  // 0: no limit
  // BATON_LINES_MAX_BYTES: allreduces of at most this many bytes between
  // ranks that all share memory run on the lines (comm/lines.cc; 0: none;
  // kSizeFromMachine: LinesMaxBytes's default, which the communicator
  // resolves with the cost model).
  uint64_t lines_max_bytes = kSizeFromMachine;
  int64_t flight_recorder = 64;   // BATON_FLIGHT_RECORDER (0: no file)
  std::string trace_file;         // BATON_TRACE_FILE (empty: no timeline)
  int64_t trace_events = 100000;  // BATON_TRACE_EVENTS
  int trace_rank = -1;            // BATON_RANK, the timeline's track (-1: the comm rank)
  std::string trace_list;         // BATON_TRACE_LIST (set by batonrun)
  TransportConfig transport;      // BATON_TRANSPORT, BATON_BUFFSIZE, BATON_NSOCKS_PERPEER, CMA
  size_t chunk_bytes = 0;         // BATON_CHUNKSIZE (0: the cost model chooses)
  size_t rhd_switch_bytes = 0;    // BATON_RHD_SWITCH (0: the cost model chooses)
  int net_mbps = 0;               // BATON_NET_MBPS (0: the interface's reported speed)
  bool calibrate = false;         // BATON_CALIBRATE
  std::string calibration_cache;  // BATON_CALIBRATION_CACHE
  std::string topo_dump_file;     // BATON_TOPO_DUMP_FILE
  AlgorithmFilter algorithms;     // BATON_ALGO
  std::string socket_ifname;      // BATON_SOCKET_IFNAME
  std::string hostid;             // BATON_HOSTID
  std::string topo_file;          // BATON_TOPO_FILE
  std::string bind;               // BATON_BIND
  int64_t spin_us = 200;          // BATON_SPIN_US
  bool spin_yield = true;         // BATON_SPIN_YIELD
  int64_t spin_yield_ns = -1;     // BATON_SPIN_YIELD_NS (-1: decided by oversubscription)

  // Takes the communicator's values out of `settings`, clamping sizes to
  // what the transports can use; fails only for a malformed BATON_ALGO.
  static Status FromSettings(const Settings& settings, CommConfig* out);
  // The rank uses the GPU with PCI bus id `gpu_pci` (none when empty): the
  // RDMA NICs are ranked by their distance from it in the machine model
  // (transport.rdma.gpu_nics). Only then is the model loaded with its PCI
  // devices, which costs milliseconds.
  void PlaceGpu(const std::string& gpu_pci);
};

// Not included from topology/machine.h: its names (Placement) would clash
// with those of the layers above comm/ that include this header.
struct Machine;

// The RDMA NICs of `machine` as the transport ranks them for a rank using
// the GPU `gpu_pci`: nearest first, the distance growing with the path
// class and then the PCIe bridges crossed. Empty without such a GPU.
std::vector<rdma::NicPreference> GpuNicPreferences(const Machine& machine,
                                                   const std::string& gpu_pci);

}  // namespace baton
