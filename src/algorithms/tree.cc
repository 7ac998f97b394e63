// Tree algorithms as schedule builders. All five share one engine: a rank
// is given its place in one or two trees (parent, children, the elements the
// tree carries) and emits, chunk by chunk, the "up" steps (receive each
// child's partial result, reduce it into its own, pass it on to the parent)
// and/or the "down" steps (receive from the parent, forward to the children).
#include "algorithms/tree.h"

#include <algorithm>
#include <tuple>
#include <vector>

#include "algorithms/ops.h"
#include "base/datatype.h"
#include "base/partition.h"

namespace baton {
namespace {

// Smallest power of two >= n (n >= 1).
int CeilPow2(int n) {
  int b = 1;
  while (b < n) b <<= 1;
  return b;
}

// Number of steps from a btree's root to its deepest leaf: ceil(log2 p).
int BtreeHeight(int p) {
  int h = 0;
  while ((1 << h) < p) ++h;
  return h;
}

// Links computed in a relabelled tree (whose nodes are roles) turned back
// into ranks: `to_rank` maps a role to the rank that plays it.
template <typename ToRank>
TreeLinks Relabel(const TreeLinks& l, ToRank to_rank) {
  TreeLinks out;
  out.parent = l.parent < 0 ? -1 : to_rank(l.parent);
  for (int k = 0; k < 2; ++k) out.children[k] = l.children[k] < 0 ? -1 : to_rank(l.children[k]);
  return out;
}

// One rank's place in one tree and the elements [begin, end) it carries.
struct TreePart {
  int parent = -1;
  std::vector<int> children;  // reduced in this order (up), sent in this order (down)
  size_t begin = 0, end = 0;
};

// The engine's view of `l`: the children that exist, in order, and the range.
TreePart PartOf(const TreeLinks& l, size_t begin, size_t end) {
  TreePart t;
  t.parent = l.parent;
  for (int c : l.children)
    if (c >= 0) t.children.push_back(c);
  t.begin = begin;
  t.end = end;
  return t;
}

// The engine. `up`: reduce every tree's elements to its root (into a.recv
// there). `down`: broadcast them from the root (a.send there if !up, else
// the reduced a.recv) into everyone's a.recv. Each tree's range is cut into
// chunks; the steps of all (tree, chunk, phase) are emitted sorted by one
// key that every rank computes alike, so that whenever two ranks exchange
// messages in both trees, both list them in the same order (the wire
// protocol), and every step only waits for steps of smaller keys or for the
// same chunk's flow through its tree, which rules out deadlock.
//
// Down steps get the key chunk + `lag`: on a pair of ranks linked in both
// trees, one queue carries one tree's up messages and the other's down
// messages. A down message of chunk j is ready only after chunk j went all
// the way up and part of the way down again, so keying it j would stall the
// up stream behind each round trip (several times slower in the tests'
// chunk-pipeline model); keying it j + lag (about a round trip) interleaves
// the two streams the way they become ready.
void BuildTreeSchedule(const CollArgs& a, const std::vector<TreePart>& trees, bool up, bool down,
                       size_t lag, Schedule* out) {
  const size_t es = DatatypeSize(a.datatype);
  const auto* send = static_cast<const uint8_t*>(a.send);
  auto* recv = static_cast<uint8_t*>(a.recv);
  const uint32_t divisor = a.op == batonAvg ? static_cast<uint32_t>(a.nranks) : 0;
  if (a.count == 0 || es == 0) return;
  if (a.nranks == 1) {
    if (send != recv) out->Add(CopyOp(a, send, recv, a.count * es));
    return;
  }
  // A reduce-only pass must leave a.recv of non-roots alone (it may be
  // null), so their partial results go to scratch.
  uint8_t* partial = recv;
  if (up && !down) {
    bool needs = false;
    for (const TreePart& t : trees) needs |= t.parent >= 0 && !t.children.empty();
    partial = needs ? out->AllocScratch(a.count * es) : nullptr;
  }
  if (down && !up && send != recv) {
    for (const TreePart& t : trees) {
      if (t.parent >= 0) continue;
      // Broadcast root: its own output is a local copy; it sends from a.send.
      out->Add(CopyOp(a, send, recv, a.count * es));
      break;
    }
  }

  struct Step {
    size_t key;
    bool is_down;
    int tree;
    size_t chunk;
  };
  std::vector<Step> steps;
  std::vector<size_t> nchunks(trees.size());
  std::vector<std::vector<int>> up_done(trees.size());  // per chunk: the last up op
  for (size_t t = 0; t < trees.size(); ++t) {
    const size_t elems = trees[t].end - trees[t].begin;
    if (elems == 0) continue;  // e.g. count == 1: the second tree carries nothing
    nchunks[t] = ChunksFor(elems, es, a.chunk_bytes);
    up_done[t].assign(nchunks[t], -1);
    for (size_t j = 0; j < nchunks[t]; ++j) {
      if (up) steps.push_back({j, false, static_cast<int>(t), j});
      if (down) steps.push_back({j + (up ? lag : 0), true, static_cast<int>(t), j});
    }
  }
  std::sort(steps.begin(), steps.end(), [](const Step& x, const Step& y) {
    return std::tie(x.key, x.is_down, x.tree) < std::tie(y.key, y.is_down, y.tree);
  });

  for (const Step& s : steps) {
    const TreePart& t = trees[s.tree];
    size_t b, e;
    Partition(t.end - t.begin, nchunks[s.tree], s.chunk, &b, &e);
    const size_t off = (t.begin + b) * es, len = (e - b) * es;
    const bool root = t.parent < 0;
    if (!s.is_down) {
      // Own input first, then the children in their fixed order, chained so
      // that the reduction order does not depend on arrival order.
      const uint8_t* acc_in = send + off;
      uint8_t* acc = t.children.empty() ? nullptr : (root ? recv : partial) + off;
      int last = -1;
      for (size_t k = 0; k < t.children.size(); ++k) {
        const bool is_last = root && k + 1 == t.children.size();
        last = out->Add(RecvOp(a, t.children[k], acc, len, acc_in, is_last ? divisor : 0, last));
        acc_in = acc;
      }
      if (!root) last = out->Add(SendOp(t.parent, acc_in, len, last));
      up_done[s.tree][s.chunk] = last;
      continue;
    }
    const uint8_t* src = recv + off;
    int dep = up ? up_done[s.tree][s.chunk] : -1;
    if (root && !up) {
      src = send + off;
    } else if (!root) {
      // After an up step, the buffer may still be being sent to the parent
      // (in place, or an inner node's partial): receive over it only after.
      dep = out->Add(RecvOp(a, t.parent, recv + off, len, nullptr, 0, dep));
    }
    for (int c : t.children) out->Add(SendOp(c, src, len, dep));
  }
}

// Both halves of [0, count) as the ranges of two trees.
std::vector<TreePart> TwoTrees(const CollArgs& a, const TreeLinks links[2]) {
  std::vector<TreePart> trees;
  for (int t = 0; t < 2; ++t) {
    size_t b, e;
    Partition(a.count, 2, t, &b, &e);
    trees.push_back(PartOf(links[t], b, e));
  }
  return trees;
}

// The binomial tree over relative ranks (as in MPICH): v's parent is v
// without its lowest set bit, its children are v + m for powers of two m
// below that bit. Child v + m roots the subtree [v + m, v + 2m).
// `largest_first` lists the children by decreasing subtree (broadcast: the
// one with the most to forward starts first), else by increasing subtree
// (reduce: the small subtrees finish first, so reduce them first).
TreePart BinomialPart(const CollArgs& a, bool largest_first) {
  const int p = a.nranks;
  const int v = Mod(a.rank - a.root, p);
  const int low = v == 0 ? CeilPow2(p) : (v & -v);
  TreePart t;
  t.parent = v == 0 ? -1 : (v - low + a.root) % p;
  for (int m = 1; m < low && v + m < p; m <<= 1) t.children.push_back((v + m + a.root) % p);
  if (largest_first) std::reverse(t.children.begin(), t.children.end());
  t.end = a.count;
  return t;
}

}  // namespace

// ncclGetBtree's construction, rewritten from its description.
TreeLinks BtreeLinks(int rank, int nranks) {
  TreeLinks l;
  if (nranks <= 1) return l;
  // The level of rank r is its lowest set bit; rank 0 sits above them all.
  int bit = 1;
  while (bit < nranks && !(rank & bit)) bit <<= 1;
  if (rank == 0) {
    l.children[0] = bit >> 1;
    return l;
  }
  // Parent: one level up, on the side that keeps the in-order layout; when
  // that rank does not exist, the next level that does (rank - bit).
  int up = (rank ^ bit) | (bit << 1);
  l.parent = up < nranks ? up : rank ^ bit;
  // Children: rank -/+ half the level; the right one, if out of range, is
  // replaced by the nearest lower level's rank that is in range.
  int half = bit >> 1;
  if (half == 0) return l;
  l.children[0] = rank - half;
  while (half > 0 && rank + half >= nranks) half >>= 1;
  if (half > 0) l.children[1] = rank + half;
  return l;
}

// ncclGetDtree's construction: the btree and its mirror or shift.
void DoubleBinaryTreeLinks(int rank, int nranks, TreeLinks trees[2]) {
  const int p = nranks;
  trees[0] = BtreeLinks(rank, p);
  if (p % 2 == 0) {
    // Mirror: odd ranks (btree leaves) become p-1-odd = even roles (inner).
    auto mirror = [p](int x) { return p - 1 - x; };
    trees[1] = Relabel(BtreeLinks(mirror(rank), p), mirror);
  } else {
    // Mirroring an odd p maps odd ranks to odd ones; shifting by one does not.
    trees[1] = Relabel(BtreeLinks(Mod(rank - 1, p), p), [p](int x) { return (x + 1) % p; });
  }
}

// Both trees over relative ranks, relative rank 0 (the root) on top of both.
void RootedDoubleBinaryTreeLinks(int rank, int nranks, int root, TreeLinks trees[2]) {
  const int p = nranks;
  const int v = Mod(rank - root, p);
  auto rel_to_rank = [p, root](int x) { return (x + root) % p; };
  trees[0] = Relabel(BtreeLinks(v, p), rel_to_rank);
  // Relative rank v != 0 plays role v % (p-1) + 1 in tree 1, i.e. roles 1..p-1
  // rotated by one: btree leaves (odd roles) then land on even relative
  // ranks, the inner nodes of tree 0, while role 0 (the root) stays put.
  if (p <= 1) {
    trees[1] = trees[0];
    return;
  }
  const int role = v == 0 ? 0 : v % (p - 1) + 1;
  trees[1] = Relabel(BtreeLinks(role, p),
                     [&](int r) { return rel_to_rank(r == 0 ? 0 : (r == 1 ? p - 1 : r - 1)); });
}

// Each tree reduces half of the elements up and broadcasts it back down.
// The own input is the first operand and the children follow in a fixed
// order; since only the root's result survives (every rank receives its
// bytes), all ranks end bitwise equal. The root of each tree divides once
// for avg, in the receive of its last child.
void BuildDoubleBinaryTreeAllReduce(const CollArgs& a, Schedule* out) {
  TreeLinks links[2];
  DoubleBinaryTreeLinks(a.rank, a.nranks, links);
  // Chunk j's round trip takes about twice the height in steps.
  const size_t lag = 2 * static_cast<size_t>(BtreeHeight(a.nranks));
  BuildTreeSchedule(a, TwoTrees(a, links), true, true, lag, out);
}

// The binomial broadcast: in step k the ranks that have the data send it to
// the ones 2^(K-1-k) further on, so all have it after ceil(log2 p) steps.
// It is chunked too, so medium messages pipeline along the tree.
void BuildBinomialBroadcast(const CollArgs& a, Schedule* out) {
  BuildTreeSchedule(a, {BinomialPart(a, true)}, false, true, 0, out);
}

// The binomial reduce: the mirror of the broadcast; each rank combines its
// input with its children's partial results (smallest subtree first) in a
// scratch buffer and sends that to its parent.
void BuildBinomialReduce(const CollArgs& a, Schedule* out) {
  BuildTreeSchedule(a, {BinomialPart(a, false)}, true, false, 0, out);
}

// Broadcast of half of the data down each of the two rooted trees.
void BuildDoubleBinaryTreeBroadcast(const CollArgs& a, Schedule* out) {
  TreeLinks links[2];
  RootedDoubleBinaryTreeLinks(a.rank, a.nranks, a.root, links);
  BuildTreeSchedule(a, TwoTrees(a, links), false, true, 0, out);
}

// Reduce of half of the data up each of the two rooted trees.
void BuildDoubleBinaryTreeReduce(const CollArgs& a, Schedule* out) {
  TreeLinks links[2];
  RootedDoubleBinaryTreeLinks(a.rank, a.nranks, a.root, links);
  BuildTreeSchedule(a, TwoTrees(a, links), true, false, 0, out);
}

}  // namespace baton
