// The cost model's view of a communicator, computed once: for each
// algorithm, the worst links its steps use and the chains of hops a chunk
// travels through them (see cost_model.h).
#include <algorithm>
#include <functional>
#include <map>

#include "algorithms/tree.h"
#include "tuning/cost_model.h"

namespace baton {
namespace {

int FloorPow2(int n) {
  int b = 1;
  while (b * 2 <= n) b *= 2;
  return b;
}

int CeilPow2(int n) {
  int b = 1;
  while (b < n) b *= 2;
  return b;
}

// Binomial tree over relative ranks 0..n-1 (algorithms/tree.cc): v's parent
// is v without its lowest set bit; a parent sends to its children largest
// subtree first, so child v + m comes after the children with larger m.
void BinomialTree(int n, std::vector<int>* parent, std::vector<int>* index) {
  parent->assign(n, -1);
  index->assign(n, 0);
  for (int v = 1; v < n; ++v) {
    const int low = v & -v;
    const int up = v - low;
    (*parent)[v] = up;
    const int up_low = up == 0 ? CeilPow2(n) : (up & -up);
    int later = 0;  // children of `up` with a larger m, which go first
    for (int m = low * 2; m < up_low && up + m < n; m *= 2) ++later;
    (*index)[v] = later;
  }
}

}  // namespace

CostModel::CostModel(const CommTopology& topology, const std::vector<int>& ring,
                     const std::vector<int>& cores_per_host, const CostParams& params)
    : p_(topology.nranks()), params_(params), topology_(&topology) {
  // Ranks per core of the machine each rank runs on: simulated hosts on one
  // machine (RankPlace::machine) share its cores.
  oversubscription_.assign(p_, 1.0);
  std::map<uint64_t, int> ranks_on;
  auto machine_of = [&](int r) {
    const RankPlace& place = topology.place(r);
    return place.machine != 0 ? place.machine : place.host;
  };
  for (int r = 0; r < p_; ++r) ++ranks_on[machine_of(r)];
  for (int h = 0; h < topology.hosts(); ++h) {
    const int cores = h < static_cast<int>(cores_per_host.size()) ? cores_per_host[h] : 0;
    for (int r : topology.host_ranks()[h])
      if (cores > 0)
        oversubscription_[r] = std::max(1.0, static_cast<double>(ranks_on[machine_of(r)]) / cores);
  }
  per_host_ = static_cast<int>(topology.host_ranks()[0].size());
  uniform_hosts_ = true;
  for (const auto& members : topology.host_ranks())
    uniform_hosts_ = uniform_hosts_ && static_cast<int>(members.size()) == per_host_;
  network_beta_ = params_.link[static_cast<int>(LinkClass::kNetwork)].us_per_byte;
  SummarizeFlat(ring);
  SummarizeHierarchical(ring);
  ComputeRhdSwitches();
  topology_ = nullptr;  // only the summaries outlive construction
}

CostModel::StepCost CostModel::PairCost(int a, int b) const {
  const LinkClass cls = topology_->Link(a, b);
  const LinkCost& lc = params_.link[static_cast<int>(cls)];
  const double f = std::max(oversubscription_[a], oversubscription_[b]);
  const bool cpu_bound = cls != LinkClass::kNetwork;
  StepCost s;
  // Ranks that share cores wait for each other's turns: the software's part
  // of a message (a copy's latency, every link's overhead) stretches with
  // the sharing, the network's flight time does not (scaled, it put the
  // rhd switch at 18.6 KB between hosts at 1 Gbit/s, where Rabenseifner
  // was 0.73x recursive doubling's time from 16 KiB; docs/tuning.md).
  s.alpha = (cpu_bound ? lc.alpha_us * f : lc.alpha_us) + (f > 1 ? params_.switch_us : 0);
  s.overhead = lc.overhead_us * f;
  // A network message to a rank that shares its core finds it descheduled
  // (the other ranks hold the core), so a pipeline's every chunk pays a
  // wake-up, not the overhead of a stream in flight: extra chunks cost
  // 25-60 us each with 4 and 8 simulated hosts on 2 cores (docs/tuning.md,
  // "Chunks between hosts that share cores").
  if (!cpu_bound && f > 1)
    s.overhead = std::max(s.overhead, lc.alpha_us * f * kSharedCoreWakeShare);
  s.beta = lc.us_per_byte * (cpu_bound ? f : 1.0);
  s.cpu_bound = cpu_bound;
  return s;
}

CostModel::StepCost CostModel::WorstOf(const std::vector<std::pair<int, int>>& pairs,
                                       bool simultaneous) const {
  StepCost worst;
  std::vector<int> streams(topology_->hosts(), 0);
  int most = 1;
  double network_beta = 0;
  for (auto [a, b] : pairs) {
    const StepCost s = PairCost(a, b);
    worst.alpha = std::max(worst.alpha, s.alpha);
    worst.overhead = std::max(worst.overhead, s.overhead);
    if (s.cpu_bound) {
      worst.beta = std::max(worst.beta, s.beta);
    } else {
      network_beta = std::max(network_beta, s.beta);
      if (simultaneous) most = std::max(most, ++streams[topology_->host_of(a)]);
    }
  }
  if (network_beta * most > worst.beta) {
    worst.beta = network_beta * most;
    worst.cpu_bound = false;
  }
  return worst;
}

namespace {

// Drops the paths another path is at least as slow as in every respect.
template <typename Paths>
Paths Frontier(Paths paths) {
  std::sort(paths.begin(), paths.end());
  paths.erase(std::unique(paths.begin(), paths.end(),
                          [](const auto& a, const auto& b) { return !(a < b) && !(b < a); }),
              paths.end());
  Paths kept;
  for (size_t i = 0; i < paths.size(); ++i) {
    bool dominated = false;
    for (size_t j = 0; j < paths.size() && !dominated; ++j)
      dominated = j != i && paths[j].alpha >= paths[i].alpha && paths[j].beta >= paths[i].beta &&
                  paths[j].hops >= paths[i].hops;  // distinct after unique: strictly slower
    if (!dominated) kept.push_back(paths[i]);
  }
  return kept;
}

}  // namespace

CostModel::Paths CostModel::RingWindows(const std::vector<std::pair<int, int>>& edges,
                                        int length) const {
  const int n = static_cast<int>(edges.size());
  if (n == 0 || length <= 0) return {Path{}};
  std::vector<double> alpha(2 * n + 1, 0), beta(2 * n + 1, 0);  // prefix sums, twice around
  for (int i = 0; i < 2 * n; ++i) {
    const StepCost s = PairCost(edges[i % n].first, edges[i % n].second);
    alpha[i + 1] = alpha[i] + s.alpha;
    beta[i + 1] = beta[i] + s.beta;
  }
  Paths windows;
  for (int i = 0; i < n; ++i) {
    // A window longer than the cycle goes around it more than once.
    const int laps = length / n, rest = length % n;
    Path w;
    w.alpha = laps * alpha[n] + alpha[i + rest] - alpha[i];
    w.beta = laps * beta[n] + beta[i + rest] - beta[i];
    w.hops = length;
    windows.push_back(w);
  }
  return Frontier(windows);
}

CostModel::Paths CostModel::TreePaths(const std::vector<int>& parent,
                                      const std::vector<int>& send_index) const {
  const int n = static_cast<int>(parent.size());
  std::vector<Path> to(n);
  std::vector<char> known(n, 0);
  std::function<const Path&(int)> path = [&](int v) -> const Path& {
    if (!known[v]) {
      known[v] = 1;
      if (parent[v] >= 0) {
        const Path& up = path(parent[v]);
        const StepCost s = PairCost(parent[v], v);
        to[v].alpha = up.alpha + s.alpha + send_index[v] * s.overhead;
        to[v].beta = up.beta + (send_index[v] + 1) * s.beta;
        to[v].hops = up.hops + 1;
      }
    }
    return to[v];
  };
  Paths all;
  for (int v = 0; v < n; ++v) all.push_back(path(v));
  return Frontier(all);
}

CostModel::StepCost CostModel::BusiestParent(const std::vector<int>& parent, int* fanout) const {
  // Per parent: its children's overheads and betas summed; the node with
  // the most bytes to send per chunk is the busiest.
  std::vector<StepCost> sum(parent.size());
  std::vector<int> children(parent.size(), 0);
  for (size_t v = 0; v < parent.size(); ++v) {
    if (parent[v] < 0) continue;
    const StepCost s = PairCost(parent[v], static_cast<int>(v));
    StepCost& t = sum[parent[v]];
    t.alpha = std::max(t.alpha, s.alpha);
    t.overhead += s.overhead;
    t.beta += s.beta;
    t.cpu_bound = t.cpu_bound && s.cpu_bound;
    ++children[parent[v]];
  }
  size_t busiest = 0;
  for (size_t v = 1; v < parent.size(); ++v)
    if (sum[v].beta > sum[busiest].beta) busiest = v;
  *fanout = std::max(1, children[busiest]);
  StepCost per_send = sum[busiest];  // as the average send, `fanout` of them
  per_send.overhead /= *fanout;
  per_send.beta /= *fanout;
  return per_send;
}

void CostModel::SummarizeFlat(const std::vector<int>& ring) {
  const int p = p_;
  std::vector<std::pair<int, int>> pairs;
  // Ring: a segment's chunk crosses consecutive edges, so its latency is a
  // window of them, not the slowest edge at every hop.
  for (int i = 0; i < p && p > 1; ++i) pairs.push_back({ring[i], ring[(i + 1) % p]});
  ring_ = WorstOf(pairs);
  ring_half_ = RingWindows(pairs, p - 1);
  ring_full_ = RingWindows(pairs, 2 * (p - 1));
  if (!pairs.empty()) pairs.pop_back();  // the chain from ring[0] has no closing edge
  chain_ = WorstOf(pairs, false);
  Path chain;
  for (auto [a, b] : pairs) {
    const StepCost s = PairCost(a, b);
    chain.alpha += s.alpha;
    chain.beta += s.beta;
    ++chain.hops;
  }
  chain_paths_ = {chain};

  // Recursive halving/doubling in rank order, folded to a power of two.
  const int p2 = FloorPow2(p), rest = p - p2;
  auto rank_of = [rest](int v) { return v < rest ? 2 * v + 1 : v + rest; };
  pairs.clear();
  for (int i = 0; i < rest; ++i) pairs.push_back({2 * i, 2 * i + 1});
  fold_ = WorstOf(pairs);
  for (int bit = 1; bit < p2; bit <<= 1) {
    pairs.clear();
    for (int v = 0; v < p2; ++v) pairs.push_back({rank_of(v), rank_of(v ^ bit)});
    rhd_.push_back(WorstOf(pairs));
  }

  // Trees: each node's path from its tree's root; a parent sends to its
  // first child before its second.
  auto trees = [&](auto links_of, StepCost* cost, Paths* paths) {
    pairs.clear();
    Paths all;
    for (int t = 0; t < 2; ++t) {
      std::vector<int> parent(p, -1), index(p, 0);
      for (int r = 0; r < p; ++r) {
        TreeLinks links[2];
        links_of(r, links);
        parent[r] = links[t].parent;
        if (links[t].parent >= 0) pairs.push_back({links[t].parent, r});
        if (links[t].children[1] >= 0) index[links[t].children[1]] = 1;
      }
      const Paths tree = TreePaths(parent, index);
      all.insert(all.end(), tree.begin(), tree.end());
    }
    *cost = WorstOf(pairs, false);
    *paths = Frontier(all);
  };
  trees([p](int r, TreeLinks* l) { DoubleBinaryTreeLinks(r, p, l); }, &tree_, &tree_paths_);
  trees([p](int r, TreeLinks* l) { RootedDoubleBinaryTreeLinks(r, p, 0, l); }, &rooted_tree_,
        &rooted_paths_);

  std::vector<int> parent, index;
  BinomialTree(p, &parent, &index);
  binomial_ = BusiestParent(parent, &binomial_fanout_);
  binomial_paths_ = TreePaths(parent, index);

  // Alltoall: the worst single link (a rank's own messages are counted by
  // the formula), and the blocks that leave the busiest host.
  pairs.clear();
  const auto& hosts = topology_->host_ranks();
  for (const auto& members : hosts) {
    const int l = static_cast<int>(members.size());
    if (l > 1) pairs.push_back({members[0], members[1]});
    if (l > 1 && local_beta_ == 0) local_beta_ = PairCost(members[0], members[1]).beta;
    alltoall_host_blocks_ = std::max<double>(alltoall_host_blocks_, double(l) * (p - l));
  }
  if (hosts.size() > 1) pairs.push_back({hosts[0][0], hosts[1][0]});
  all_pairs_ = WorstOf(pairs, false);
}

void CostModel::SummarizeHierarchical(const std::vector<int>& ring) {
  (void)ring;
  const auto& hosts = topology_->host_ranks();
  const int l = per_host_, nhosts = topology_->hosts();
  // Within each host: its ring, its chain from local rank 0, its binomial
  // tree; the slowest host decides.
  std::vector<std::pair<int, int>> pairs;
  Paths half, chain, binomial;
  std::vector<int> parent, index;
  BinomialTree(l, &parent, &index);
  intra_fanout_ = 0;
  for (int v = 1; v < l; ++v) intra_fanout_ += parent[v] == 0;
  for (const auto& members : hosts) {
    const int n = static_cast<int>(members.size());
    std::vector<std::pair<int, int>> edges;
    for (int i = 0; i < n && n > 1; ++i) edges.push_back({members[i], members[(i + 1) % n]});
    pairs.insert(pairs.end(), edges.begin(), edges.end());
    const Paths w = RingWindows(edges, n - 1);
    half.insert(half.end(), w.begin(), w.end());
    Path c;
    for (int i = 0; i + 1 < n; ++i) {
      const StepCost s = PairCost(members[i], members[i + 1]);
      c.alpha += s.alpha;
      c.beta += s.beta;
      ++c.hops;
    }
    chain.push_back(c);
    if (n == l) {
      std::vector<int> ranks_parent(topology_->nranks(), -1), ranks_index(topology_->nranks(), 0);
      // TreePaths over the whole communicator, only this host's ranks linked.
      for (int v = 1; v < l; ++v) {
        ranks_parent[members[v]] = members[parent[v]];
        ranks_index[members[v]] = index[v];
      }
      const Paths t = TreePaths(ranks_parent, ranks_index);
      binomial.insert(binomial.end(), t.begin(), t.end());
    }
  }
  intra_ = WorstOf(pairs);
  intra_half_ = Frontier(half);
  intra_chain_ = Frontier(chain);
  intra_binomial_ = Frontier(binomial);
  if (!uniform_hosts_ || nhosts <= 1) return;

  // Among hosts: every local index at once (allreduce), or local rank 0
  // alone (broadcast, reduce).
  pairs.clear();
  for (int h = 0; h < nhosts; ++h)
    for (int i = 0; i < l; ++i) pairs.push_back({hosts[h][i], hosts[(h + 1) % nhosts][i]});
  inter_ring_ = WorstOf(pairs);
  Path hop{inter_ring_.alpha, inter_ring_.beta, 1};
  inter_half_ = {Path{hop.alpha * (nhosts - 1), hop.beta * (nhosts - 1), nhosts - 1}};
  const int h2 = FloorPow2(nhosts), hrest = nhosts - h2;
  auto host_of_v = [hrest](int v) { return v < hrest ? 2 * v + 1 : v + hrest; };
  pairs.clear();
  for (int h = 0; h < hrest; ++h)
    for (int i = 0; i < l; ++i) pairs.push_back({hosts[2 * h][i], hosts[2 * h + 1][i]});
  inter_fold_ = WorstOf(pairs);
  for (int bit = 1; bit < h2; bit <<= 1) {
    pairs.clear();
    for (int v = 0; v < h2; ++v)
      for (int i = 0; i < l; ++i)
        pairs.push_back({hosts[host_of_v(v)][i], hosts[host_of_v(v ^ bit)][i]});
    inter_rhd_.push_back(WorstOf(pairs));
  }
  pairs.clear();
  Path c;
  for (int h = 0; h + 1 < nhosts; ++h) {
    pairs.push_back({hosts[h][0], hosts[h + 1][0]});
    const StepCost s = PairCost(hosts[h][0], hosts[h + 1][0]);
    c.alpha += s.alpha;
    c.beta += s.beta;
    ++c.hops;
  }
  inter_chain_ = WorstOf(pairs, false);
  inter_chain_paths_ = {c};
  BinomialTree(nhosts, &parent, &index);
  std::vector<int> ranks_parent(topology_->nranks(), -1), ranks_index(topology_->nranks(), 0);
  inter_fanout_ = 0;
  for (int v = 1; v < nhosts; ++v) {
    ranks_parent[hosts[v][0]] = hosts[parent[v]][0];
    ranks_index[hosts[v][0]] = index[v];
    inter_fanout_ += parent[v] == 0;
  }
  inter_binomial_ = TreePaths(ranks_parent, ranks_index);
}

}  // namespace baton
