// Algorithm choice: which schedule builder runs a call. Today each
// collective has one algorithm; BATON_ALGO already follows NCCL's syntax so
// the cost model can slot in behind the same interface.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace baton {

enum class Collective { kAllReduce, kBroadcast, kReduce, kAllGather, kReduceScatter, kAlltoAll };
enum class Algorithm { kRing, kRecursiveHalvingDoubling, kTree, kBinomial, kPairwise };

const char* CollectiveName(Collective c);
const char* AlgorithmName(Algorithm a);

// A parsed BATON_ALGO: "ring", "ring,tree", "^tree" (exclude),
// "allreduce:ring;broadcast:ring" (scoped per collective). Names are case
// insensitive: ring, rhd (recursive halving/doubling), tree (double binary
// tree), binomial (binomial tree), pairwise.
class AlgorithmFilter {
 public:
  // Empty spec: everything allowed.
  static Status Parse(const std::string& spec, AlgorithmFilter* out);

  bool allows(Collective c, Algorithm a) const;

  // The first allowed algorithm among `available` (in preference order),
  // or batonInvalidUsage naming what was asked for and what exists.
  Status choose(Collective c, const std::vector<Algorithm>& available, Algorithm* out) const;

 private:
  struct Rule {
    bool scoped = false;
    Collective collective = Collective::kAllReduce;
    bool exclude = false;
    std::vector<Algorithm> algorithms;
  };
  std::vector<Rule> rules_;
  std::string spec_;
};

}  // namespace baton
