#include "tuning/select.h"

#include <vector>

#include "algorithms/chain.h"
#include "algorithms/pairwise.h"
#include "algorithms/rhd.h"
#include "algorithms/ring.h"
#include "algorithms/tree.h"

namespace baton {
namespace {

// Below this, latency (the number of sequential messages) dominates: the
// log-depth algorithms win over the ring's 2(p-1) steps (docs/algorithms.md).
// A placeholder: the cost model will replace it.
constexpr size_t kSmallMessageBytes = 64 << 10;

}  // namespace

namespace {

// Candidate lists in default preference order, as static tables so that
// choosing an algorithm allocates nothing: it runs on every call, and the
// small-message path is latency-bound.
constexpr AlgorithmImpl kAllReduceSmall[] = {
    {Algorithm::kRecursiveHalvingDoubling, BuildRhdAllReduce},
    {Algorithm::kTree, BuildDoubleBinaryTreeAllReduce},
    {Algorithm::kRing, BuildRingAllReduce}};
constexpr AlgorithmImpl kAllReduceLarge[] = {
    {Algorithm::kRing, BuildRingAllReduce},
    {Algorithm::kRecursiveHalvingDoubling, BuildRhdAllReduce},
    {Algorithm::kTree, BuildDoubleBinaryTreeAllReduce}};
constexpr AlgorithmImpl kBroadcastSmall[] = {{Algorithm::kBinomial, BuildBinomialBroadcast},
                                             {Algorithm::kTree, BuildDoubleBinaryTreeBroadcast},
                                             {Algorithm::kRing, BuildChainBroadcast}};
constexpr AlgorithmImpl kBroadcastLarge[] = {{Algorithm::kRing, BuildChainBroadcast},
                                             {Algorithm::kTree, BuildDoubleBinaryTreeBroadcast},
                                             {Algorithm::kBinomial, BuildBinomialBroadcast}};
constexpr AlgorithmImpl kReduceSmall[] = {{Algorithm::kBinomial, BuildBinomialReduce},
                                          {Algorithm::kTree, BuildDoubleBinaryTreeReduce},
                                          {Algorithm::kRing, BuildChainReduce}};
constexpr AlgorithmImpl kReduceLarge[] = {{Algorithm::kRing, BuildChainReduce},
                                          {Algorithm::kTree, BuildDoubleBinaryTreeReduce},
                                          {Algorithm::kBinomial, BuildBinomialReduce}};
constexpr AlgorithmImpl kAllGatherSmall[] = {
    {Algorithm::kRecursiveHalvingDoubling, BuildRecursiveDoublingAllGather},
    {Algorithm::kRing, BuildRingAllGather}};
constexpr AlgorithmImpl kAllGatherLarge[] = {
    {Algorithm::kRing, BuildRingAllGather},
    {Algorithm::kRecursiveHalvingDoubling, BuildRecursiveDoublingAllGather}};
constexpr AlgorithmImpl kReduceScatterSmall[] = {
    {Algorithm::kRecursiveHalvingDoubling, BuildRecursiveHalvingReduceScatter},
    {Algorithm::kRing, BuildRingReduceScatter}};
constexpr AlgorithmImpl kReduceScatterLarge[] = {
    {Algorithm::kRing, BuildRingReduceScatter},
    {Algorithm::kRecursiveHalvingDoubling, BuildRecursiveHalvingReduceScatter}};
constexpr AlgorithmImpl kAlltoAll[] = {{Algorithm::kPairwise, BuildPairwiseAlltoAll}};

}  // namespace

std::span<const AlgorithmImpl> CandidateAlgorithms(Collective c, size_t bytes, int nranks) {
  const bool small = bytes < kSmallMessageBytes || nranks <= 1;
  switch (c) {
    case Collective::kAllReduce:
      return small ? std::span<const AlgorithmImpl>(kAllReduceSmall) : kAllReduceLarge;
    case Collective::kBroadcast:
      return small ? std::span<const AlgorithmImpl>(kBroadcastSmall) : kBroadcastLarge;
    case Collective::kReduce:
      return small ? std::span<const AlgorithmImpl>(kReduceSmall) : kReduceLarge;
    case Collective::kAllGather:
      return small ? std::span<const AlgorithmImpl>(kAllGatherSmall) : kAllGatherLarge;
    case Collective::kReduceScatter:
      return small ? std::span<const AlgorithmImpl>(kReduceScatterSmall) : kReduceScatterLarge;
    case Collective::kAlltoAll:
      return kAlltoAll;
  }
  return {};
}

Status SelectAlgorithm(const AlgorithmFilter& filter, Collective c, size_t bytes, int nranks,
                       AlgorithmImpl* out) {
  const std::span<const AlgorithmImpl> candidates = CandidateAlgorithms(c, bytes, nranks);
  for (const AlgorithmImpl& impl : candidates) {
    if (filter.Allows(c, impl.algorithm)) {
      *out = impl;
      return Status::Ok();
    }
  }
  // Nothing allowed: let the filter explain, naming what exists.
  std::vector<Algorithm> names;
  for (const AlgorithmImpl& impl : candidates) names.push_back(impl.algorithm);
  Algorithm unused;
  Status st = filter.Choose(c, names, &unused);
  return st.ok() ? InternalError("algorithm selection is inconsistent") : st;
}

}  // namespace baton
