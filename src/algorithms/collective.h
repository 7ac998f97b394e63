// The collectives Baton implements, the algorithm families that can run
// them, and which family implements which collective (the one table of it:
// the tuning layer's preference lists hold exactly these, and a test checks
// that they do). Header-only, so tests of the public API can name them too.
#pragma once

#include <strings.h>

namespace baton {

enum class Collective {
  kAllReduce,
  kBroadcast,
  kReduce,
  kAllGather,
  kReduceScatter,
  kAlltoAll,
  kGather,
  kScatter,
  // Variable counts (MPI's layout): per-rank counts and displacements in
  // CollArgs::counts and friends.
  kAllGatherV,
  kReduceScatterV,
  kAlltoAllV,
};
enum class Algorithm {
  kRing,
  kRecursiveHalvingDoubling,
  kTree,
  kBinomial,
  kPairwise,
  kHierarchical,  // within hosts over shared memory, then among hosts
  kDirect,        // rooted collectives: the root talks to every rank itself
};

// The names BATON_ALGO and the logs use, in enum order.
inline constexpr const char* kCollectiveNames[] = {
    "allreduce", "broadcast", "reduce",     "allgather",      "reducescatter", "alltoall",
    "gather",    "scatter",   "allgatherv", "reducescatterv", "alltoallv"};
inline constexpr const char* kAlgorithmNames[] = {"ring",     "rhd",  "tree",  "binomial",
                                                  "pairwise", "hier", "direct"};
inline constexpr int kNumCollectives = 11;
inline constexpr int kNumAlgorithms = 7;

// "allreduce", "broadcast", ...; "?" for a value out of range.
inline const char* CollectiveName(Collective c) {
  const int i = static_cast<int>(c);
  return i >= 0 && i < kNumCollectives ? kCollectiveNames[i] : "?";
}

// "ring", "rhd", "tree", "binomial", "pairwise", "hier", "direct"; "?" for a
// value out of range.
inline const char* AlgorithmName(Algorithm a) {
  const int i = static_cast<int>(a);
  return i >= 0 && i < kNumAlgorithms ? kAlgorithmNames[i] : "?";
}

// The value named `name` (case insensitive); false when there is none.
inline bool CollectiveFromName(const char* name, Collective* out) {
  for (int i = 0; i < kNumCollectives; ++i) {
    if (strcasecmp(name, kCollectiveNames[i]) == 0) {
      *out = static_cast<Collective>(i);
      return true;
    }
  }
  return false;
}

inline bool AlgorithmFromName(const char* name, Algorithm* out) {
  for (int i = 0; i < kNumAlgorithms; ++i) {
    if (strcasecmp(name, kAlgorithmNames[i]) == 0) {
      *out = static_cast<Algorithm>(i);
      return true;
    }
  }
  return false;
}

// Whether algorithm family `a` implements collective `c`.
inline constexpr bool Implements(Collective c, Algorithm a) {
  switch (c) {
    case Collective::kAllReduce:
      return a == Algorithm::kRing || a == Algorithm::kRecursiveHalvingDoubling ||
             a == Algorithm::kTree || a == Algorithm::kHierarchical;
    case Collective::kBroadcast:
    case Collective::kReduce:
      return a == Algorithm::kRing || a == Algorithm::kTree || a == Algorithm::kBinomial ||
             a == Algorithm::kHierarchical;
    case Collective::kAllGather:
      return a == Algorithm::kRing || a == Algorithm::kRecursiveHalvingDoubling ||
             a == Algorithm::kHierarchical;
    case Collective::kReduceScatter:
      return a == Algorithm::kRing || a == Algorithm::kRecursiveHalvingDoubling;
    case Collective::kAlltoAll:
    case Collective::kAlltoAllV:
      return a == Algorithm::kPairwise;
    case Collective::kGather:
    case Collective::kScatter:
      return a == Algorithm::kDirect || a == Algorithm::kBinomial;
    case Collective::kAllGatherV:
      return a == Algorithm::kRing || a == Algorithm::kRecursiveHalvingDoubling;
    case Collective::kReduceScatterV:
      return a == Algorithm::kRing;
  }
  return false;
}

// Whether a call's count is per rank, its buffers holding nranks blocks of
// it (allgather and gather: the output, reduce-scatter and scatter: the
// input, alltoall: both). The v-collectives count too: their size is the
// sum of their blocks, and their builders treat a count with no per-rank
// counts as nranks blocks of it.
inline constexpr bool CountIsPerRank(Collective c) {
  return c != Collective::kAllReduce && c != Collective::kBroadcast && c != Collective::kReduce;
}

// Whether a collective takes per-rank counts (CollArgs::counts).
inline constexpr bool HasVariableCounts(Collective c) {
  return c == Collective::kAllGatherV || c == Collective::kReduceScatterV ||
         c == Collective::kAlltoAllV;
}

// Whether a collective reduces (takes an op).
inline constexpr bool Reduces(Collective c) {
  return c == Collective::kAllReduce || c == Collective::kReduce ||
         c == Collective::kReduceScatter || c == Collective::kReduceScatterV;
}

// Whether a collective has a root.
inline constexpr bool HasRoot(Collective c) {
  return c == Collective::kBroadcast || c == Collective::kReduce || c == Collective::kGather ||
         c == Collective::kScatter;
}

}  // namespace baton
