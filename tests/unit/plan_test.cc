// The creation plans of algorithms/bootstrap_plan.h, run by the simulator at 1k to 16k
// ranks: every rank ends up with every rank's PeerInfo, the root's fan-in
// and the rounds stay within the plan's bounds, and a plan that loses a
// message is caught.
#include <gtest/gtest.h>

#include <cmath>

#include "algorithms/bootstrap_plan.h"
#include "base/table_tree.h"
#include "bootstrap/peer_info.h"
#include "exec/simulator.h"

namespace baton {
namespace {

PlanShape Shape(int nranks, int ranks_per_host) {
  return PlanShape{nranks, ranks_per_host, sizeof(PeerInfo), sizeof(WireAddr)};
}

TEST(PlanTest, StarMeshFansInEveryRankAtTheRoot) {
  for (int n : {1, 2, 7, 1024, 4096}) {
    BootstrapStats st;
    ASSERT_TRUE(SimulateBootstrap(PlanStarMesh(Shape(n, 8)), sizeof(PeerInfo), &st).ok()) << n;
    EXPECT_EQ(st.rounds, 2u);
    EXPECT_EQ(st.root_fan_in, n);
    EXPECT_EQ(st.eager_connections, static_cast<uint32_t>(n - 1));
    // The root sends the whole table to every rank.
    EXPECT_EQ(st.root_bytes, uint64_t(n) * sizeof(PeerInfo) * (n + 1));
  }
}

TEST(PlanTest, HierarchicalIsLogarithmicWithBoundedFanIn) {
  const int window = 256;
  for (int n : {1, 2, 3, 9, 1000, 1024, 2048, 4096, 8192, 12345, 16384}) {
    for (int rph : {1, 8}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " ranks per host " + std::to_string(rph));
      const BootstrapPlan plan = PlanHierarchical(Shape(n, rph), window);
      BootstrapStats st;
      const Status ok = SimulateBootstrap(plan, sizeof(PeerInfo), &st);
      ASSERT_TRUE(ok.ok()) << ok.message();
      const int hosts = (n + rph - 1) / rph;
      // The tree over the leaders has floor(log2(hosts + 1)) levels.
      const int levels = static_cast<int>(std::floor(std::log2(hosts + 1)));
      const int windows = (hosts + window - 1) / window;
      // local, windows, the tree's levels, hand-out.
      EXPECT_EQ(st.rounds, static_cast<size_t>(1 + windows + levels + 1));
      EXPECT_LE(st.root_fan_in, std::min(window, hosts));
      EXPECT_LE(st.rank_fan_in, std::max(1, rph - 1));
      EXPECT_LE(st.eager_connections, 2u);
      // A leader talks to its ranks, the root, its parent and its children.
      EXPECT_LE(st.bootstrap_peers, static_cast<size_t>(rph - 1 + 1 + 1 + kTableTreeFanout));
      // The root sends the table to kTableTreeFanout leaders, not to every rank.
      EXPECT_LE(st.root_bytes, uint64_t(n) * sizeof(PeerInfo) * (kTableTreeFanout + 1));
    }
  }
}

TEST(PlanTest, LostMessageIsCaught) {
  BootstrapPlan plan = PlanHierarchical(Shape(64, 8), 256);
  // Drop one message of the tree: its receiver misses the table.
  for (auto& round : plan.rounds) {
    if (round.what.find("tree") != std::string::npos) {
      round.messages.pop_back();
      break;
    }
  }
  BootstrapStats st;
  const Status st_ok = SimulateBootstrap(plan, sizeof(PeerInfo), &st);
  EXPECT_FALSE(st_ok.ok());
}

TEST(PlanTest, WrongSizeIsCaught) {
  BootstrapPlan plan = PlanStarMesh(Shape(16, 8));
  plan.rounds[1].messages[3].bytes += 1;
  BootstrapStats st;
  EXPECT_FALSE(SimulateBootstrap(plan, sizeof(PeerInfo), &st).ok());
}

}  // namespace
}  // namespace baton
