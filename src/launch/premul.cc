#include "launch/premul.h"

#include <cstring>
#include <iterator>
#include <map>
#include <utility>
#include <vector>

#include "base/datatype.h"
#include "cuda/cuda_device.h"

namespace baton {
namespace {

struct Span {
  uintptr_t begin = 0, end = 0;
  bool empty() const { return begin >= end; }
};

Span Of(const void* p, size_t bytes) {
  const auto b = reinterpret_cast<uintptr_t>(p);
  return {b, b + bytes};
}

Span Intersect(Span x, Span y) {
  return {std::max(x.begin, y.begin), std::min(x.end, y.end)};
}

// The bytes of the input that steps have written so far, as disjoint
// spans (begin -> end).
class Written {
 public:
  void Add(Span w) {
    if (w.empty()) return;
    auto it = spans_.upper_bound(w.begin);
    if (it != spans_.begin() && std::prev(it)->second >= w.begin) --it;
    while (it != spans_.end() && it->first <= w.end) {
      w.begin = std::min(w.begin, it->first);
      w.end = std::max(w.end, it->second);
      it = spans_.erase(it);
    }
    spans_.emplace(w.begin, w.end);
  }
  // How many bytes of r are written.
  size_t Covered(Span r) const {
    size_t n = 0;
    auto it = spans_.upper_bound(r.begin);
    if (it != spans_.begin()) --it;
    for (; it != spans_.end() && it->first < r.end; ++it) {
      const Span x = Intersect(r, {it->first, it->second});
      if (!x.empty()) n += x.end - x.begin;
    }
    return n;
  }
  // The pieces of r nothing wrote.
  std::vector<Span> Gaps(Span r) const {
    std::vector<Span> gaps;
    uintptr_t at = r.begin;
    auto it = spans_.upper_bound(r.begin);
    if (it != spans_.begin()) --it;
    for (; it != spans_.end() && it->first < r.end && at < r.end; ++it) {
      if (it->second <= at) continue;
      if (it->first > at) gaps.push_back({at, it->first});
      at = std::max(at, it->second);
    }
    if (at < r.end) gaps.push_back({at, r.end});
    return gaps;
  }

 private:
  std::map<uintptr_t, uintptr_t> spans_;
};

// Marks the ops [first, end) of *s that read raw input (see premul.h).
// False, changing nothing, when the schedule does not fit: a read that is
// partly raw or straddles the input's end, or a dependency that points
// forwards (the order of the ops would not be the order they run in).
bool FuseScale(Span input, Span output, batonDataType_t dt, const uint8_t* scale, size_t first,
               Schedule* s) {
  Written written;
  std::vector<int> raw_sends, raw_reads;  // raw_reads: reducing receives and copies
  for (size_t i = first; i < s->ops.size(); ++i) {
    const Op& op = s->ops[i];
    for (int d : op.deps)
      if (d >= static_cast<int>(i)) return false;
    if (op.bytes == 0) continue;
    const uint8_t* read = op.kind == Op::Kind::kRecv ? op.reduce_with : op.src;
    if (read != nullptr) {
      const Span r = Of(read, op.bytes);
      const Span in = Intersect(r, input);
      if (!in.empty()) {
        if (in.begin != r.begin || in.end != r.end) return false;
        const size_t covered = written.Covered(r);
        if (covered != 0 && covered != op.bytes) return false;
        if (covered == 0)
          (op.kind == Op::Kind::kSend ? raw_sends : raw_reads).push_back(static_cast<int>(i));
      }
    }
    if (op.kind != Op::Kind::kSend && op.dst != nullptr)
      written.Add(Intersect(Of(op.dst, op.bytes), input));
    if (op.copy_to != nullptr) written.Add(Intersect(Of(op.copy_to, op.bytes), input));
  }
  // One rank in place: output that still holds input and that no step
  // writes. Scaled by a copy onto itself, which must be the only step that
  // reads it while the schedule runs.
  const std::vector<Span> unwritten = written.Gaps(Intersect(output, input));
  for (const Span& g : unwritten)
    for (int i : raw_reads)
      if (!Intersect(g,
                     Of(s->ops[i].kind == Op::Kind::kRecv ? s->ops[i].reduce_with : s->ops[i].src,
                        s->ops[i].bytes))
               .empty())
        return false;

  // The schedule fits: mark it.
  for (int i : raw_reads) s->ops[i].scale = scale;
  for (const Span& g : unwritten) {
    Op op;
    op.kind = Op::Kind::kCopy;
    op.src = op.dst = reinterpret_cast<uint8_t*>(g.begin);
    op.bytes = g.end - g.begin;
    op.datatype = dt;
    op.scale = scale;
    s->Add(op);
  }
  // Raw chunks that leave as they are: scaled now into one block (a chunk
  // sent twice is copied once).
  size_t total = 0;
  for (int i : raw_sends) total += s->ops[i].bytes;
  if (total == 0) return true;
  uint8_t* block = s->AllocFilled(total);
  std::map<std::pair<const uint8_t*, uint64_t>, const uint8_t*> copies;
  const size_t es = DatatypeSize(dt);
  for (int i : raw_sends) {
    Op& op = s->ops[i];
    auto [it, fresh] = copies.emplace(std::make_pair(op.src, op.bytes), block);
    if (fresh) {
      PreMultiply(block, op.src, op.bytes / es, dt, scale);
      block += op.bytes;
    }
    op.src = it->second;
  }
  return true;
}

// The unfused way, for schedules FuseScale does not take: this rank's
// input times the scalar in one pass, into recvbuff where it holds exactly
// the input's shape (allreduce, the root of reduce), which makes the sum
// in place; otherwise into schedule memory.
void ScaleWholeInput(Collective collective, const uint8_t* scale, size_t count, CollArgs* a,
                     Schedule* s) {
  const bool into_recv = collective == Collective::kAllReduce ||
                         (collective == Collective::kReduce && a->rank == a->root);
  void* dst = into_recv ? a->recv : s->AllocScratch(count * DatatypeSize(a->datatype));
  if (count > 0) PreMultiply(dst, a->send, count, a->datatype, scale);
  a->send = dst;
}

}  // namespace

bool BuildPreMulSum(Collective collective, const PreMulScalar& scalar, BuildFn build,
                    const CollArgs& a, Schedule* s) {
  const size_t es = DatatypeSize(a.datatype);
  // Scaling each rank's input once, before any partial sum, is what makes
  // the result sum_r (scalar_r * x_r) whichever algorithm adds the terms.
  uint64_t value = scalar.value;
  if (scalar.residence == batonScalarDevice) {
    Status st = ReadScalarAtCall(scalar.pointer, &value, es);
    if (!st.ok()) {
      // Never a sum with a wrong scalar: the schedule does not run.
      if (s->build_error.ok()) s->build_error = st.WithContext("reading the PreMulSum scalar");
      return false;
    }
  }
  // The ops point at the scalar: it lives in schedule memory.
  auto* scale = s->AllocScratch(sizeof(value));
  memcpy(scale, &value, sizeof(value));
  CollArgs sum = a;
  sum.op = batonSum;
  const size_t count = a.count * (collective == Collective::kReduceScatter ? a.nranks : 1);
  const size_t out_count = collective == Collective::kReduce && a.rank != a.root ? 0 : a.count;
  const size_t first = s->ops.size();
  build(sum, s);
  if (FuseScale(Of(a.send, count * es), Of(a.recv, out_count * es), a.datatype, scale, first, s))
    return true;
  s->ops.resize(first);
  ScaleWholeInput(collective, scale, count, &sum, s);
  build(sum, s);
  return false;
}

}  // namespace baton
