// Tree algorithms: latency-optimal (O(log p) steps) schedules for allreduce,
// broadcast and reduce. The double binary tree (as in NCCL) sends half of
// the data down each of two trees whose inner nodes are (nearly) disjoint,
// so every rank forwards about n bytes per direction however large p is;
// the binomial tree is for messages too small for bandwidth to matter.
#pragma once

#include "algorithms/schedule.h"

namespace baton {

// One rank's links in one tree: -1 where there is none. Children are listed
// in the order their contributions are reduced (a fixed order, so a rank's
// result does not depend on which message happens to arrive first).
struct TreeLinks {
  int parent = -1;
  int children[2] = {-1, -1};

  // Number of children (0 for a leaf).
  int NumChildren() const { return (children[0] >= 0) + (children[1] >= 0); }
};

// NCCL's btree over ranks 0..nranks-1 (ncclGetBtree): an in-order binary
// tree in which rank r's level is its lowest set bit, so odd ranks are the
// leaves; rank 0 is the root and has the single child 2^floor(log2(p-1)).
// Its height is at most ceil(log2 p).
TreeLinks BtreeLinks(int rank, int nranks);

// The two trees of NCCL's double binary tree (ncclGetDtree): tree 0 is the
// btree, tree 1 its mirror (rank r plays the part of p-1-r) for even p and
// its shift (rank r plays the part of r-1 mod p) for odd p. For even p every
// rank is a leaf in one tree and an inner node in the other; for odd p that
// holds for every rank but 0, which has exactly one child in each tree
// (counting shows no pair of btree-shaped trees can do better).
void DoubleBinaryTreeLinks(int rank, int nranks, TreeLinks trees[2]);

// Two btrees over the ranks relative to `root`, both rooted at `root`: tree
// 0 is the btree, tree 1 the btree with the non-root ranks rotated by one
// (relative rank v plays the part of v % (p-1) + 1), which again makes the
// leaves of one tree the inner nodes of the other (for even p one rank is a
// leaf in both). The root has one child in each tree.
void RootedDoubleBinaryTreeLinks(int rank, int nranks, int root, TreeLinks trees[2]);

// Allreduce over the double binary tree: each tree reduces one half of the
// elements up to its root and broadcasts it back down, in chunks of about
// a.chunk_bytes so that the levels work on different chunks at once. Every
// rank ends with the root's bytes, so results are bitwise identical.
void BuildDoubleBinaryTreeAllReduce(const CollArgs& a, Schedule* out);

// Broadcast of a.root's a.send into every rank's a.recv along the binomial
// tree over relative ranks: ceil(log2 p) steps, for small messages.
void BuildBinomialBroadcast(const CollArgs& a, Schedule* out);

// Reduce into a.root's a.recv along the binomial tree over relative ranks
// (a.recv of other ranks is not touched and may be null).
void BuildBinomialReduce(const CollArgs& a, Schedule* out);

// Broadcast over RootedDoubleBinaryTreeLinks: each tree carries half of the
// data, pipelined in chunks, so the root sends each byte once.
void BuildDoubleBinaryTreeBroadcast(const CollArgs& a, Schedule* out);

// Reduce over RootedDoubleBinaryTreeLinks, each tree carrying half of the
// data, pipelined in chunks; the result lands only in a.root's a.recv.
void BuildDoubleBinaryTreeReduce(const CollArgs& a, Schedule* out);

}  // namespace baton
