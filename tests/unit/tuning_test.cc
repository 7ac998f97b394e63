// The tuning layer: BATON_ALGO parsing (NCCL's syntax: lists, exclusion,
// per-collective scopes) and the candidate lists of the selection, which
// must hold exactly the algorithms algorithms/collective.h says implement
// each collective.
#include <gtest/gtest.h>

#include <set>

#include "algorithms/collective.h"
#include "tuning/algorithm_filter.h"
#include "tuning/select.h"

namespace baton {
namespace {

TEST(AlgorithmFilterTest, EmptyAllowsEverything) {
  AlgorithmFilter f;
  ASSERT_TRUE(AlgorithmFilter::Parse("", &f).ok());
  EXPECT_TRUE(f.Allows(Collective::kAllReduce, Algorithm::kTree));
  Algorithm a;
  ASSERT_TRUE(f.Choose(Collective::kAllReduce, {Algorithm::kRing, Algorithm::kTree}, &a).ok());
  EXPECT_EQ(a, Algorithm::kRing);
}

TEST(AlgorithmFilterTest, ListsExclusionAndScopes) {
  AlgorithmFilter f;
  ASSERT_TRUE(AlgorithmFilter::Parse("Tree,rhd", &f).ok());
  EXPECT_TRUE(f.Allows(Collective::kBroadcast, Algorithm::kTree));
  EXPECT_FALSE(f.Allows(Collective::kBroadcast, Algorithm::kRing));
  ASSERT_TRUE(AlgorithmFilter::Parse("^ring", &f).ok());
  EXPECT_FALSE(f.Allows(Collective::kAllReduce, Algorithm::kRing));
  EXPECT_TRUE(f.Allows(Collective::kAllReduce, Algorithm::kTree));
  ASSERT_TRUE(AlgorithmFilter::Parse("allreduce:tree;ring", &f).ok());
  EXPECT_TRUE(f.Allows(Collective::kAllReduce, Algorithm::kTree));
  EXPECT_FALSE(f.Allows(Collective::kAllReduce, Algorithm::kRing));
  EXPECT_TRUE(f.Allows(Collective::kBroadcast, Algorithm::kRing));
  EXPECT_FALSE(f.Allows(Collective::kBroadcast, Algorithm::kTree));
}

TEST(AlgorithmFilterTest, ImpossibleRequestsAreInvalidUsage) {
  AlgorithmFilter f;
  EXPECT_EQ(AlgorithmFilter::Parse("bogus", &f).code(), batonInvalidUsage);
  EXPECT_EQ(AlgorithmFilter::Parse("gathering:ring", &f).code(), batonInvalidUsage);
  ASSERT_TRUE(AlgorithmFilter::Parse("tree", &f).ok());
  Algorithm a;
  Status st = f.Choose(Collective::kAllReduce, {Algorithm::kRing}, &a);
  EXPECT_EQ(st.code(), batonInvalidUsage);
  EXPECT_NE(st.message().find("available: ring"), std::string::npos) << st.message();
}

// The builders the selection knows are the algorithms that implement each
// collective, each once.
TEST(SelectTest, ImplementationsAreTheImplementingAlgorithms) {
  for (int c = 0; c < kNumCollectives; ++c) {
    const auto coll = static_cast<Collective>(c);
    std::set<Algorithm> listed;
    for (const AlgorithmImpl& impl : ImplementationsOf(coll)) {
      EXPECT_TRUE(listed.insert(impl.algorithm).second)
          << CollectiveName(coll) << " lists " << AlgorithmName(impl.algorithm) << " twice";
      EXPECT_NE(impl.build, nullptr);
    }
    for (int a = 0; a < kNumAlgorithms; ++a) {
      const auto algo = static_cast<Algorithm>(a);
      EXPECT_EQ(listed.count(algo) == 1, Implements(coll, algo))
          << CollectiveName(coll) << " / " << AlgorithmName(algo);
    }
  }
}

TEST(SelectTest, NamesRoundTrip) {
  for (int c = 0; c < kNumCollectives; ++c) {
    Collective parsed;
    ASSERT_TRUE(CollectiveFromName(CollectiveName(static_cast<Collective>(c)), &parsed));
    EXPECT_EQ(static_cast<int>(parsed), c);
  }
  for (int a = 0; a < kNumAlgorithms; ++a) {
    Algorithm parsed;
    ASSERT_TRUE(AlgorithmFromName(AlgorithmName(static_cast<Algorithm>(a)), &parsed));
    EXPECT_EQ(static_cast<int>(parsed), a);
  }
  Algorithm unused;
  EXPECT_TRUE(AlgorithmFromName("RING", &unused));
  EXPECT_FALSE(AlgorithmFromName("chain", &unused));
}

}  // namespace
}  // namespace baton
