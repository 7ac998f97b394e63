// The cost model: how long each algorithm takes for one call on one
// communicator, in microseconds, from the steps and bytes of its schedule
// and the link classes those steps cross (docs/tuning.md has the formulas
// and where the default figures come from).
//
// Each link class has an alpha (one small message: send to completed
// receive, including waking the receiver), an overhead (each further
// message of a stream to the same peer, which pipelines behind the first)
// and a beta (microseconds per byte); each datatype a gamma (microseconds
// per byte to reduce an incoming buffer into a local one). A step whose
// partners are on several hosts pays the slowest link it crosses, and a
// host whose ranks all talk across the network in one step shares its NIC
// among them (beta times the number of streams). When a host has more ranks
// than cores, its links' alpha, overhead and beta and its gamma grow by that
// ratio (ranks take turns on the cores) and each message's alpha pays a
// context switch.
//
// Every rank builds the same CostModel from the same CommTopology and
// parameters, so every rank picks the same algorithm without talking.
#pragma once

#include <baton.h>

#include <cstddef>
#include <string>
#include <vector>

#include "algorithms/collective.h"
#include "algorithms/schedule.h"
#include "topology/comm_topology.h"

namespace baton {

struct LinkCost {
  double alpha_us = 0;     // a small message, alone
  double overhead_us = 0;  // each further message streamed to the same peer
  double us_per_byte = 0;  // beta
};

// CostParams::hot_reduce_bytes where no rank knows its caches: a quarter of
// a 1 MiB level-2 cache, as on the VM the figures came from.
constexpr size_t kDefaultHotReduceBytes = 256 << 10;

// The largest vector that stays in a level-2 cache of `l2_bytes` (0:
// unknown, kDefaultHotReduceBytes) while a reduction reads it, the peer's
// piece and writes the result: a quarter of it, leaving room for the rest.
size_t HotReduceBytes(uint64_t l2_bytes);

struct CostParams {
  LinkCost link[kNumLinkClasses];
  double reduce_us_per_byte[batonNumTypes] = {};  // gamma, per datatype
  // Added to every message's alpha on a host with more ranks than cores:
  // the receiver must be scheduled onto a core first.
  double switch_us = 1.5;
  // The recursive halving/doubling allreduce's switch from recursive
  // doubling to Rabenseifner, in bytes (BATON_RHD_SWITCH); 0: the cost
  // model's crossover of the two.
  size_t rhd_switch_bytes = 0;
  // A vector of at most this many bytes stays in a core's cache, where the
  // reduction, fused into the copy out of the peer's piece, adds little to
  // that copy (beta): kHotReduceShare of gamma, which the figures measure
  // from memory (docs/tuning.md, "Reductions in cache"). HotReduceBytes of
  // the ranks' smallest level-2 cache.
  size_t hot_reduce_bytes = kDefaultHotReduceBytes;
  // The ranks' smallest last-level cache in bytes (0: unknown). On a host
  // whose CPUs copy the bytes, a call whose buffers overflow it writes its
  // final outputs with streaming stores (base/cpu.h StreamsOutputs), and
  // an output written with cached stores is read from memory first: the
  // model charges that read where an algorithm writes that way
  // (CostModel::CachedOutputReads; docs/tuning.md, "Outputs that overflow
  // the cache").
  size_t llc_bytes = 0;
  // "defaults" or what calibrated them; for logs and baton-topo.
  std::string source = "defaults";
};

// The defaults: shared-memory classes from fixed figures, the network from
// the NIC's speed in Mbit/s (0: unknown, taken as 10 Gbit/s) with a
// TCP-over-kernel latency.
CostParams DefaultCostParams(int nic_mbps);

// A prediction: the time and the chunk size (0 when the algorithm does not
// pipeline) that gives it.
struct Prediction {
  // The time of the fastest chunk size; chunk_bytes is the largest as fast
  // (within kSmallerChunkGain for two ranks sharing memory), or the
  // caller's fixed one, with its time.
  double us = 0;
  size_t chunk_bytes = 0;
  // Hierarchical: the algorithm of the inter-host stage (allreduce: ring or
  // rhd; broadcast and reduce: ring (a chain) or binomial, both stages).
  Algorithm inter = Algorithm::kRing;
  // Allreduce by rhd (flat, or hierarchical's inter-host stage): the
  // switch from recursive doubling to Rabenseifner the prediction assumed,
  // for CollArgs::rhd_switch_bytes.
  size_t rhd_switch_bytes = kRhdSmallMessageBytes;
  bool valid = false;  // false: the algorithm cannot run this layout
};

class CostModel {
 public:
  // `ring` is the communicator's ring order; `cores_per_host[h]` the cores
  // of host h of `topology` (to scale for oversubscription: the ranks of
  // every host on the same machine, RankPlace::machine, share them).
  CostModel(const CommTopology& topology, const std::vector<int>& ring,
            const std::vector<int>& cores_per_host, const CostParams& params);

  // Predicted time of `algorithm` running `collective` on `bytes` (the whole
  // vector for allreduce, broadcast and reduce; nranks blocks for the
  // others) of `datatype`. `chunk_bytes` 0: the best of the candidates
  // (kChunkCandidates), else that one.
  Prediction Predict(Collective collective, Algorithm algorithm, size_t bytes,
                     batonDataType_t datatype, size_t chunk_bytes = 0) const;

  // Whether the hosts hold equal numbers of ranks (hierarchical algorithms
  // need it).
  bool uniform_hosts() const { return uniform_hosts_; }

  const CostParams& params() const { return params_; }

  // The recursive halving/doubling allreduce's switch for `datatype`: the
  // smallest vector (bytes) for which the model has Rabenseifner cheaper
  // than recursive doubling over this communicator's rhd steps (or, with
  // `inter_host`, hierarchical's steps among the hosts), but no less than
  // kRhdSmallMessageBytes; SIZE_MAX when it never is.
  // CostParams::rhd_switch_bytes instead when set.
  size_t RhdSwitchBytes(batonDataType_t datatype, bool inter_host = false) const {
    const int t = static_cast<int>(datatype);
    const int i = t >= 0 && t < batonNumTypes ? t : 0;
    return inter_host ? inter_rhd_switch_[i] : rhd_switch_[i];
  }

  // What a reduction of a vector of at most CostParams::hot_reduce_bytes
  // costs, as a share of gamma (docs/tuning.md, "Reductions in cache").
  static constexpr double kHotReduceShare = 0.05;

  // What a network message to a rank on an oversubscribed core costs at
  // least, as a share of the link's latency times the ranks per core: a
  // wake-up of its receiver (PairCost).
  static constexpr double kSharedCoreWakeShare = 0.5;

  // The chunk sizes the model chooses among.
  static constexpr size_t kChunkCandidates[] = {16 << 10,  64 << 10, 256 << 10,
                                                512 << 10, 1 << 20,  4 << 20};
  // How much faster the model must find a smaller chunk to take it when
  // two ranks share memory: there each further chunk costs far more than
  // the model's per-message overhead (a ring in 16 KiB chunks ran up to 1.5x
  // slower than in one piece where the model had them level), while four
  // ranks gain from the pipeline (docs/tuning.md, "Chunks that must earn
  // their keep"). Elsewhere only ties keep the larger chunk.
  static constexpr double kSmallerChunkGain = 0.02;
  // The smallest chunk a communicator whose ranks all share memory takes.
  // There each piece also costs a few line transfers, which the model's
  // overhead leaves out: where lines take long to cross (a ring turned
  // far, on streaming stores) 16 KiB pieces ran up to twice as slow as 64
  // KiB ones, and where they cross fast they gained little (docs/tuning.md,
  // "Chunks that must earn their keep").
  static constexpr size_t kShmMinChunkBytes = 32 << 10;

  // Whether some host runs more ranks than it has cores.
  bool Oversubscribed() const {
    for (double f : oversubscription_)
      if (f > 1) return true;
    return false;
  }

 private:
  // A set of links used by one step, or by all steps of a pipeline: the
  // largest alpha, overhead and beta (NIC sharing included) among them.
  struct StepCost {
    double alpha = 0, overhead = 0, beta = 0;
    bool cpu_bound = true;  // shared memory: the CPUs copy (no overlap with reducing)
  };
  // One exchange step of `bytes` over `s`, reduced at `g` per byte (0: copied).
  static double StepTime(const StepCost& s, double bytes, double g) {
    return s.alpha + bytes * (s.beta + g);
  }
  // A chain of hops a chunk travels (a ring segment's route, a path from a
  // tree's root to a leaf): the latencies and per-byte costs of its hops
  // summed, and how many hops reduce on arrival. Hops that wait behind a
  // node's earlier sends count those in `alpha` (overheads) and `beta`.
  struct Path {
    double alpha = 0, beta = 0;
    int hops = 0;
    bool operator<(const Path& o) const {
      return alpha != o.alpha ? alpha < o.alpha : beta != o.beta ? beta < o.beta : hops < o.hops;
    }
  };
  // The paths that can be the slowest (the others are dominated).
  using Paths = std::vector<Path>;

  // Summaries of the topology (cost_model_paths.cc), built once.
  StepCost PairCost(int a, int b) const;
  // `simultaneous`: the pairs talk at once (one step of an algorithm), so a
  // host's streams share its NIC; else each pair's link stands alone.
  StepCost WorstOf(const std::vector<std::pair<int, int>>& pairs, bool simultaneous = true) const;
  // The windows of `length` consecutive edges of a cycle of `edges` (or, for
  // a chain, the edges themselves) as paths.
  Paths RingWindows(const std::vector<std::pair<int, int>>& edges, int length) const;
  // Root-to-node paths of a tree given by each rank's parent and its index
  // among the parent's sends (0: first).
  Paths TreePaths(const std::vector<int>& parent, const std::vector<int>& send_index) const;
  // The node of a tree that sends the most per chunk, as `fanout` sends of
  // the returned average cost.
  StepCost BusiestParent(const std::vector<int>& parent, int* fanout) const;
  void SummarizeFlat(const std::vector<int>& ring);
  void SummarizeHierarchical(const std::vector<int>& ring);

  // The formulas (cost_model.cc).
  // gamma for `datatype`, scaled for oversubscription; for a vector of at
  // most params_.hot_reduce_bytes, kHotReduceShare of it.
  double Gamma(batonDataType_t datatype, size_t bytes) const;
  // The slowest of `paths` for one chunk of `cb` bytes, `gamma` per hop.
  static double Slowest(const Paths& paths, double cb, double gamma);
  double Serial(int steps, int reducing, size_t block, double gamma, size_t chunk,
                const StepCost& s, const Paths& chain) const;
  double Staged(size_t bytes, double gamma, size_t chunk, const StepCost& s, double sends_per_chunk,
                double reduces_per_chunk, const Paths& paths) const;
  double Alltoall(size_t block) const;
  // Gather and scatter of `block` bytes per rank.
  double Direct(size_t block, bool root_sends) const;
  double RootedBinomial(size_t block, size_t chunk) const;
  // Recursive halving/doubling over p ranks with these steps and fold; an
  // allreduce switches to Rabenseifner at `rhd_switch` bytes.
  double Rhd(Collective c, size_t n, double gamma, size_t count, int p,
             const std::vector<StepCost>& steps, const StepCost& fold, size_t rhd_switch) const;
  // The two allreduce variants' times.
  static double RhdAllReduce(bool rabenseifner, double n, double gamma, int p,
                             const std::vector<StepCost>& steps, const StepCost& fold);
  // Where Rabenseifner becomes the cheaper of the two.
  static size_t RhdCrossover(double hot_gamma, double gamma, size_t hot_bytes, int p,
                             const std::vector<StepCost>& steps, const StepCost& fold);
  void ComputeRhdSwitches();
  double Tree(Collective c, size_t n, double gamma, size_t chunk) const;
  // An allreduce's reads of output lines it writes with cached stores, in
  // us, on one host whose CPUs copy, where the call's buffers overflow the
  // last-level cache (CostParams::llc_bytes); 0 elsewhere.
  double CachedOutputReads(Algorithm a, size_t n, size_t rhd_switch) const;
  double Hierarchical(Collective c, size_t n, double gamma, size_t chunk, size_t rhd_switch,
                      Algorithm* inter) const;

  int p_ = 1;
  CostParams params_;
  std::vector<double> oversubscription_;    // per rank: max(1, ranks on its host / cores)
  const CommTopology* topology_ = nullptr;  // during construction only
  bool uniform_hosts_ = false;
  int per_host_ = 1;

  StepCost ring_;                // every ring edge
  Paths ring_half_, ring_full_;  // p - 1 and 2 (p - 1) consecutive ring hops
  StepCost chain_;               // the ring from rank 0, without its closing edge
  Paths chain_paths_;
  std::vector<StepCost> rhd_;  // per step of the power-of-two group
  StepCost fold_;              // the folded pairs
  StepCost tree_;              // double binary tree edges
  Paths tree_paths_;           // root to node, both trees
  StepCost rooted_tree_;       // rooted at rank 0
  Paths rooted_paths_;
  StepCost binomial_;  // binomial tree from rank 0
  Paths binomial_paths_;
  int binomial_fanout_ = 0;          // the root's children
  StepCost all_pairs_;               // pairwise alltoall: the worst link
  double alltoall_host_blocks_ = 0;  // blocks leaving the busiest host
  double network_beta_ = 0;
  double local_beta_ = 0;  // between two ranks of the first host (0: it has one)
  // Hierarchical: within each host along its ring; among the hosts.
  StepCost intra_;
  Paths intra_half_, intra_chain_, intra_binomial_;
  int intra_fanout_ = 0;
  StepCost inter_ring_;  // all local ranks at once
  Paths inter_half_;
  std::vector<StepCost> inter_rhd_;
  StepCost inter_fold_;
  size_t rhd_switch_[batonNumTypes] = {};        // RhdSwitchBytes per datatype
  size_t inter_rhd_switch_[batonNumTypes] = {};  // the same among the hosts
  StepCost inter_chain_;                         // the hosts' local rank 0 only
  Paths inter_chain_paths_, inter_binomial_;
  int inter_fanout_ = 0;
};

}  // namespace baton
