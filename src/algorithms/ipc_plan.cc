// Plans of collectives over directly readable peer buffers; see ipc_plan.h.
#include "algorithms/ipc_plan.h"

#include <algorithm>

#include "base/datatype.h"
#include "base/partition.h"

namespace baton {
namespace {

// Appends the steps that reduce `inputs` (all n of them, own first) into
// `dst`, at most kMaxIpcStepSources sources per step: the first step takes the
// first kMaxIpcStepSources inputs, every later one the destination plus the next
// kMaxIpcStepSources - 1. Only the last step divides.
void AddReduction(const std::vector<IpcRef>& inputs, const IpcRef& dst, uint64_t count,
                  uint32_t divisor, std::vector<IpcStep>* steps) {
  if (count == 0 || inputs.empty()) return;
  size_t next = 0;
  bool first = true;
  while (next < inputs.size()) {
    IpcStep step;
    step.dst = dst;
    step.count = count;
    if (!first) step.srcs[step.nsrcs++] = dst;
    while (step.nsrcs < kMaxIpcStepSources && next < inputs.size())
      step.srcs[step.nsrcs++] = inputs[next++];
    step.post_divisor = next == inputs.size() ? divisor : 0;
    steps->push_back(step);
    first = false;
  }
}

void AddCopy(const IpcRef& src, const IpcRef& dst, uint64_t count, std::vector<IpcStep>* steps) {
  if (count == 0) return;
  IpcStep step;
  step.srcs[0] = src;
  step.nsrcs = 1;
  step.dst = dst;
  step.count = count;
  steps->push_back(step);
}

// The n inputs at `offset` of every rank's send buffer, own rank first.
std::vector<IpcRef> InputsAt(int rank, int nranks, uint64_t offset) {
  std::vector<IpcRef> refs;
  refs.reserve(nranks);
  refs.push_back({rank, IpcBuffer::kSend, offset});
  for (int q = 0; q < nranks; ++q)
    if (q != rank) refs.push_back({q, IpcBuffer::kSend, offset});
  return refs;
}

// Where rank q's block starts in this rank's receive buffer (elements).
uint64_t Displacement(const IpcCall& call, int q) {
  if (call.displs != nullptr) return call.displs[q];
  uint64_t at = 0;
  for (int p = 0; p < q; ++p) at += call.counts[p];
  return at;
}

}  // namespace

size_t IpcPlan::StepCount() const {
  size_t n = 0;
  for (const auto& phase : phases) n += phase.size();
  return n;
}

void BuildIpcPlan(const IpcCall& call, IpcPlan* plan) {
  plan->phases.clear();
  const int n = call.nranks, r = call.rank;
  const uint64_t es = DatatypeSize(call.datatype);
  const uint64_t count = call.count;
  const uint32_t divisor = call.op == batonAvg ? static_cast<uint32_t>(n) : 0;
  auto phase = [plan]() -> std::vector<IpcStep>* {
    plan->phases.emplace_back();
    return &plan->phases.back();
  };

  switch (call.collective) {
    case Collective::kAllReduce: {
      // Phase 1: part r of every input, reduced into part r of the output.
      std::vector<IpcStep>* reduce = phase();
      size_t begin, end;
      Partition(count, n, r, &begin, &end);
      AddReduction(InputsAt(r, n, begin * es), {r, IpcBuffer::kRecv, begin * es}, end - begin,
                   divisor, reduce);
      // Phase 2: every other part from the output of the rank that reduced it.
      std::vector<IpcStep>* gather = phase();
      for (int k = 1; k < n; ++k) {
        const int q = (r + k) % n;  // staggered, so the ranks do not all read one peer at once
        Partition(count, n, q, &begin, &end);
        AddCopy({q, IpcBuffer::kRecv, begin * es}, {r, IpcBuffer::kRecv, begin * es}, end - begin,
                gather);
      }
      break;
    }
    case Collective::kReduceScatter:
      AddReduction(InputsAt(r, n, r * count * es), {r, IpcBuffer::kRecv, 0}, count, divisor,
                   phase());
      break;
    case Collective::kReduce: {
      std::vector<IpcStep>* steps = phase();
      if (r == call.root)
        AddReduction(InputsAt(r, n, 0), {r, IpcBuffer::kRecv, 0}, count, divisor, steps);
      break;
    }
    case Collective::kBroadcast:
      AddCopy({call.root, IpcBuffer::kSend, 0}, {r, IpcBuffer::kRecv, 0}, count, phase());
      break;
    case Collective::kAllGather: {
      std::vector<IpcStep>* steps = phase();
      for (int k = 0; k < n; ++k) {
        const int q = (r + k) % n;
        AddCopy({q, IpcBuffer::kSend, 0}, {r, IpcBuffer::kRecv, q * count * es}, count, steps);
      }
      break;
    }
    case Collective::kAlltoAll: {
      std::vector<IpcStep>* steps = phase();
      for (int k = 0; k < n; ++k) {
        const int q = (r + k) % n;
        AddCopy({q, IpcBuffer::kSend, r * count * es}, {r, IpcBuffer::kRecv, q * count * es}, count,
                steps);
      }
      break;
    }
    case Collective::kAllGatherV: {
      if (call.counts == nullptr) break;
      std::vector<IpcStep>* steps = phase();
      for (int k = 0; k < n; ++k) {
        const int q = (r + k) % n;
        AddCopy({q, IpcBuffer::kSend, 0}, {r, IpcBuffer::kRecv, Displacement(call, q) * es},
                call.counts[q], steps);
      }
      break;
    }
    case Collective::kReduceScatterV: {
      if (call.counts == nullptr) break;
      uint64_t at = 0;
      for (int q = 0; q < r; ++q) at += call.counts[q];
      AddReduction(InputsAt(r, n, at * es), {r, IpcBuffer::kRecv, 0}, call.counts[r], divisor,
                   phase());
      break;
    }
    case Collective::kAlltoAllV: {
      if (call.counts == nullptr || call.source_offsets == nullptr) break;
      std::vector<IpcStep>* steps = phase();
      for (int k = 0; k < n; ++k) {
        const int q = (r + k) % n;
        AddCopy({q, IpcBuffer::kSend, call.source_offsets[q] * es},
                {r, IpcBuffer::kRecv, Displacement(call, q) * es}, call.counts[q], steps);
      }
      break;
    }
    // No plan: launch/ stages these through host memory instead.
    case Collective::kGather:
    case Collective::kScatter:
      break;
  }
}

}  // namespace baton
