// The shapes of the trees the tree algorithms use (algorithms/tree.h), for
// every rank count up to 1100: NCCL's binary-tree layout, the double tree's
// leaves of one tree being inner nodes of the other, and the rooted double
// tree with the root on top of both; each a single tree of logarithmic height.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "algorithms/tree.h"

namespace baton {
namespace {

int CeilLog2(int n) {
  int k = 0;
  while ((1 << k) < n) ++k;
  return k;
}

// Checks that the links of all ranks form one tree rooted at `root`: each
// child names its parent back, every rank reaches the root, and the height
// is at most `max_height`.
void CheckTree(int p, int root, int max_height, const std::vector<TreeLinks>& links) {
  for (int r = 0; r < p; ++r) {
    EXPECT_EQ(links[r].parent < 0, r == root) << "rank " << r;
    for (int c : links[r].children) {
      if (c < 0) continue;
      ASSERT_LT(c, p);
      EXPECT_EQ(links[c].parent, r) << "child " << c << " of " << r;
    }
    if (links[r].parent >= 0) {
      const auto& ch = links[links[r].parent].children;
      EXPECT_TRUE(ch[0] == r || ch[1] == r) << "rank " << r << " not a child of its parent";
    }
    int depth = 0;
    for (int x = r; x != root && depth <= p; x = links[x].parent) ++depth;
    EXPECT_LE(depth, max_height) << "rank " << r;
  }
}

TEST(TreeShapeTest, BtreeMatchesNcclLayout) {
  // The 14-rank example: in-order, a rank's level is its lowest set bit,
  // and 12's right child (14) does not exist, so 13 hangs below it directly.
  const std::map<int, std::pair<int, int>> want = {{0, {8, -1}},   {8, {4, 12}}, {4, {2, 6}},
                                                   {12, {10, 13}}, {2, {1, 3}},  {6, {5, 7}},
                                                   {10, {9, 11}}};
  for (int r = 0; r < 14; ++r) {
    TreeLinks l = BtreeLinks(r, 14);
    auto it = want.find(r);
    std::pair<int, int> ch = it == want.end() ? std::make_pair(-1, -1) : it->second;
    EXPECT_EQ(l.children[0], ch.first) << r;
    EXPECT_EQ(l.children[1], ch.second) << r;
  }
  EXPECT_EQ(BtreeLinks(13, 14).parent, 12);
  EXPECT_EQ(BtreeLinks(0, 1).NumChildren(), 0);
  for (int p = 1; p <= 1100; ++p) {
    std::vector<TreeLinks> links(p);
    for (int r = 0; r < p; ++r) {
      links[r] = BtreeLinks(r, p);
      // Odd ranks are exactly the leaves.
      EXPECT_EQ(links[r].NumChildren() == 0, r % 2 == 1 || p == 1) << "p=" << p << " r=" << r;
    }
    CheckTree(p, 0, CeilLog2(p), links);
  }
}

TEST(TreeShapeTest, DoubleTreeLeavesOfOneAreInnerNodesOfTheOther) {
  for (int p = 2; p <= 1100; p += (p < 64 ? 1 : 37)) {
    SCOPED_TRACE("p=" + std::to_string(p));
    std::vector<TreeLinks> t0(p), t1(p);
    for (int r = 0; r < p; ++r) {
      TreeLinks l[2];
      DoubleBinaryTreeLinks(r, p, l);
      t0[r] = l[0];
      t1[r] = l[1];
    }
    CheckTree(p, 0, CeilLog2(p), t0);
    // NCCL's second root: p-1 (mirror) or 1 (shift).
    CheckTree(p, p % 2 == 0 ? p - 1 : 1, CeilLog2(p), t1);
    int leaves0 = 0, leaves1 = 0;
    for (int r = 0; r < p; ++r) {
      const int c0 = t0[r].NumChildren(), c1 = t1[r].NumChildren();
      leaves0 += c0 == 0;
      leaves1 += c1 == 0;
      // No rank forwards to more than two children in all: per chunk it
      // sends at most 4 half-size messages, whatever p.
      EXPECT_LE(c0 + c1, 2) << "rank " << r;
      if (p % 2 == 1 && r == 0) {
        // The one exception, inherent to NCCL's construction: a btree over
        // an odd p has (p-1)/2 leaves, so two of them have p-1 leaf slots
        // for p ranks. Rank 0 is the root of tree 0 and the single-child
        // node p-1 of the shifted tree 1, one child in each.
        EXPECT_EQ(c0, 1);
        EXPECT_EQ(c1, 1);
        continue;
      }
      // A leaf in exactly one tree, an inner node in the other.
      EXPECT_TRUE((c0 == 0) != (c1 == 0)) << "rank " << r << ": " << c0 << ", " << c1;
    }
    EXPECT_EQ(leaves0, p / 2);
    EXPECT_EQ(leaves1, p / 2);
  }
}

TEST(TreeShapeTest, RootedDoubleTreeHasRootOnTopOfBoth) {
  for (int p = 2; p <= 1100; p += (p < 64 ? 1 : 37)) {
    for (int root : {0, p / 2, p - 1}) {
      SCOPED_TRACE("p=" + std::to_string(p) + " root=" + std::to_string(root));
      std::vector<TreeLinks> t0(p), t1(p);
      for (int r = 0; r < p; ++r) {
        TreeLinks l[2];
        RootedDoubleBinaryTreeLinks(r, p, root, l);
        t0[r] = l[0];
        t1[r] = l[1];
      }
      CheckTree(p, root, CeilLog2(p), t0);
      CheckTree(p, root, CeilLog2(p), t1);
      EXPECT_EQ(t0[root].NumChildren(), 1);
      EXPECT_EQ(t1[root].NumChildren(), 1);
      int leaf_in_both = 0;
      for (int r = 0; r < p; ++r) {
        if (r == root) continue;
        const int c0 = t0[r].NumChildren(), c1 = t1[r].NumChildren();
        // An inner node in at most one tree, a leaf in at least one.
        EXPECT_TRUE(c0 == 0 || c1 == 0) << "rank " << r;
        leaf_in_both += c0 == 0 && c1 == 0;
      }
      // Counting again: p-1 non-root ranks and p/2 + p/2 leaf slots.
      EXPECT_EQ(leaf_in_both, p % 2 == 0 ? 1 : 0);
    }
  }
}

}  // namespace
}  // namespace baton
