// The hierarchical algorithms; see hierarchical.h. Each stage is built by an
// existing builder for a subgroup (sub-ranks 0..n-1, ring order = identity)
// and appended with its peers mapped back to communicator ranks.
#include "algorithms/hierarchical.h"

#include <numeric>
#include <utility>
#include <vector>

#include "algorithms/chain.h"
#include "algorithms/collective.h"
#include "algorithms/ops.h"
#include "algorithms/rhd.h"
#include "algorithms/ring.h"
#include "algorithms/tree.h"
#include "base/datatype.h"
#include "base/partition.h"

namespace baton {
namespace {

// This rank's host and local index, and the subgroups it belongs to.
struct Place {
  int host = 0, local = 0;
  const HostLayout* layout = nullptr;

  // Where `rank` (default: this rank) sits.
  explicit Place(const CollArgs& a, int rank = -1) : layout(a.hosts) {
    const int slot = layout->slot_of[rank < 0 ? a.rank : rank];
    host = slot / layout->per_host;
    local = slot % layout->per_host;
  }
  // Communicator rank of local rank i of host h.
  int RankAt(int h, int i) const { return layout->ranks[h * layout->per_host + i]; }
};

// Arguments for a stage run by `n` ranks of which this one is `sub_rank`.
CollArgs SubArgs(const CollArgs& a, const std::vector<int>& identity, int n, int sub_rank) {
  CollArgs s = a;
  s.nranks = n;
  s.rank = sub_rank;
  s.ring = &identity;
  s.hosts = nullptr;
  return s;
}

// The two kinds of subgroup a stage runs in, seen from this rank: the ranks
// of its host (sub-rank = local index), and the ranks with its local index,
// one a host (sub-rank = host index); each in identity order. The stage
// arguments are rooted where the communicator's root sits.
struct Subgroups {
  const CollArgs& a;
  const Place me, root;
  const int hosts, per_host;
  std::vector<int> local_ids, host_ids;

  explicit Subgroups(const CollArgs& args)
      : a(args),
        me(args),
        root(args, args.root),
        hosts(args.hosts->hosts),
        per_host(args.hosts->per_host),
        local_ids(per_host),
        host_ids(hosts) {
    std::iota(local_ids.begin(), local_ids.end(), 0);
    std::iota(host_ids.begin(), host_ids.end(), 0);
  }
  CollArgs Intra() const {
    CollArgs s = SubArgs(a, local_ids, per_host, me.local);
    s.root = root.local;
    return s;
  }
  CollArgs Inter() const {
    CollArgs s = SubArgs(a, host_ids, hosts, me.host);
    s.root = root.host;
    return s;
  }
  // Communicator ranks of the sub-ranks of each kind.
  int LocalMember(int i) const { return me.RankAt(me.host, i); }
  int HostMember(int h) const { return me.RankAt(h, me.local); }
};

// The rooted builder the stages of a hierarchical broadcast or reduce use.
using RootedBuilder = void (*)(const CollArgs&, Schedule*);
RootedBuilder BroadcastStage(const CollArgs& a) {
  return a.inter_host == Algorithm::kBinomial ? BuildBinomialBroadcast : BuildChainBroadcast;
}
RootedBuilder ReduceStage(const CollArgs& a) {
  return a.inter_host == Algorithm::kBinomial ? BuildBinomialReduce : BuildChainReduce;
}

// Sets the avg divisor of the stage's ops: `divisor` where the stage
// divides (its last reduction), or 0 to leave the division to a later one.
void SetAvgDivisor(Schedule* stage, uint32_t divisor) {
  for (Op& op : stage->ops)
    if (op.post_divisor != 0) op.post_divisor = divisor;
}

// Appends `stage` (its peers are sub-ranks, `member` maps them to
// communicator ranks) so that none of its ops starts before op `after` of
// `out` (-1: no such wait). Returns an op that completes once all of the
// stage's ops have (a chain of empty copies over its last ops), or `after`
// when the stage is empty.
template <typename Member>
int AppendStage(Schedule* out, Schedule&& stage, Member member, int after) {
  const int base = static_cast<int>(out->ops.size());
  const int n = static_cast<int>(stage.ops.size());
  if (n == 0) return after;
  std::vector<char> needed(n, 0);  // some later op of the stage waits for it
  for (Op op : stage.ops) {
    for (int& d : op.deps)
      if (d >= 0) needed[d] = 1, d += base;
    if (op.kind != Op::Kind::kCopy) op.peer = member(op.peer);
    // An op with a free slot waits for the previous stage; the others wait
    // for ops of this stage that do (dependencies point backwards).
    if (after >= 0) {
      if (op.deps[0] < 0)
        op.deps[0] = after;
      else if (op.deps[1] < 0)
        op.deps[1] = after;
    }
    out->ops.push_back(op);
  }
  out->TakeMemory(std::move(stage));
  int join = -1;
  for (int i = 0; i < n; ++i) {
    if (needed[i]) continue;
    Op op;
    op.kind = Op::Kind::kCopy;
    op.deps[0] = base + i;
    op.deps[1] = join;
    join = out->Add(op);
  }
  return join;
}

}  // namespace

void BuildHierarchicalAllReduce(const CollArgs& a, Schedule* out) {
  const size_t es = DatatypeSize(a.datatype);
  if (a.count == 0) return;
  if (a.nranks == 1 || a.hosts == nullptr) {
    BuildRingAllReduce(a, out);
    return;
  }
  const Subgroups g(a);
  const int hosts = g.hosts, per_host = g.per_host;
  auto local_member = [&](int i) { return g.LocalMember(i); };
  auto host_member = [&](int h) { return g.HostMember(h); };
  const auto divisor = static_cast<uint32_t>(a.op == batonAvg ? a.nranks : 0);

  // Stage 1: reduce-scatter within the host.
  const CollArgs intra = g.Intra();
  int done = -1;
  size_t begin = 0, end = a.count;
  if (per_host > 1) {
    Schedule stage;
    BuildRingAllReduceHalves(intra, true, false, &stage);
    SetAvgDivisor(&stage, hosts > 1 ? 0 : divisor);
    done = AppendStage(out, std::move(stage), local_member, -1);
    Partition(a.count, per_host, RingAllReduceOwnedSegment(intra), &begin, &end);
  }
  // Stage 2: allreduce of this rank's slice among the hosts.
  if (hosts > 1 && end > begin) {
    CollArgs inter = g.Inter();
    inter.stream_outputs &= per_host == 1;  // stage 3 sends the slice on
    inter.count = end - begin;
    inter.send = per_host > 1 ? static_cast<const uint8_t*>(a.recv) + begin * es
                              : static_cast<const uint8_t*>(a.send);
    inter.recv = static_cast<uint8_t*>(a.recv) + begin * es;
    Schedule stage;
    if (a.inter_host == Algorithm::kRecursiveHalvingDoubling)
      BuildRhdAllReduce(inter, &stage);
    else
      BuildRingAllReduce(inter, &stage);
    SetAvgDivisor(&stage, divisor);
    done = AppendStage(out, std::move(stage), host_member, done);
  }
  // Stage 3: allgather within the host.
  if (per_host > 1) {
    Schedule stage;
    BuildRingAllReduceHalves(intra, false, true, &stage);
    AppendStage(out, std::move(stage), local_member, done);
  }
}

void BuildHierarchicalBroadcast(const CollArgs& a, Schedule* out) {
  if (a.count == 0) return;
  if (a.nranks == 1 || a.hosts == nullptr) {
    BuildChainBroadcast(a, out);
    return;
  }
  const Subgroups g(a);
  const RootedBuilder build = BroadcastStage(a);
  int done = -1;
  // Stage 1: the root's local index on every host gets the data.
  if (g.hosts > 1 && g.me.local == g.root.local) {
    Schedule stage;
    CollArgs inter = g.Inter();
    inter.stream_outputs = false;  // stage 2 sends it on
    build(inter, &stage);
    done = AppendStage(
        out, std::move(stage), [&](int h) { return g.HostMember(h); }, -1);
  }
  // Stage 2: it broadcasts within its host.
  CollArgs intra = g.Intra();
  if (g.hosts > 1) intra.send = a.recv;  // where stage 1 delivered (the root: its own copy)
  Schedule stage;
  build(intra, &stage);
  AppendStage(
      out, std::move(stage), [&](int i) { return g.LocalMember(i); }, done);
}

void BuildHierarchicalReduce(const CollArgs& a, Schedule* out) {
  const size_t es = DatatypeSize(a.datatype);
  if (a.count == 0) return;
  if (a.nranks == 1 || a.hosts == nullptr) {
    BuildChainReduce(a, out);
    return;
  }
  const Subgroups g(a);
  const Place& me = g.me;
  const int hosts = g.hosts;
  const RootedBuilder build = ReduceStage(a);
  const auto divisor = static_cast<uint32_t>(a.op == batonAvg ? a.nranks : 0);
  const bool leader = me.local == g.root.local;
  // Stage 1: each host reduces into its rank with the root's local index
  // (scratch on other hosts, whose recv may be null).
  const uint8_t* partial = static_cast<const uint8_t*>(a.send);
  int done = -1;
  if (g.per_host > 1) {
    uint8_t* into = static_cast<uint8_t*>(a.recv);
    if (leader && me.host != g.root.host) into = out->AllocScratch(a.count * es);
    CollArgs intra = g.Intra();
    intra.recv = leader ? into : nullptr;
    intra.stream_outputs &= hosts == 1;  // stage 2 sends the sums on
    Schedule stage;
    build(intra, &stage);
    SetAvgDivisor(&stage, hosts > 1 ? 0 : divisor);
    done = AppendStage(
        out, std::move(stage), [&](int i) { return g.LocalMember(i); }, -1);
    partial = into;
  }
  // Stage 2: those ranks reduce to the root.
  if (hosts > 1 && leader) {
    CollArgs inter = g.Inter();
    inter.send = partial;
    inter.recv = me.host == g.root.host ? a.recv : nullptr;
    Schedule stage2;
    build(inter, &stage2);
    SetAvgDivisor(&stage2, divisor);
    AppendStage(
        out, std::move(stage2), [&](int h) { return g.HostMember(h); }, done);
  }
}

namespace {

// Ring allgather within `group` (communicator ranks; this rank is
// group[q]) where member m holds the blocks of the ranks in blocks[m], each
// at recv + rank * block bytes. In step s every member forwards the blocks
// it received in step s - 1, so after group.size() - 1 steps all members
// hold all of them. The first sends wait for op `after` (-1: none).
void AddRingBlockAllGather(const CollArgs& a, const std::vector<int>& group, int q,
                           const std::vector<std::vector<int>>& blocks, int after, Schedule* out) {
  const int n = static_cast<int>(group.size());
  if (n <= 1) return;
  const size_t blk = a.count * DatatypeSize(a.datatype);
  auto* recv = static_cast<uint8_t*>(a.recv);
  const int next = group[Mod(q + 1, n)], prev = group[Mod(q - 1, n)];
  std::vector<int> last(blocks[q].size(), after);  // per block of the set in flight
  for (int s = 0; s < n - 1; ++s) {
    const std::vector<int>& outgoing = blocks[Mod(q - s, n)];
    const std::vector<int>& incoming = blocks[Mod(q - s - 1, n)];
    for (size_t b = 0; b < outgoing.size(); ++b)
      out->Add(SendOp(next, recv + outgoing[b] * blk, blk, last[b]));
    last.assign(incoming.size(), -1);
    for (size_t b = 0; b < incoming.size(); ++b)
      last[b] = out->Add(RecvOp(a, prev, recv + incoming[b] * blk, blk, nullptr, 0));
  }
}

}  // namespace

void BuildHierarchicalAllGather(const CollArgs& a, Schedule* out) {
  const size_t blk = a.count * DatatypeSize(a.datatype);
  const auto* send = static_cast<const uint8_t*>(a.send);
  auto* recv = static_cast<uint8_t*>(a.recv);
  if (blk == 0) return;
  if (a.nranks == 1 || a.hosts == nullptr) {
    BuildRingAllGather(a, out);
    return;
  }
  const Place me(a);
  const int hosts = a.hosts->hosts, per_host = a.hosts->per_host;
  int done = -1;
  if (send != recv + a.rank * blk) done = out->Add(CopyOp(a, send, recv + a.rank * blk, blk));
  // Stage 1: among the hosts, the ranks with this local index gather their
  // blocks.
  if (hosts > 1) {
    std::vector<int> group(hosts);
    std::vector<std::vector<int>> blocks(hosts);
    for (int h = 0; h < hosts; ++h) {
      group[h] = me.RankAt(h, me.local);
      blocks[h] = {group[h]};
    }
    const size_t first = out->ops.size();
    AddRingBlockAllGather(a, group, me.host, blocks, done, out);
    // The next stage forwards what arrived: chain after this stage's ops.
    const size_t end = out->ops.size();
    for (size_t i = first; i < end; ++i) {
      Op join;
      join.kind = Op::Kind::kCopy;
      join.deps[0] = static_cast<int>(i);
      join.deps[1] = done;
      done = out->Add(join);
    }
  }
  // Stage 2: within the host, each local rank passes on the blocks of its
  // local index from every host.
  if (per_host > 1) {
    std::vector<int> group(per_host);
    std::vector<std::vector<int>> blocks(per_host);
    for (int i = 0; i < per_host; ++i) {
      group[i] = me.RankAt(me.host, i);
      for (int h = 0; h < hosts; ++h) blocks[i].push_back(me.RankAt(h, i));
    }
    AddRingBlockAllGather(a, group, me.local, blocks, done, out);
  }
}

}  // namespace baton
