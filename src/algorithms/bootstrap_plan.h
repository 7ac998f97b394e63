// The plan of a communicator's creation, as messages per round: pure, so
// that the simulator (exec/simulator.h) can run it at sizes no machine here
// can launch. PlanStarMesh is how Baton created a communicator before
// issue 19; PlanHierarchical is the host-leader rendezvous it runs now, with
// the lazy connections of docs/scaling.md's plan.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace baton {

// The bootstrap root (the process serving the unique id) in a PlanMessage.
inline constexpr int kPlanRoot = -1;

// In one round, `from` sends `bytes` to `to` (ranks, or kPlanRoot). With
// `carries_table`, the message carries every PeerInfo its sender knew at the
// start of the round (and `bytes` says how many bytes that is).
struct PlanMessage {
  int32_t from = 0;
  int32_t to = 0;
  uint64_t bytes = 0;
  bool carries_table = false;
};

struct PlanRound {
  std::string what;
  std::vector<PlanMessage> messages;
};

struct BootstrapPlan {
  std::string name;
  int nranks = 0;
  int hosts = 0;
  std::vector<PlanRound> rounds;
  // Transport connections each rank makes at creation: every peer for the
  // star mesh, the ring neighbours for the hierarchical plan (the rest are
  // made when a schedule first needs them).
  std::vector<uint32_t> eager_connections;
  // Connections a rank may have open at once with the root, by plan.
  int root_window = 0;
};

// Sizes a plan works with: host h holds ranks [h * ranks_per_host, ...).
struct PlanShape {
  int nranks = 0;
  int ranks_per_host = 1;
  uint64_t peer_info_bytes = 0;  // sizeof(PeerInfo)
  uint64_t address_bytes = 0;    // sizeof(WireAddr): a registration
};

// Before: every rank registers with the root and gets the whole table back
// (root fan-in n), then connects to every other rank.
BootstrapPlan PlanStarMesh(const PlanShape& shape);

// What Baton builds (bootstrap/host_stage.h): ranks register with their
// host's leader (the first to bind a host-local name), leaders send their
// hosts' hellos to the root, which reads `root_window` of them at once; when
// all are in, the root sends the table down a tree over the leaders
// (base/table_tree.h, in host order; one round per level: about
// log2(hosts)), and each leader hands it to its ranks; each rank connects to
// its ring neighbours (the rest on first use).
BootstrapPlan PlanHierarchical(const PlanShape& shape, int root_window);

}  // namespace baton
