// The cost model's formulas; docs/tuning.md derives them. Two shapes recur:
//
// - Serial: every step of the algorithm uses the same links (a ring: each
//   link carries all steps, k chunks each). The time is the larger of the
//   dependency chain (a chunk's hops through all steps, then the other
//   chunks streaming behind it) and the busiest link (all steps x k chunks
//   back to back).
// - Staged: a chunk travels through distinct links (a chain, a tree's
//   levels): the first chunk pays its slowest path from the root, the
//   others follow one per the busiest node's per-chunk work.
//
// Over shared memory a transfer is the CPUs' own copying, so a rank's sends,
// receives and reductions add up; over a network the NIC moves the bytes
// while the CPU reduces, so they overlap (StepCost::cpu_bound).
#include "tuning/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>

#include "base/cpu.h"
#include "base/datatype.h"

namespace baton {
namespace {

int FloorPow2(int n) {
  int b = 1;
  while (b * 2 <= n) b *= 2;
  return b;
}

size_t ChunkCount(size_t block, size_t chunk) {
  if (block == 0) return 1;
  return std::max<size_t>(1, (block + chunk - 1) / std::max<size_t>(chunk, 1));
}

}  // namespace

size_t HotReduceBytes(uint64_t l2_bytes) {
  return l2_bytes == 0 ? kDefaultHotReduceBytes : static_cast<size_t>(l2_bytes / 4);
}

CostParams DefaultCostParams(int nic_mbps) {
  CostParams p;
  // Shared memory: one small message through a control cell, and a copy in
  // and out per byte (docs/tuning.md: measured on the 2-core VM, shm2).
  p.link[static_cast<int>(LinkClass::kSameNuma)] = {0.25, 0.08, 1.0 / 12000};
  p.link[static_cast<int>(LinkClass::kSamePackage)] = {0.4, 0.1, 1.0 / 9000};
  p.link[static_cast<int>(LinkClass::kCrossPackage)] = {0.7, 0.15, 1.0 / 7000};
  // TCP through the kernel: ~20 us for a small message with a wake-up,
  // ~4 us per further message; the wire's rate, but no faster than one
  // stream's copies through the kernel (~3 GB/s).
  const double mbps = nic_mbps > 0 ? nic_mbps : 10000;
  p.link[static_cast<int>(LinkClass::kNetwork)] = {20.0, 4.0,
                                                   std::max(8.0 / (0.94 * mbps), 1.0 / 3000)};
  for (int t = 0; t < batonNumTypes; ++t) p.reduce_us_per_byte[t] = 1.0 / 12000;
  // Half-precision types convert through float.
  p.reduce_us_per_byte[batonFloat16] = p.reduce_us_per_byte[batonBfloat16] = 1.0 / 6000;
  // fp8 does the same per-element conversion work on half the bytes (a
  // guess until BATON_CALIBRATE measures it).
  p.reduce_us_per_byte[batonFloat8e4m3] = p.reduce_us_per_byte[batonFloat8e5m2] = 1.0 / 3000;
  return p;
}

double CostModel::Gamma(batonDataType_t datatype, size_t bytes) const {
  const int t = static_cast<int>(datatype);
  const double g = t >= 0 && t < batonNumTypes ? params_.reduce_us_per_byte[t] : 0;
  const double crowding = *std::max_element(oversubscription_.begin(), oversubscription_.end());
  // (Ranks that take turns on a core evict each other's lines: no host of
  // more ranks than cores keeps a vector hot.)
  const bool hot = bytes <= params_.hot_reduce_bytes && crowding <= 1;
  return g * crowding * (hot ? kHotReduceShare : 1);
}

double CostModel::Slowest(const Paths& paths, double cb, double gamma) {
  double most = 0;
  for (const Path& path : paths)
    most = std::max(most, path.alpha + cb * path.beta + path.hops * cb * gamma);
  return most;
}

// `steps` ring steps over the same links, the first `reducing` of them
// reducing, each moving `block` bytes per rank in chunks; `chain` holds
// the routes of a chunk through all the steps.
double CostModel::Serial(int steps, int reducing, size_t block, double gamma, size_t chunk,
                         const StepCost& s, const Paths& chain) const {
  if (steps <= 0 || block == 0) return 0;
  const double k = static_cast<double>(ChunkCount(block, chunk));
  const double cb = static_cast<double>(block) / k;
  // A chunk's cost on the busiest resource: over shared memory the same
  // CPU copies and reduces; over a network the NIC and the CPU overlap.
  auto per_chunk = [&](double g) {
    return s.overhead + (s.cpu_bound ? cb * (s.beta + g) : cb * std::max(s.beta, g));
  };
  const double first = Slowest(chain, cb, gamma * reducing / steps);
  const double chained = first + (k - 1) * per_chunk(reducing > 0 ? gamma : 0);
  const double busy = k * (reducing * per_chunk(gamma) + (steps - reducing) * per_chunk(0)) +
                      (s.alpha - s.overhead);
  return std::max(chained, busy);
}

// A chunk pipeline through distinct links: the first chunk takes the
// slowest of `paths`, then one chunk leaves per the busiest node's work
// (`sends_per_chunk` messages and `reduces_per_chunk` reductions).
double CostModel::Staged(size_t bytes, double gamma, size_t chunk, const StepCost& s,
                         double sends_per_chunk, double reduces_per_chunk,
                         const Paths& paths) const {
  if (bytes == 0) return 0;
  const double k = static_cast<double>(ChunkCount(bytes, chunk));
  const double cb = static_cast<double>(bytes) / k;
  const double send = sends_per_chunk * (s.overhead + cb * s.beta);
  const double reduce = reduces_per_chunk * cb * gamma;
  const double per_chunk = s.cpu_bound ? send + reduce : std::max(send, reduce);
  return Slowest(paths, cb, gamma) + (k - 1) * per_chunk;
}

double CostModel::RhdAllReduce(bool rabenseifner, double n, double gamma, int p,
                               const std::vector<StepCost>& steps, const StepCost& fold) {
  // A fold delays the absorbing rank's first message and the folded-out
  // rank's result. The other ranks' first step overlaps with the first, so
  // of the second only the bytes count.
  double t = FloorPow2(p) < p ? StepTime(fold, n, gamma) + n * fold.beta : 0;
  if (!rabenseifner) {
    for (const StepCost& s : steps) t += StepTime(s, n, gamma);
  } else {
    for (size_t k = 0; k < steps.size(); ++k) {
      const double part = n / static_cast<double>(2 << k);
      t += StepTime(steps[k], part, gamma) + StepTime(steps[k], part, 0);
    }
  }
  return t;
}

size_t CostModel::RhdCrossover(double hot_gamma, double gamma, size_t hot_bytes, int p,
                               const std::vector<StepCost>& steps, const StepCost& fold) {
  auto rabenseifner_wins = [&](size_t n) {
    const double nb = static_cast<double>(n);
    const double g = n <= hot_bytes ? hot_gamma : gamma;
    return RhdAllReduce(true, nb, g, p, steps, fold) < RhdAllReduce(false, nb, g, p, steps, fold);
  };
  // With one gamma both are linear in n and Rabenseifner moves and reduces
  // fewer bytes, so it wins from one size on, found by bisection (2^40:
  // never); the larger gamma beyond hot_bytes only favours it more.
  auto first_win = [&](size_t lo, size_t hi) {
    if (!rabenseifner_wins(hi)) return SIZE_MAX;
    while (hi - lo > 1) {
      const size_t mid = lo + (hi - lo) / 2;
      (rabenseifner_wins(mid) ? hi : lo) = mid;
    }
    return rabenseifner_wins(lo) ? lo : hi;
  };
  const size_t hot = first_win(0, hot_bytes);
  return hot != SIZE_MAX ? hot : first_win(hot_bytes + 1, size_t{1} << 40);
}

void CostModel::ComputeRhdSwitches() {
  const int hosts = p_ / std::max(1, per_host_);
  // Never below the old fixed switch: the shared-memory figures (an 8 B
  // message, a 32 MiB copy) miss what an exchange step of a few KiB costs,
  // and put the crossover at 2-14 KiB where recursive doubling measured as
  // fast as Rabenseifner up to 64 KiB (docs/tuning.md). Over TCP the
  // crossover lies above it.
  auto model = [&](double hot_gamma, double gamma, int p, const std::vector<StepCost>& steps,
                   const StepCost& fold) {
    return params_.rhd_switch_bytes != 0
               ? params_.rhd_switch_bytes
               : std::max(kRhdSmallMessageBytes,
                          RhdCrossover(hot_gamma, gamma, params_.hot_reduce_bytes, p, steps, fold));
  };
  for (int t = 0; t < batonNumTypes; ++t) {
    const auto type = static_cast<batonDataType_t>(t);
    const double hot_gamma = Gamma(type, 0), gamma = Gamma(type, SIZE_MAX);
    rhd_switch_[t] = model(hot_gamma, gamma, p_, rhd_, fold_);
    inter_rhd_switch_[t] = model(hot_gamma, gamma, hosts, inter_rhd_, inter_fold_);
  }
}

double CostModel::Rhd(Collective c, size_t n, double gamma, size_t count, int p,
                      const std::vector<StepCost>& steps, const StepCost& fold,
                      size_t rhd_switch) const {
  const int p2 = FloorPow2(p);
  const bool folded = p2 < p;
  const double nb = static_cast<double>(n);
  double t = 0;
  switch (c) {
    case Collective::kAllReduce:
      // As BuildRhdAllReduce decides with CollArgs::rhd_switch_bytes.
      return RhdAllReduce(!(n < rhd_switch || count < static_cast<size_t>(p)), nb, gamma, p, steps,
                          fold);
    case Collective::kReduceScatter:
      if (folded) t += StepTime(fold, nb, gamma) + nb / p * fold.beta;
      for (size_t k = 0; k < steps.size(); ++k)  // distance 2^k moves n 2^k / p'
        t += StepTime(steps[k], nb * static_cast<double>(1 << k) / p2, gamma);
      return t;
    case Collective::kAllGather:
      if (folded) t += StepTime(fold, nb / p, 0) + nb * fold.beta;
      for (size_t k = 0; k < steps.size(); ++k)
        t += StepTime(steps[k], nb * static_cast<double>(1 << k) / p2, 0);
      return t;
    default:
      return 0;
  }
}

double CostModel::Tree(Collective c, size_t n, double gamma, size_t chunk) const {
  // Each of the two trees carries half of the data.
  const size_t half = (n + 1) / 2;
  switch (c) {
    case Collective::kAllReduce: {
      // Up with reductions, then down; per chunk index a node inner in one
      // tree and a leaf in the other sends four messages and reduces two.
      const double k = static_cast<double>(ChunkCount(half, chunk));
      const double cb = static_cast<double>(half) / k;
      return Staged(half, gamma, chunk, tree_, 4, 2, tree_paths_) + Slowest(tree_paths_, cb, 0);
    }
    // A node sends (or receives) two chunks per chunk index, one per tree;
    // replays of the schedules (tests/unit/cost_model_test.cc) show the two
    // trees' interleaving keeps about 2/3 of that rate, hence 3.
    case Collective::kBroadcast:
      return Staged(half, 0, chunk, rooted_tree_, 3, 0, rooted_paths_);
    case Collective::kReduce:
      return Staged(half, gamma, chunk, rooted_tree_, 3, 2, rooted_paths_);
    default:
      return 0;
  }
}

double CostModel::CachedOutputReads(Algorithm a, size_t n, size_t rhd_switch) const {
  // As launch/call.cc decides that the outputs stream.
  if (p_ <= 1 || per_host_ != p_ || !ring_.cpu_bound || params_.llc_bytes == 0 ||
      !StreamsOutputs(p_, n, params_.llc_bytes))
    return 0;
  const double nb = static_cast<double>(n);
  double lines;  // bytes of output first written with cached stores
  switch (a) {
    case Algorithm::kRing:
    case Algorithm::kHierarchical:  // one host: the ring's halves
      // The reduce-scatter reduces every block but this rank's own into
      // recv; the allgather's first step lands the own one, streamed only
      // where it is also the last (two ranks).
      lines = p_ == 2 ? nb / 2 : nb;
      break;
    case Algorithm::kRecursiveHalvingDoubling: {
      const int p2 = FloorPow2(p_);
      // Recursive doubling reduces whole vectors, and so does a fold.
      // Rabenseifner's first halving step keeps half the vector in recv
      // and every later step writes within it, but for two ranks that step
      // is the pivot, which streams its output (algorithms/rhd.cc).
      lines = n < rhd_switch || p2 < p_ ? nb : p2 == 2 ? 0 : nb / 2;
      break;
    }
    case Algorithm::kTree:
      lines = nb;  // nothing streams: every output line is written cached
      break;
    default:
      return 0;
  }
  // A read for ownership: the read half of a copy.
  return lines * ring_.beta / 2;
}

double CostModel::Hierarchical(Collective c, size_t n, double gamma, size_t chunk,
                               size_t rhd_switch, Algorithm* inter) const {
  const int l = per_host_, hosts = p_ / std::max(1, per_host_);
  *inter = Algorithm::kRing;
  if (c == Collective::kBroadcast || c == Collective::kReduce) {
    // Among the hosts, then within each (the reverse for reduce): both
    // stages as chains or both as binomial trees.
    const double g = c == Collective::kReduce ? gamma : 0;
    const double r = g > 0 ? 1 : 0;
    const double chain =
        (hosts > 1 ? Staged(n, g, chunk, inter_chain_, 1, r, inter_chain_paths_) : 0) +
        (l > 1 ? Staged(n, g, chunk, intra_, 1, r, intra_chain_) : 0);
    const double binomial =
        (hosts > 1
             ? Staged(n, g, chunk, inter_chain_, inter_fanout_, r * inter_fanout_, inter_binomial_)
             : 0) +
        (l > 1 ? Staged(n, g, chunk, intra_, intra_fanout_, r * intra_fanout_, intra_binomial_)
               : 0);
    if (binomial < chain) *inter = Algorithm::kBinomial;
    return std::min(chain, binomial);
  }
  if (c == Collective::kAllGather) {
    // Blocks travel whole: one message per block, one block per step among
    // the hosts, a block from every host per step within a host.
    const size_t blk = n / std::max(1, p_);
    return Serial(hosts - 1, 0, blk, 0, blk, inter_ring_, inter_half_) +
           Serial(l - 1, 0, blk * hosts, 0, blk, intra_, intra_half_);
  }
  const size_t slice = (n + l - 1) / l;
  // Intra-host reduce-scatter and allgather along each host's ring.
  double t = Serial(l - 1, l - 1, slice, gamma, chunk, intra_, intra_half_) +
             Serial(l - 1, 0, slice, 0, chunk, intra_, intra_half_);
  if (hosts <= 1) return t;
  // Each local rank allreduces its slice with its counterparts on the
  // other hosts; the better of a ring and recursive halving/doubling.
  const size_t block = (slice + hosts - 1) / hosts;
  const Paths full = {
      Path{inter_half_[0].alpha * 2, inter_half_[0].beta * 2, inter_half_[0].hops * 2}};
  const double ring = Serial(2 * (hosts - 1), hosts - 1, block, gamma, chunk, inter_ring_, full);
  // (The element count only matters below `hosts` elements, where bytes
  // stand in for it harmlessly.)
  const double rhd =
      Rhd(Collective::kAllReduce, slice, gamma, slice, hosts, inter_rhd_, inter_fold_, rhd_switch);
  if (rhd < ring) *inter = Algorithm::kRecursiveHalvingDoubling;
  return t + std::min(ring, rhd);
}

// Every rank sends p - 1 blocks, all posted at once: one latency, an
// overhead per message, and the bytes through the busiest resource: a
// rank's own link, or the NIC of the host sending the most blocks off-host.
double CostModel::Alltoall(size_t block) const {
  const double b = static_cast<double>(block);
  const double own = (p_ - 1) * b * all_pairs_.beta;
  const double nic = alltoall_host_blocks_ * b * network_beta_;
  return all_pairs_.alpha + (p_ - 2) * all_pairs_.overhead + std::max(own, nic);
}

// The root's p - 1 messages, all posted at once: one latency, and the bytes
// through the root: over shared memory its CPU copies its half of each
// message (the peers copy theirs at the same time), across hosts its host's
// NIC carries the other hosts' blocks. A scatter's root also pays each
// send's overhead; a gather's senders pay theirs in parallel.
double CostModel::Direct(size_t block, bool root_sends) const {
  const double b = static_cast<double>(block);
  const double local = per_host_ > 1 ? per_host_ * b * local_beta_ / 2 : 0;
  const double remote = (p_ - per_host_) * b * network_beta_;
  return all_pairs_.alpha + (root_sends ? (p_ - 2) * all_pairs_.overhead : 0) +
         std::max(local, remote);
}

// Gather and scatter along the binomial tree: the deepest path's latencies,
// every block but the root's through the root (as for Direct) a piece at a
// time, and the first piece's delay through the levels below the root.
double CostModel::RootedBinomial(size_t block, size_t chunk) const {
  const double n = static_cast<double>(block) * (p_ - 1);
  if (n == 0) return 0;
  const double through_root =
      std::max(n * (per_host_ > 1 ? local_beta_ / 2 : 0),
               static_cast<double>(block) * (p_ - per_host_) * network_beta_);
  // Small messages: one piece per edge, a subtree's blocks at a time;
  // large ones: pieces of about a chunk, one per root link at a time.
  const double pieces =
      static_cast<double>(ChunkCount(static_cast<size_t>(n), chunk)) + binomial_fanout_ - 1;
  const double first = std::min(static_cast<double>(chunk), n / binomial_fanout_);
  int levels = 0;
  while ((1 << levels) < p_) ++levels;
  return Slowest(binomial_paths_, 0, 0) + through_root + (pieces - 1) * binomial_.overhead +
         (levels - 1) * first * binomial_.beta;
}

Prediction CostModel::Predict(Collective c, Algorithm a, size_t bytes, batonDataType_t datatype,
                              size_t chunk_bytes) const {
  Prediction best;
  if (!Implements(c, a)) return best;
  // The v-collectives cost what their uniform forms do for the same total
  // (the model cannot know how uneven the blocks will be).
  if (c == Collective::kAllGatherV) c = Collective::kAllGather;
  if (c == Collective::kReduceScatterV) c = Collective::kReduceScatter;
  if (c == Collective::kAlltoAllV) c = Collective::kAlltoAll;
  if (a == Algorithm::kHierarchical && !uniform_hosts_) return best;
  const size_t es = std::max<size_t>(1, DatatypeSize(datatype));
  const double gamma = Gamma(datatype, bytes);
  const size_t count = bytes / es;
  const size_t block = (bytes + p_ - 1) / p_;  // a ring segment or one rank's block
  Algorithm inter = Algorithm::kRing;
  if (a == Algorithm::kRecursiveHalvingDoubling || a == Algorithm::kHierarchical)
    best.rhd_switch_bytes = RhdSwitchBytes(datatype, a == Algorithm::kHierarchical);
  const double output_reads =
      c == Collective::kAllReduce ? CachedOutputReads(a, bytes, best.rhd_switch_bytes) : 0;
  auto evaluate = [&](size_t chunk) -> double {
    if (p_ <= 1) return 0;
    switch (a) {
      case Algorithm::kRing:
        switch (c) {
          case Collective::kAllReduce:
            return Serial(2 * (p_ - 1), p_ - 1, block, gamma, chunk, ring_, ring_full_);
          case Collective::kReduceScatter:
            return Serial(p_ - 1, p_ - 1, block, gamma, chunk, ring_, ring_half_);
          case Collective::kAllGather:
            return Serial(p_ - 1, 0, block, 0, chunk, ring_, ring_half_);
          case Collective::kBroadcast:
            return Staged(bytes, 0, chunk, chain_, 1, 0, chain_paths_);
          case Collective::kReduce:
            return Staged(bytes, gamma, chunk, chain_, 1, 1, chain_paths_);
          default:
            return 0;
        }
      case Algorithm::kRecursiveHalvingDoubling:
        return Rhd(c, bytes, gamma, count, p_, rhd_, fold_, best.rhd_switch_bytes);
      case Algorithm::kTree:
        return Tree(c, bytes, gamma, chunk);
      case Algorithm::kBinomial:
        if (c == Collective::kGather || c == Collective::kScatter)
          return RootedBinomial(block, chunk);
        return c == Collective::kReduce
                   ? Staged(bytes, gamma, chunk, binomial_, binomial_fanout_, binomial_fanout_,
                            binomial_paths_)
                   : Staged(bytes, 0, chunk, binomial_, binomial_fanout_, 0, binomial_paths_);
      case Algorithm::kPairwise:
        return Alltoall(block);
      case Algorithm::kHierarchical:
        return Hierarchical(c, bytes, gamma, chunk, best.rhd_switch_bytes, &inter);
      case Algorithm::kDirect:
        return Direct(block, c == Collective::kScatter);
    }
    return 0;
  };
  const bool chunked = a != Algorithm::kRecursiveHalvingDoubling && a != Algorithm::kPairwise &&
                       a != Algorithm::kDirect;
  best.valid = true;
  if (!chunked) {
    best.us = evaluate(0) + output_reads;
    return best;
  }
  if (chunk_bytes != 0) {
    best.us = evaluate(chunk_bytes) + output_reads;
    best.chunk_bytes = chunk_bytes;
    best.inter = inter;
    return best;
  }
  // The largest chunk as fast as the fastest one runs (it pipelines least);
  // the algorithm competes with the fastest one's time, so that the margin
  // moves chunk sizes, never the algorithm.
  const double margin = p_ == 2 && ring_.cpu_bound ? kSmallerChunkGain : 1e-9;
  constexpr size_t kCandidates = std::size(kChunkCandidates);
  // (Candidates ascend; on shared memory the smallest are not taken.)
  size_t first = 0;
  while (ring_.cpu_bound && first + 1 < kCandidates && kChunkCandidates[first] < kShmMinChunkBytes)
    ++first;
  double us[kCandidates];
  Algorithm inters[kCandidates];
  double fastest = -1;
  for (size_t i = first; i < kCandidates; ++i) {
    us[i] = evaluate(kChunkCandidates[i]);
    inters[i] = inter;
    if (fastest < 0 || us[i] < fastest) fastest = us[i];
  }
  for (size_t i = kCandidates; i-- > first;) {
    if (us[i] <= fastest * (1 + margin)) {
      best.us = fastest + output_reads;
      best.chunk_bytes = kChunkCandidates[i];
      best.inter = inters[i];
      break;
    }
  }
  return best;
}

}  // namespace baton
