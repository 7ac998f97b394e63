// The collectives Baton implements, the algorithm families that can run
// them, and which family implements which collective (the one table of it:
// the tuning layer's preference lists hold exactly these, and a test checks
// that they do). Header-only, so tests of the public API can name them too.
#pragma once

#include <strings.h>

namespace baton {

enum class Collective { kAllReduce, kBroadcast, kReduce, kAllGather, kReduceScatter, kAlltoAll };
enum class Algorithm {
  kRing,
  kRecursiveHalvingDoubling,
  kTree,
  kBinomial,
  kPairwise,
  kHierarchical,  // within hosts over shared memory, then among hosts
};

// The names BATON_ALGO and the logs use, in enum order.
inline constexpr const char* kCollectiveNames[] = {"allreduce", "broadcast",     "reduce",
                                                   "allgather", "reducescatter", "alltoall"};
inline constexpr const char* kAlgorithmNames[] = {"ring",     "rhd",      "tree",
                                                   "binomial", "pairwise", "hier"};
inline constexpr int kNumCollectives = 6;
inline constexpr int kNumAlgorithms = 6;

// "allreduce", "broadcast", ...; "?" for a value out of range.
inline const char* CollectiveName(Collective c) {
  const int i = static_cast<int>(c);
  return i >= 0 && i < kNumCollectives ? kCollectiveNames[i] : "?";
}

// "ring", "rhd", "tree", "binomial", "pairwise", "hier"; "?" for a value out
// of range.
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
      return a == Algorithm::kPairwise;
  }
  return false;
}

// Whether a call's count is per rank, its buffers holding nranks blocks of
// it (allgather: the output, reduce-scatter: the input, alltoall: both).
inline constexpr bool CountIsPerRank(Collective c) {
  return c == Collective::kAllGather || c == Collective::kReduceScatter ||
         c == Collective::kAlltoAll;
}

}  // namespace baton
