// Gather and scatter schedules; see gather_scatter.h.
#include "algorithms/gather_scatter.h"

#include <algorithm>
#include <vector>

#include "algorithms/ops.h"
#include "base/datatype.h"

namespace baton {
namespace {

// A rank's place in the binomial tree over relative ranks v = rank - root
// (mod p): its parent is v without its lowest set bit, its children are
// v + m for the powers of two m below that bit, and its subtree is the
// relative ranks [v, end).
struct BinomialPlace {
  int v = 0, end = 0, parent = -1;
  std::vector<int> children;  // relative ranks, smallest subtree first
  BinomialPlace(int rank, int root, int p) {
    v = Mod(rank - root, p);
    int low = 1;
    while (low < p && !(v & low)) low <<= 1;  // v = 0: the first power of two >= p
    end = std::min(p, v + low);
    if (v != 0) parent = v - low;
    for (int m = 1; m < low && v + m < p; m <<= 1) children.push_back(v + m);
  }
};

int EndOf(int v, int p) {
  int low = 1;
  while (low < p && !(v & low)) low <<= 1;
  return std::min(p, v + low);
}

// A message of one tree edge: elements [begin, end) of the relative order
// (relative rank u's block is [u * count, (u + 1) * count)).
struct Piece {
  size_t begin, end;
};

// Whether a rank's own block travels in pieces of its own, straight from
// (gather) or to (scatter) the user's buffer. Small blocks share a message
// with the subtree's, through scratch, so that a subtree is one message and
// the root sees ceil(log2 p) of them.
bool OwnBlockApart(size_t count, size_t chunk) {
  return count >= chunk;
}

// The messages that carry the blocks of relative ranks [lo, hi) over the
// edge into (or out of) relative rank lo: cut after lo's own block when it
// travels apart, at the wrap of relative ranks back to rank 0 (so that each
// piece is one range of the root's buffer), and at multiples of the chunk.
// Parent and child compute the same cuts; a child's cuts include its
// parent's within its range (the parent's own-block cut lies outside it),
// which is what lets a scatter forward each piece out of a single received
// one.
std::vector<Piece> PiecesOf(int lo, int hi, int wrap, size_t count, size_t chunk) {
  std::vector<size_t> cuts = {lo * count, hi * count};
  if (OwnBlockApart(count, chunk)) cuts.push_back((lo + 1) * count);
  if (wrap > lo && wrap < hi) cuts.push_back(wrap * count);
  for (size_t c = (lo * count / chunk + 1) * chunk; c < hi * count; c += chunk) cuts.push_back(c);
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  std::vector<Piece> pieces;
  for (size_t i = 0; i + 1 < cuts.size(); ++i) pieces.push_back({cuts[i], cuts[i + 1]});
  return pieces;
}

// Elements per chunk for the tree's cuts.
size_t ChunkElems(const CollArgs& a) {
  return std::max<size_t>(1, a.chunk_bytes / std::max<size_t>(1, DatatypeSize(a.datatype)));
}

}  // namespace

// The root receives every other rank's block straight into its output.
void BuildDirectGather(const CollArgs& a, Schedule* out) {
  const size_t blk = a.count * DatatypeSize(a.datatype);
  if (blk == 0) return;
  const auto* send = static_cast<const uint8_t*>(a.send);
  auto* recv = static_cast<uint8_t*>(a.recv);
  if (a.rank != a.root) {
    out->Add(SendOp(a.root, send, blk, -1));
    return;
  }
  if (send != recv + a.root * blk) out->Add(CopyOp(a, send, recv + a.root * blk, blk));
  // Staggered from the root on, as the pairwise alltoall.
  for (int k = 1; k < a.nranks; ++k) {
    const int from = (a.root + k) % a.nranks;
    out->Add(RecvOp(a, from, recv + from * blk, blk, nullptr, 0));
  }
}

// The root sends every other rank its block straight out of its input.
void BuildDirectScatter(const CollArgs& a, Schedule* out) {
  const size_t blk = a.count * DatatypeSize(a.datatype);
  if (blk == 0) return;
  const auto* send = static_cast<const uint8_t*>(a.send);
  auto* recv = static_cast<uint8_t*>(a.recv);
  if (a.rank != a.root) {
    out->Add(RecvOp(a, a.root, recv, blk, nullptr, 0));
    return;
  }
  if (recv != send + a.root * blk) out->Add(CopyOp(a, send + a.root * blk, recv, blk));
  for (int k = 1; k < a.nranks; ++k) {
    const int to = (a.root + k) % a.nranks;
    out->Add(SendOp(to, send + to * blk, blk, -1));
  }
}

// Every rank receives its children's subtrees (smallest first: they are
// ready first) and sends its own block, then the children's pieces, to its
// parent; a piece leaves as soon as the receives it covers are done. The
// root receives straight into its output, the others into scratch that
// holds their subtree in relative order.
void BuildBinomialGather(const CollArgs& a, Schedule* out) {
  const size_t es = DatatypeSize(a.datatype);
  const size_t blk = a.count * es;
  if (blk == 0) return;
  const int p = a.nranks;
  const auto* send = static_cast<const uint8_t*>(a.send);
  auto* recv = static_cast<uint8_t*>(a.recv);
  const BinomialPlace me(a.rank, a.root, p);
  const int wrap = p - a.root;  // relative rank of rank 0
  const size_t chunk = ChunkElems(a);
  const bool root = me.parent < 0;
  if (root && send != recv + a.root * blk) out->Add(CopyOp(a, send, recv + a.root * blk, blk));
  // Scratch holds the subtree in relative order from `base` on.
  const int base = OwnBlockApart(a.count, chunk) ? me.v + 1 : me.v;
  uint8_t* scratch = !root && me.end > base ? out->AllocScratch((me.end - base) * blk) : nullptr;
  // Where relative element e lands on this rank.
  auto at = [&](size_t e) -> uint8_t* {
    if (root) return recv + ((e + a.root * a.count) % (p * a.count)) * es;
    return scratch + (e - base * a.count) * es;
  };
  struct Received {
    Piece piece;
    int op;
  };
  std::vector<Received> received;
  if (!root && base == me.v)  // the own block goes out with the subtree's
    received.push_back({{me.v * a.count, (me.v + 1) * a.count},
                        out->Add(CopyOp(a, send, at(me.v * a.count), blk))});
  for (int c : me.children) {
    for (const Piece& pc : PiecesOf(c, EndOf(c, p), wrap, a.count, chunk)) {
      const int from = (c + a.root) % p;
      received.push_back(
          {pc, out->Add(RecvOp(a, from, at(pc.begin), (pc.end - pc.begin) * es, nullptr, 0))});
    }
  }
  if (root) return;
  const int parent = (me.parent + a.root) % p;
  for (const Piece& pc : PiecesOf(me.v, me.end, wrap, a.count, chunk)) {
    const size_t bytes = (pc.end - pc.begin) * es;
    if (base > me.v && pc.end <= (me.v + 1) * a.count) {  // own block: straight from the input
      out->Add(SendOp(parent, send + (pc.begin - me.v * a.count) * es, bytes, -1));
      continue;
    }
    // The last receive of each child that overlaps the piece (a peer's
    // receives complete in order; one child's pieces are consecutive).
    std::vector<int> deps;
    auto overlaps = [&](size_t i) {
      return received[i].piece.begin < pc.end && pc.begin < received[i].piece.end;
    };
    for (size_t i = 0; i < received.size(); ++i) {
      if (!overlaps(i)) continue;
      // The own block's copy is a queue of its own (peer -1).
      auto queue = [&](size_t k) {
        const Op& op = out->ops[received[k].op];
        return op.kind == Op::Kind::kCopy ? -1 : op.peer;
      };
      const bool child_ends =
          i + 1 == received.size() || queue(i + 1) != queue(i) || !overlaps(i + 1);
      if (child_ends) deps.push_back(received[i].op);
    }
    out->Add(SendOp(parent, at(pc.begin), bytes, Join(deps, out)));
  }
}

// The mirror of the gather: every rank receives its subtree's pieces from
// its parent (its own block straight into its output, the rest into
// scratch) and forwards each child's pieces, largest subtree first (it has
// the most to forward), each as soon as the piece that holds it is in.
void BuildBinomialScatter(const CollArgs& a, Schedule* out) {
  const size_t es = DatatypeSize(a.datatype);
  const size_t blk = a.count * es;
  if (blk == 0) return;
  const int p = a.nranks;
  const auto* send = static_cast<const uint8_t*>(a.send);
  auto* recv = static_cast<uint8_t*>(a.recv);
  const BinomialPlace me(a.rank, a.root, p);
  const int wrap = p - a.root;
  const size_t chunk = ChunkElems(a);
  const bool root = me.parent < 0;
  if (root && recv != send + a.root * blk) out->Add(CopyOp(a, send + a.root * blk, recv, blk));
  const int base = OwnBlockApart(a.count, chunk) ? me.v + 1 : me.v;
  uint8_t* scratch = !root && me.end > base ? out->AllocScratch((me.end - base) * blk) : nullptr;
  auto at = [&](size_t e) -> const uint8_t* {
    if (root) return send + ((e + a.root * a.count) % (p * a.count)) * es;
    return scratch + (e - base * a.count) * es;
  };
  struct Received {
    Piece piece;
    int op;
  };
  std::vector<Received> received;
  if (!root) {
    const int parent = (me.parent + a.root) % p;
    const size_t own_end = (me.v + 1) * a.count;
    std::vector<int> own_deps;  // the receives the own block arrives in (via scratch)
    for (const Piece& pc : PiecesOf(me.v, me.end, wrap, a.count, chunk)) {
      const size_t bytes = (pc.end - pc.begin) * es;
      const bool own_apart = base > me.v && pc.end <= own_end;
      uint8_t* dst =
          own_apart ? recv + (pc.begin - me.v * a.count) * es : const_cast<uint8_t*>(at(pc.begin));
      const int op = out->Add(RecvOp(a, parent, dst, bytes, nullptr, 0));
      received.push_back({pc, op});
      if (base == me.v && pc.begin < own_end) own_deps.push_back(op);
    }
    if (base == me.v) out->Add(CopyOp(a, at(me.v * a.count), recv, blk, Join(own_deps, out)));
  }
  for (auto it = me.children.rbegin(); it != me.children.rend(); ++it) {
    const int c = *it;
    const int to = (c + a.root) % p;
    for (const Piece& pc : PiecesOf(c, EndOf(c, p), wrap, a.count, chunk)) {
      int dep = -1;
      for (const Received& r : received)
        if (r.piece.begin <= pc.begin && pc.end <= r.piece.end) dep = r.op;
      out->Add(SendOp(to, at(pc.begin), (pc.end - pc.begin) * es, dep));
    }
  }
}

}  // namespace baton
