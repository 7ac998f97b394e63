// Recursive halving / doubling schedules. rhd.h describes the algorithms;
// the comments here say how they map onto send/recv/copy steps and why the
// dependencies are what they are.
//
// Dependencies follow three rules. A send waits for the receive that
// produced its data. A receive that reduces waits for the receive that
// produced its local operand. A receive waits for any earlier send that
// read the memory it writes (a transport may still be reading the send's
// source while the receive lands). Receives from different peers may
// complete in any order, so each receive also waits for the previous one:
// "the last receive is done" then means "every earlier step is done".
#include "algorithms/rhd.h"

#include <array>
#include <vector>

#include "algorithms/ops.h"
#include "algorithms/vblocks.h"
#include "base/datatype.h"
#include "base/partition.h"

namespace baton {
namespace {

// A rank's place in the folded power-of-two group. Even ranks below 2r are
// folded out (they give their data to rank + 1); the others get new ranks
// 0..p'-1 in rank order, so "lower new rank" still means "lower ranks'
// data", which keeps the reduction order canonical.
struct Fold {
  int p2 = 1;        // p': the largest power of two <= p
  int extra = 0;     // r = p - p'
  int steps = 0;     // log2(p')
  int newrank = 0;   // -1 when folded out
  int partner = -1;  // the other rank of a folded pair, else -1

  Fold(int rank, int p) {
    while (p2 * 2 <= p) {
      p2 *= 2;
      ++steps;
    }
    extra = p - p2;
    if (rank < 2 * extra) {
      partner = rank ^ 1;
      newrank = rank % 2 == 0 ? -1 : rank / 2;
    } else {
      newrank = rank - extra;
    }
  }
  bool FoldedOut() const { return newrank < 0; }
  // Whether this rank takes in the data of a folded-out partner.
  bool Absorbs() const { return newrank >= 0 && partner >= 0; }
  // The communicator rank playing new rank `nr`.
  int RankOf(int nr) const { return nr < extra ? 2 * nr + 1 : nr + extra; }
  // The first of the (one or two) ranks whose blocks new rank `nr` stands
  // for; FirstRank(p') == p, so [FirstRank(a), FirstRank(b)) is the blocks of
  // new ranks a..b-1.
  int FirstRank(int nr) const { return nr < extra ? 2 * nr : nr + extra; }
};

// The rank's part of a folded pair that sits out: hand over `send_bytes`,
// get `recv_bytes` of result back. The receive waits for the send in case
// the buffers overlap (in place).
void AddFoldedOut(const CollArgs& a, const Fold& f, const uint8_t* send, size_t send_bytes,
                  uint8_t* recv, size_t recv_bytes, Schedule* out) {
  int s = out->Add(SendOp(f.partner, send, send_bytes, -1));
  out->Add(OrderedRecvOp(a, f.partner, recv, recv_bytes, nullptr, false, 0, s, -1));
}

}  // namespace

void BuildRhdAllReduce(const CollArgs& a, Schedule* out) {
  const size_t bytes = a.count * DatatypeSize(a.datatype);
  if (a.count < static_cast<size_t>(a.nranks) || bytes < a.rhd_switch_bytes) {
    BuildRecursiveDoublingAllReduce(a, out);
  } else {
    BuildRabenseifnerAllReduce(a, out);
  }
}

// The start both allreduce variants share: nothing for an empty vector, a
// copy for one rank, the whole part of a folded-out rank, and the absorbing
// rank's receive of its partner's vector (the partner is the lower rank, so
// its data goes first). Returns false when the schedule is already complete;
// otherwise *input is what the power-of-two phase starts from and *last the
// receive it depends on (-1 if none).
bool StartFoldedAllReduce(const CollArgs& a, const Fold& f, size_t bytes, Schedule* out,
                          const uint8_t** input, int* last) {
  const auto* send = static_cast<const uint8_t*>(a.send);
  auto* recv = static_cast<uint8_t*>(a.recv);
  *input = send;
  *last = -1;
  if (bytes == 0) return false;
  if (a.nranks == 1) {
    if (send != recv) out->Add(CopyOp(a, send, recv, bytes, -1));
    return false;
  }
  if (f.FoldedOut()) {
    AddFoldedOut(a, f, send, bytes, recv, bytes, out);
    return false;
  }
  if (f.Absorbs()) {
    *last = out->Add(OrderedRecvOp(a, f.partner, recv, bytes, send, true, 0, -1, -1));
    *input = recv;
  }
  return true;
}

// Step k exchanges whole vectors with new rank ^ 2^k. The outgoing vector
// must stay intact while the incoming one is reduced, so step k reads one
// buffer and writes another, alternating between recv and scratch so that
// the last step lands in recv. A receive waits for the previous step's send,
// which read the buffer it now overwrites.
void BuildRecursiveDoublingAllReduce(const CollArgs& a, Schedule* out) {
  const size_t bytes = a.count * DatatypeSize(a.datatype);
  auto* recv = static_cast<uint8_t*>(a.recv);
  const Fold f(a.rank, a.nranks);
  int last;  // the latest receive
  const uint8_t* input;
  if (!StartFoldedAllReduce(a, f, bytes, out, &input, &last)) return;
  const int steps = f.steps;
  // What step k writes; step k + 1 reads it. On the stack: steps < 32, and
  // this builder runs on every small call's latency path.
  std::array<uint8_t*, 32> dst{};
  uint8_t* ping = steps > 1 ? out->AllocScratch(bytes) : nullptr;
  for (int k = 0; k < steps; ++k) dst[k] = (steps - 1 - k) % 2 == 0 ? recv : ping;
  // In place (or after the fold) the input is recv itself, and step 0 must
  // not write the buffer it sends from. Where the transport holds the send
  // (CollArgs::sends_buffered_bytes) the receive waits for it and reduces
  // in place; otherwise both ranks would wait for each other, so step 0
  // writes scratch, which with one step costs a copy back.
  const bool overwrites_input = dst[0] == input;
  const bool wait_for_send = overwrites_input && bytes <= a.sends_buffered_bytes;
  const bool detour = overwrites_input && !wait_for_send;
  if (detour) dst[0] = out->AllocScratch(bytes);
  int prev_send = -1;
  for (int k = 0; k < steps; ++k) {
    const int bit = 1 << k;
    const int peer = f.RankOf(f.newrank ^ bit);
    const bool peer_lower = (f.newrank & bit) != 0;
    const uint8_t* src = k == 0 ? input : dst[k - 1];
    const int s = out->Add(SendOp(peer, src, bytes, last));
    last = out->Add(OrderedRecvOp(a, peer, dst[k], bytes, src, peer_lower,
                                  k == steps - 1 ? AvgDivisor(a) : 0, last,
                                  k == 0 && wait_for_send ? s : prev_send));
    prev_send = s;
  }
  if (detour && steps == 1) {
    Op copy = CopyOp(a, dst[0], recv, bytes, last);
    copy.deps[1] = prev_send;
    last = out->Add(copy);
  }
  if (f.Absorbs()) out->Add(SendOp(f.partner, recv, bytes, last));
}

namespace {

// A byte range of the vector.
struct Range {
  size_t begin, end;
};

// The last halving step and the first doubling step exchange the same two
// ranges with the same partner: give `given` of `cur` and reduce `kept`
// into recv, then send the reduced `kept` back and receive `given`. In a
// call whose buffers overflow the cache (CollArgs::stream_outputs) they
// run chunk by chunk in waves, as the ring does (ring.cc), each chunk
// reduced in one pass into recv (streamed) and into a cached stage
// (Op::copy_to), and sent from the stage: a reduced chunk goes back out
// while it is cached instead of being read back from memory, and the output
// is written once, without the read for ownership a cached store costs out
// of place (docs/performance.md, "Ordinary buffers: waves, stages and
// streaming stores" and "One pass into the output and the stage"). Receives chain,
// so *last ends as "everything here is done"; a receive into `given` also
// waits for the send that read that chunk. `final`: no later step reads
// what lands in recv here.
void AddRabenseifnerPivot(const CollArgs& a, int peer, bool peer_lower, const uint8_t* cur,
                          Range given, Range kept, bool final, int* last, Schedule* out) {
  auto* recv = static_cast<uint8_t*>(a.recv);
  const size_t es = DatatypeSize(a.datatype);
  const size_t given_bytes = given.end - given.begin, kept_bytes = kept.end - kept.begin;
  // Below the cache size the whole range is still cached when it goes back
  // (chunks measured no faster at 1-8 MiB on 2 ranks, only more messages).
  const size_t nchunks = a.stream_outputs ? ChunksFor(std::max(given_bytes, kept_bytes) / es, es,
                                                      std::max<size_t>(a.chunk_bytes, es))
                                          : 1;
  // Chunk j of a range, in whole elements.
  auto piece = [&](Range r, size_t j) {
    size_t b, e;
    Partition((r.end - r.begin) / es, nchunks, j, &b, &e);
    return Range{r.begin + b * es, r.begin + e * es};
  };
  // Stages in turn: chunk j + kStages reuses chunk j's once that went out.
  // In place the final output is the operand, whose lines the reduction
  // has just read: it writes them cached and the chunk goes back out from
  // there, without a stage (streamed, the next call's operand and the
  // chunk's send both read memory: 1.1x the time; docs/tuning.md,
  // "Outputs that overflow the cache"). Only this rank's stores change:
  // the messages are the same in place or not, as the partner may differ.
  constexpr size_t kStages = 3;
  const bool staged = nchunks > 1 && !(final && cur == recv);
  const size_t stage_bytes = piece(kept, 0).end - piece(kept, 0).begin;
  uint8_t* stages = staged ? out->AllocFilled(kStages * stage_bytes) : nullptr;
  auto stage = [&](size_t j) { return stages + (j % kStages) * stage_bytes; };
  const int before = *last;
  // Per chunk: the reduction, the send of `given` and the send of the
  // reduced chunk.
  std::vector<int> reduced(nchunks, -1), given_sent(nchunks, -1), kept_sent(nchunks, -1);
  // In waves (ForEachInWaves): step 0 gives chunk j of `given` and reduces
  // chunk j of `kept`, step 1 sends the reduced chunk back and receives
  // the partner's.
  ForEachInWaves(nchunks, 2, [&](size_t step, size_t j) {
    const Range g = piece(given, j), k = piece(kept, j);
    if (step == 0) {
      if (g.end > g.begin)
        given_sent[j] = out->Add(SendOp(peer, cur + g.begin, g.end - g.begin, before));
      if (k.end > k.begin) {
        const int reuse = staged && j >= kStages ? kept_sent[j - kStages] : -1;
        Op reduce =
            StreamedIf(a, final && staged,
                       OrderedRecvOp(a, peer, recv + k.begin, k.end - k.begin, cur + k.begin,
                                     peer_lower, AvgDivisor(a), *last, reuse));
        if (staged) reduce.copy_to = stage(j);
        reduced[j] = *last = out->Add(reduce);
      }
      return;
    }
    if (k.end > k.begin)
      kept_sent[j] =
          out->Add(SendOp(peer, staged ? stage(j) : recv + k.begin, k.end - k.begin, reduced[j]));
    if (g.end > g.begin)
      *last = out->Add(StreamedIf(a, final,
                                  OrderedRecvOp(a, peer, recv + g.begin, g.end - g.begin, nullptr,
                                                false, 0, *last, given_sent[j])));
  });
}

}  // namespace

// The vector is cut into p' blocks (Partition). Reduce-scatter: in step k
// (partner new rank ^ 2^k) the block range held so far is halved; the rank
// whose bit k is 0 keeps the lower half. Step 0 reads the input directly, so
// no initial copy is needed and the send buffer is never written; later
// steps work in recv. The last step's reduction divides for avg, so each
// element is divided once, by the one rank that owns it. Allgather: steps
// k = L-1 .. 0 return each half to the partner that gave it away, landing
// in recv where the reduce-scatter of step k read it (so the receive waits
// for that send).
void BuildRabenseifnerAllReduce(const CollArgs& a, Schedule* out) {
  const size_t es = DatatypeSize(a.datatype);
  const size_t bytes = a.count * es;
  auto* recv = static_cast<uint8_t*>(a.recv);
  const Fold f(a.rank, a.nranks);
  int last;
  const uint8_t* cur;
  if (!StartFoldedAllReduce(a, f, bytes, out, &cur, &last)) return;
  const int steps = f.steps;
  // Byte offset of block j of p'; block_offset(p') is the end of the vector.
  auto block_offset = [&](int j) {
    size_t b, e;
    Partition(a.count, f.p2, j, &b, &e);
    return b * es;
  };
  std::vector<Range> kept(steps), given(steps);
  std::vector<int> sends(steps, -1);
  int lo = 0, hi = f.p2;  // blocks held
  for (int k = 0; k < steps; ++k) {
    const int bit = 1 << k;
    const int peer = f.RankOf(f.newrank ^ bit);
    const bool peer_lower = (f.newrank & bit) != 0;
    const int mid = lo + (hi - lo) / 2;
    // Keep the half on this rank's side of the split; give the other.
    given[k] = peer_lower ? Range{block_offset(lo), block_offset(mid)}
                          : Range{block_offset(mid), block_offset(hi)};
    (peer_lower ? lo : hi) = mid;
    kept[k] = {block_offset(lo), block_offset(hi)};
    if (k == steps - 1) {
      // Final unless a later doubling step or a folded partner reads it.
      AddRabenseifnerPivot(a, peer, peer_lower, cur, given[k], kept[k], steps == 1 && !f.Absorbs(),
                           &last, out);
      break;
    }
    // Fewer elements than blocks leaves some blocks empty; both partners
    // see the same sizes, so both skip the same messages.
    if (given[k].end > given[k].begin)
      sends[k] = out->Add(SendOp(peer, cur + given[k].begin, given[k].end - given[k].begin, last));
    if (kept[k].end > kept[k].begin)
      last = out->Add(OrderedRecvOp(a, peer, recv + kept[k].begin, kept[k].end - kept[k].begin,
                                    cur + kept[k].begin, peer_lower, 0, last, -1));
    cur = recv;
  }
  for (int k = steps - 2; k >= 0; --k) {
    const int peer = f.RankOf(f.newrank ^ (1 << k));
    if (kept[k].end > kept[k].begin)
      out->Add(SendOp(peer, recv + kept[k].begin, kept[k].end - kept[k].begin, last));
    if (given[k].end > given[k].begin)
      last = out->Add(
          StreamedIf(a, k == 0 && !f.Absorbs(),
                     OrderedRecvOp(a, peer, recv + given[k].begin, given[k].end - given[k].begin,
                                   nullptr, false, 0, last, sends[k])));
  }
  if (f.Absorbs()) out->Add(SendOp(f.partner, recv, bytes, last));
}

// New rank j stands for the blocks of ranks [FirstRank(j), FirstRank(j+1)).
// Step k (distance p'/2, p'/4, ..., 1) halves the range of new ranks whose
// blocks are held; the lower-numbered half stays with the lower rank, so
// new rank j ends with its own blocks. Partial sums live in scratch (the
// input is read-only), except that the last step reduces straight into recv
// when the rank holds only its own block. Step 0 reads the input directly.
void BuildRecursiveHalvingReduceScatter(const CollArgs& a, Schedule* out) {
  const size_t blk = a.count * DatatypeSize(a.datatype);
  const auto* send = static_cast<const uint8_t*>(a.send);
  auto* recv = static_cast<uint8_t*>(a.recv);
  if (blk == 0) return;
  const int p = a.nranks;
  if (p == 1) {
    if (send != recv) out->Add(CopyOp(a, send, recv, blk, -1));
    return;
  }
  const size_t total = blk * p;
  const Fold f(a.rank, p);
  if (f.FoldedOut()) {
    AddFoldedOut(a, f, send, total, recv, blk, out);
    return;
  }
  // Only a rank that ends with two blocks, or takes more than one step,
  // holds partial sums outside recv.
  uint8_t* partial = f.Absorbs() || f.steps > 1 ? out->AllocScratch(total) : nullptr;
  int last = -1;
  const uint8_t* cur = send;
  if (f.Absorbs()) {
    last = out->Add(OrderedRecvOp(a, f.partner, partial, total, send, true, 0, -1, -1));
    cur = partial;
  }
  auto offset = [&](int nr) { return static_cast<size_t>(f.FirstRank(nr)) * blk; };
  int lo = 0, hi = f.p2;  // new ranks whose blocks are held
  for (int k = 0; k < f.steps; ++k) {
    const int bit = f.p2 >> (k + 1);
    const int peer = f.RankOf(f.newrank ^ bit);
    const bool peer_lower = (f.newrank & bit) != 0;
    const int mid = lo + bit;
    const int give_lo = peer_lower ? lo : mid, give_hi = peer_lower ? mid : hi;
    (peer_lower ? lo : hi) = mid;
    out->Add(SendOp(peer, cur + offset(give_lo), offset(give_hi) - offset(give_lo), last));
    const bool final_step = k == f.steps - 1;
    uint8_t* dst = final_step && !f.Absorbs() ? recv : partial + offset(lo);
    // (In place the reduction just read those lines: nothing to skip.)
    last =
        out->Add(StreamedIf(a, dst == recv && cur + offset(lo) != dst,
                            OrderedRecvOp(a, peer, dst, offset(hi) - offset(lo), cur + offset(lo),
                                          peer_lower, final_step ? AvgDivisor(a) : 0, last, -1)));
    cur = partial;
  }
  if (f.Absorbs()) {
    out->Add(CopyOp(a, partial + a.rank * blk, recv, blk, last));
    out->Add(SendOp(f.partner, partial + f.partner * blk, blk, last));
  }
}

// Step k exchanges the blocks of the 2^k new ranks in the rank's group with
// those of the partner group; all land at their owners' offsets in recv.
// Receives write only blocks not yet held, which no send has read, so they
// wait for nothing but the previous receive (to keep "last receive done"
// meaning "all blocks so far are here" for the next send).
void BuildRecursiveDoublingAllGather(const CollArgs& a, Schedule* out) {
  const size_t blk = a.count * DatatypeSize(a.datatype);
  const auto* send = static_cast<const uint8_t*>(a.send);
  auto* recv = static_cast<uint8_t*>(a.recv);
  if (blk == 0) return;
  const int p = a.nranks;
  uint8_t* own = recv + a.rank * blk;
  if (p == 1) {
    if (send != own) out->Add(CopyOp(a, send, own, blk, -1));
    return;
  }
  const Fold f(a.rank, p);
  // The folded-out rank's own block comes back with the rest (in place, the
  // same bytes are written over themselves once its send is done).
  if (f.FoldedOut()) {
    AddFoldedOut(a, f, send, blk, recv, blk * p, out);
    return;
  }
  // Without a folded partner the first step sends this rank's block
  // straight from the input, so the copy into the output waits for
  // nothing; with one step only, nothing reads that copy again.
  const bool alone = !f.Absorbs();
  const int copy =
      send != own ? out->Add(StreamedIf(a, alone && f.steps == 1, CopyOp(a, send, own, blk, -1)))
                  : -1;
  const int fold_recv = f.Absorbs() ? out->Add(OrderedRecvOp(a, f.partner, recv + f.partner * blk,
                                                             blk, nullptr, false, 0, -1, -1))
                                    : -1;
  auto offset = [&](int nr) { return static_cast<size_t>(f.FirstRank(nr)) * blk; };
  int last = -1;
  for (int k = 0; k < f.steps; ++k) {
    const int bit = 1 << k;
    const int peer = f.RankOf(f.newrank ^ bit);
    const int mine = f.newrank & ~(bit - 1), theirs = mine ^ bit;
    const bool from_input = k == 0 && alone;
    const int dep0 = k == 0 ? (from_input ? -1 : copy) : last, dep1 = k == 0 ? fold_recv : -1;
    Op s = SendOp(peer, from_input ? send : recv + offset(mine), offset(mine + bit) - offset(mine),
                  dep0);
    s.deps[1] = dep1;
    out->Add(s);
    // Receives chain (the first one after the copy): `last` done means
    // everything here is.
    last = out->Add(StreamedIf(
        a, alone && k == f.steps - 1,
        OrderedRecvOp(a, peer, recv + offset(theirs), offset(theirs + bit) - offset(theirs),
                      nullptr, false, 0, k == 0 ? copy : last, dep1)));
  }
  if (f.Absorbs()) out->Add(SendOp(f.partner, recv, blk * p, last));
}

// The allgather's steps over blocks of any size, back to back in rank order:
// in the output when its blocks lie that way, else in scratch, copied out
// to the displacements at the end. Both partners of a step know the sizes
// of all blocks, so both skip the same empty messages.
void BuildRecursiveDoublingAllGatherV(const CollArgs& a, Schedule* out) {
  const VBlocks b = RecvBlocks(a);
  const auto* send = static_cast<const uint8_t*>(a.send);
  auto* recv = static_cast<uint8_t*>(a.recv);
  const int p = a.nranks;
  const size_t mine = b.bytes[a.rank];
  if (p == 1 || b.total == 0) {
    if (mine > 0 && send != recv + b.offset[a.rank])
      out->Add(CopyOp(a, send, recv + b.offset[a.rank], mine, -1));
    return;
  }
  std::vector<size_t> prefix(p + 1, 0);
  for (int r = 0; r < p; ++r) prefix[r + 1] = prefix[r] + b.bytes[r];
  uint8_t* work = b.packed ? recv : out->AllocScratch(b.total);
  const Fold f(a.rank, p);
  int last = -1;
  if (f.FoldedOut()) {
    const int s = mine > 0 ? out->Add(SendOp(f.partner, send, mine, -1)) : -1;
    last = out->Add(OrderedRecvOp(a, f.partner, work, b.total, nullptr, false, 0, s, -1));
  } else {
    uint8_t* own = work + prefix[a.rank];
    const int copy = mine > 0 && send != own ? out->Add(CopyOp(a, send, own, mine, -1)) : -1;
    const size_t fold_bytes = f.Absorbs() ? b.bytes[f.partner] : 0;
    const int fold_recv = fold_bytes > 0
                              ? out->Add(OrderedRecvOp(a, f.partner, work + prefix[f.partner],
                                                       fold_bytes, nullptr, false, 0, -1, -1))
                              : -1;
    auto offset = [&](int nr) { return prefix[f.FirstRank(nr)]; };
    for (int k = 0; k < f.steps; ++k) {
      const int bit = 1 << k;
      const int peer = f.RankOf(f.newrank ^ bit);
      const int group = f.newrank & ~(bit - 1), theirs = group ^ bit;
      const int dep0 = k == 0 ? copy : last, dep1 = k == 0 ? fold_recv : -1;
      const size_t give = offset(group + bit) - offset(group);
      const size_t take = offset(theirs + bit) - offset(theirs);
      if (give > 0) {
        Op s = SendOp(peer, work + offset(group), give, dep0);
        s.deps[1] = dep1;
        out->Add(s);
      }
      // "last" keeps meaning "every block so far is here" when nothing comes.
      last = take > 0 ? out->Add(OrderedRecvOp(a, peer, work + offset(theirs), take, nullptr, false,
                                               0, dep0, dep1))
                      : Join({dep0, dep1}, out);
    }
    if (f.Absorbs()) out->Add(SendOp(f.partner, work, b.total, last));
  }
  if (b.packed) return;
  for (int r = 0; r < p; ++r) {
    if (b.bytes[r] == 0 || (r == a.rank && send == recv + b.offset[r])) continue;
    out->Add(CopyOp(a, work + prefix[r], recv + b.offset[r], b.bytes[r], last));
  }
}

}  // namespace baton
