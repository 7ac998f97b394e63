// scaling_plan: the figures of docs/scaling.md. Runs the creation plans of
// algorithms/bootstrap_plan.h in the simulator (exec/simulator.h) for 1k to 16k ranks
// and counts, from the schedules the collectives really build, how many
// peers a rank talks to and in how many steps: the connections a rank would
// hold if they were made on first use. The init time is predicted from an
// alpha-beta model whose figures are flags (docs/scaling.md measures them).
//
//   scaling_plan [--ranks-per-host 8] [--root-window 256] [--alpha-us 50]
//                [--beta-gbps 1] [--connect-us 100]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "algorithms/barrier.h"
#include "algorithms/bootstrap_plan.h"
#include "algorithms/pairwise.h"
#include "algorithms/rhd.h"
#include "algorithms/ring.h"
#include "algorithms/tree.h"
#include "bootstrap/peer_info.h"
#include "exec/simulator.h"

namespace {

using baton::BootstrapStats;
using baton::CollArgs;
using baton::Schedule;

struct Model {
  double alpha_us = 50;     // one bootstrap message: latency + handling
  double beta_gbps = 1;     // bootstrap bytes per second (GB/s)
  double connect_us = 100;  // one authenticated connection, both sides
};

double PredictMs(const baton::BootstrapPlan& plan, const BootstrapStats& stats, const Model& m) {
  double us = 0;
  for (const auto& round : plan.rounds) {
    // Ranks move their messages in parallel, each sending its own one after
    // another (a leader passes the table to each child in turn); the root
    // handles all of its own, in and out, one after another.
    uint64_t most = 0, root_bytes = 0;
    size_t root_messages = 0;
    std::map<int, uint64_t> sent;
    for (const auto& msg : round.messages) {
      most = std::max(most, sent[msg.from] += msg.bytes);
      if (msg.to == baton::kPlanRoot || msg.from == baton::kPlanRoot) {
        ++root_messages;
        root_bytes += msg.bytes;
      }
    }
    us += m.alpha_us * std::max<size_t>(1, root_messages) +
          std::max(most, root_bytes) / (m.beta_gbps * 1e3);
  }
  return (us + stats.eager_connections * m.connect_us) / 1e3;
}

// The most distinct peers and ops of one rank in `build`'s schedules,
// over a sample of ranks.
void PeersOf(int n, const std::function<void(const CollArgs&, Schedule*)>& build, size_t* peers,
             size_t* steps) {
  std::vector<int> ring(n);
  for (int r = 0; r < n; ++r) ring[r] = r;
  std::vector<float> send(n), recv(n);
  *peers = *steps = 0;
  for (int rank : {0, 1, n / 2 + 1, n - 1}) {
    CollArgs a;
    a.send = send.data();
    a.recv = recv.data();
    a.count = n;
    a.rank = rank;
    a.nranks = n;
    a.ring = &ring;
    Schedule s;
    build(a, &s);
    std::vector<int> used;
    for (const auto& op : s.ops)
      if (op.kind != baton::Op::Kind::kCopy) used.push_back(op.peer);
    std::sort(used.begin(), used.end());
    *peers = std::max<size_t>(*peers, std::unique(used.begin(), used.end()) - used.begin());
    *steps = std::max(*steps, s.ops.size());
  }
}

}  // namespace

int main(int argc, char** argv) {
  int rph = 8, window = 256;
  Model model;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const double v = atof(argv[i + 1]);
    if (flag == "--ranks-per-host")
      rph = static_cast<int>(v);
    else if (flag == "--root-window")
      window = static_cast<int>(v);
    else if (flag == "--alpha-us")
      model.alpha_us = v;
    else if (flag == "--beta-gbps")
      model.beta_gbps = v;
    else if (flag == "--connect-us")
      model.connect_us = v;
    else {
      fprintf(stderr, "scaling_plan: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  if (rph < 1 || window < 1 || model.beta_gbps <= 0) {
    fprintf(stderr, "scaling_plan: sizes and bandwidth must be positive\n");
    return 2;
  }
  printf("%d ranks per host, root window %d; model: alpha %.0f us, %.1f GB/s, connection %.0f us\n",
         rph, window, model.alpha_us, model.beta_gbps, model.connect_us);
  printf("\n%-6s %-10s %6s %9s %8s %8s %10s %10s %6s %6s %9s\n", "ranks", "plan", "rounds",
         "messages", "root-in", "rank-in", "root MB", "rank MB", "peers", "conns", "pred ms");
  for (int n : {1024, 2048, 4096, 8192, 16384}) {
    baton::PlanShape shape{n, rph, sizeof(baton::PeerInfo), sizeof(baton::WireAddr)};
    for (const auto& plan : {baton::PlanStarMesh(shape), baton::PlanHierarchical(shape, window)}) {
      BootstrapStats st;
      const baton::Status ok = baton::SimulateBootstrap(plan, sizeof(baton::PeerInfo), &st);
      if (!ok.ok()) {
        fprintf(stderr, "%s at %d ranks: %s\n", plan.name.c_str(), n, ok.message().c_str());
        return 1;
      }
      printf("%-6d %-10s %6zu %9zu %8d %8d %10.1f %10.1f %6zu %6u %9.1f\n", n,
             plan.name.rfind("star", 0) == 0 ? "star+mesh" : "hier+lazy", st.rounds, st.messages,
             st.root_fan_in, st.rank_fan_in, st.root_bytes / 1e6, st.rank_bytes / 1e6,
             st.bootstrap_peers, st.eager_connections, PredictMs(plan, st, model));
    }
  }
  struct Coll {
    const char* name;
    std::function<void(const CollArgs&, Schedule*)> build;
  };
  const Coll colls[] = {
      {"allreduce ring", baton::BuildRingAllReduce},
      {"allreduce rhd", baton::BuildRhdAllReduce},
      {"allreduce tree", baton::BuildDoubleBinaryTreeAllReduce},
      {"broadcast binomial", baton::BuildBinomialBroadcast},
      {"barrier", baton::BuildDisseminationBarrier},
      {"alltoall pairwise", baton::BuildPairwiseAlltoAll},
  };
  printf("\npeers per rank (= connections made on first use) / ops per rank\n%-20s", "");
  for (int n : {1024, 4096, 16384}) printf(" %16d", n);
  printf("\n");
  for (const Coll& c : colls) {
    printf("%-20s", c.name);
    for (int n : {1024, 4096, 16384}) {
      size_t peers = 0, steps = 0;
      PeersOf(n, c.build, &peers, &steps);
      printf(" %7zu / %6zu", peers, steps);
    }
    printf("\n");
  }
  return 0;
}
