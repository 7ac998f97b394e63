// AlgorithmFilter: BATON_ALGO parsed, NCCL's syntax. "ring", "ring,tree",
// "^tree" (exclude), "allreduce:ring;broadcast:tree" (scoped per
// collective); names are case insensitive: ring, rhd (recursive halving /
// doubling), tree (double binary tree), binomial (binomial tree), pairwise,
// hier (hierarchical: within hosts, then among them), direct (gather and
// scatter: the root talks to every rank itself).
#pragma once

#include <string>
#include <vector>

#include "algorithms/collective.h"
#include "base/status.h"

namespace baton {

class AlgorithmFilter {
 public:
  // Empty spec: everything allowed. batonInvalidUsage for an unknown
  // collective or algorithm name.
  static Status Parse(const std::string& spec, AlgorithmFilter* out);

  bool Allows(Collective c, Algorithm a) const;
  // Whether any rule applies to `c` (it names `c`, or names no collective):
  // the user chose among its algorithms.
  bool Restricts(Collective c) const;
  // The BATON_ALGO text it was parsed from.
  const std::string& spec() const { return spec_; }

  // The first allowed algorithm among `available` (in preference order),
  // or batonInvalidUsage naming what was asked for and what exists.
  Status Choose(Collective c, const std::vector<Algorithm>& available, Algorithm* out) const;

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
