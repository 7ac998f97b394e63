// PeerInfo: what each rank tells all others at the rendezvous.
#pragma once

#include <cstdint>

#include "base/socket.h"

namespace baton {

// Plain bytes: the rendezvous server sends the table of all ranks as is.
struct PeerInfo {
  int32_t rank;
  int32_t pid;
  uint64_t host_hash;
  WireAddr listen_addr;  // where this rank accepts its peers' connections
  char hostname[64];
  uint8_t wants_tcp;        // BATON_TRANSPORT=tcp on this rank
  uint8_t tcp_sockets;      // BATON_NSOCKS_PERPEER: TCP sockets it wants per peer
  uint8_t rdma;             // offers RDMA to ranks on other hosts (a usable device)
  uint8_t runtime_connect;  // BATON_RUNTIME_CONNECT=1 (lazy only when every rank says so)
  uint8_t shm_only;         // BATON_TRANSPORT=shm on this rank: every peer on its host
  // Where the rank runs (topology/machine.h): the package and NUMA node
  // holding its CPUs (-1: unbound or spanning several), and its host's size.
  int16_t package;
  int16_t numa;
  int16_t packages;
  int16_t numa_nodes;
  int32_t cores;
  int32_t nic_mbps;       // speed of the interface it listens on (0: unknown)
  uint64_t machine_hash;  // MachineHash: ranks with equal ones share cores
  int32_t l2_kib;         // Machine::l2_bytes in KiB (0: unknown)
  int32_t llc_kib;        // Machine::llc_bytes in KiB (0: unknown)
};

}  // namespace baton
