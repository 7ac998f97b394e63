#include "tuning/select.h"

#include "collectives/rhd.h"
#include "collectives/tree.h"

namespace baton {
namespace {

// Below this, latency (the number of sequential messages) dominates: the
// log-depth algorithms win over the ring's 2(p-1) steps. Measured here with
// 4 ranks on shared memory and TCP loopback; the cost model will replace it.
constexpr size_t kSmallMessageBytes = 64 << 10;

}  // namespace

std::vector<AlgorithmImpl> CandidateAlgorithms(Collective c, size_t bytes, int nranks) {
  const bool small = bytes < kSmallMessageBytes || nranks <= 1;
  switch (c) {
    case Collective::kAllReduce:
      if (small)
        return {{Algorithm::kRecursiveHalvingDoubling, BuildRhdAllReduce},
                {Algorithm::kTree, BuildDoubleBinaryTreeAllReduce},
                {Algorithm::kRing, BuildRingAllReduce}};
      return {{Algorithm::kRing, BuildRingAllReduce},
              {Algorithm::kRecursiveHalvingDoubling, BuildRhdAllReduce},
              {Algorithm::kTree, BuildDoubleBinaryTreeAllReduce}};
    case Collective::kBroadcast:
      if (small)
        return {{Algorithm::kBinomial, BuildBinomialBroadcast},
                {Algorithm::kTree, BuildDoubleBinaryTreeBroadcast},
                {Algorithm::kRing, BuildChainBroadcast}};
      return {{Algorithm::kRing, BuildChainBroadcast},
              {Algorithm::kTree, BuildDoubleBinaryTreeBroadcast},
              {Algorithm::kBinomial, BuildBinomialBroadcast}};
    case Collective::kReduce:
      if (small)
        return {{Algorithm::kBinomial, BuildBinomialReduce},
                {Algorithm::kTree, BuildDoubleBinaryTreeReduce},
                {Algorithm::kRing, BuildChainReduce}};
      return {{Algorithm::kRing, BuildChainReduce},
              {Algorithm::kTree, BuildDoubleBinaryTreeReduce},
              {Algorithm::kBinomial, BuildBinomialReduce}};
    case Collective::kAllGather:
      if (small)
        return {{Algorithm::kRecursiveHalvingDoubling, BuildRecursiveDoublingAllGather},
                {Algorithm::kRing, BuildRingAllGather}};
      return {{Algorithm::kRing, BuildRingAllGather},
              {Algorithm::kRecursiveHalvingDoubling, BuildRecursiveDoublingAllGather}};
    case Collective::kReduceScatter:
      if (small)
        return {{Algorithm::kRecursiveHalvingDoubling, BuildRecursiveHalvingReduceScatter},
                {Algorithm::kRing, BuildRingReduceScatter}};
      return {{Algorithm::kRing, BuildRingReduceScatter},
              {Algorithm::kRecursiveHalvingDoubling, BuildRecursiveHalvingReduceScatter}};
    case Collective::kAlltoAll:
      return {{Algorithm::kPairwise, BuildPairwiseAlltoAll}};
  }
  return {};
}

Status SelectAlgorithm(const AlgorithmFilter& filter, Collective c, size_t bytes, int nranks,
                       AlgorithmImpl* out) {
  std::vector<AlgorithmImpl> candidates = CandidateAlgorithms(c, bytes, nranks);
  std::vector<Algorithm> names;
  for (const auto& impl : candidates) names.push_back(impl.algorithm);
  Algorithm chosen;
  BATON_RETURN_IF_ERROR(filter.choose(c, names, &chosen));
  for (const auto& impl : candidates) {
    if (impl.algorithm == chosen) {
      *out = impl;
      return Status::Ok();
    }
  }
  return InternalError("algorithm selection is inconsistent");
}

}  // namespace baton
