// BATON_ALGO parsing, NCCL's syntax: lists, exclusion, per-collective scopes.
#include <gtest/gtest.h>

#include "tuning/algorithm.h"

namespace baton {
namespace {

TEST(AlgorithmFilterTest, EmptyAllowsEverything) {
  AlgorithmFilter f;
  ASSERT_TRUE(AlgorithmFilter::Parse("", &f).ok());
  EXPECT_TRUE(f.allows(Collective::kAllReduce, Algorithm::kTree));
  Algorithm a;
  ASSERT_TRUE(f.choose(Collective::kAllReduce, {Algorithm::kRing, Algorithm::kTree}, &a).ok());
  EXPECT_EQ(a, Algorithm::kRing);
}

TEST(AlgorithmFilterTest, ListsExclusionAndScopes) {
  AlgorithmFilter f;
  ASSERT_TRUE(AlgorithmFilter::Parse("Tree,rhd", &f).ok());
  EXPECT_TRUE(f.allows(Collective::kBroadcast, Algorithm::kTree));
  EXPECT_FALSE(f.allows(Collective::kBroadcast, Algorithm::kRing));
  ASSERT_TRUE(AlgorithmFilter::Parse("^ring", &f).ok());
  EXPECT_FALSE(f.allows(Collective::kAllReduce, Algorithm::kRing));
  EXPECT_TRUE(f.allows(Collective::kAllReduce, Algorithm::kTree));
  ASSERT_TRUE(AlgorithmFilter::Parse("allreduce:tree;ring", &f).ok());
  EXPECT_TRUE(f.allows(Collective::kAllReduce, Algorithm::kTree));
  EXPECT_FALSE(f.allows(Collective::kAllReduce, Algorithm::kRing));
  EXPECT_TRUE(f.allows(Collective::kBroadcast, Algorithm::kRing));
  EXPECT_FALSE(f.allows(Collective::kBroadcast, Algorithm::kTree));
}

TEST(AlgorithmFilterTest, ImpossibleRequestsAreInvalidUsage) {
  AlgorithmFilter f;
  EXPECT_EQ(AlgorithmFilter::Parse("bogus", &f).code(), batonInvalidUsage);
  EXPECT_EQ(AlgorithmFilter::Parse("gather:ring", &f).code(), batonInvalidUsage);
  ASSERT_TRUE(AlgorithmFilter::Parse("tree", &f).ok());
  Algorithm a;
  Status st = f.choose(Collective::kAllReduce, {Algorithm::kRing}, &a);
  EXPECT_EQ(st.code(), batonInvalidUsage);
  EXPECT_NE(st.message().find("available: ring"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace baton
