// all_reduce_perf: nccl-tests' all_reduce_perf for Baton; flags and output in perf_common.h.
//
// SPDX-License-Identifier: BSD-3-Clause
#include "perf_common.h"

namespace {

class AllReduce : public baton_perf::Collective {
 public:
  const char* Name() const override { return "AllReduce"; }
  bool UsesOp() const override { return true; }
  bool UsesRoot() const override { return false; }

  baton_perf::CollCounts GetCounts(size_t count, size_t /*type_size*/,
                                   int /*nranks*/) const override {
    // In place, every rank reduces into the buffer it sends from: both offsets are 0.
    return {.send_count = count, .recv_count = count, .param_count = count};
  }

  // A ring moves each element 2(n-1)/n times: n-1 steps of reduce-scatter, n-1 of all-gather.
  double BusBwFactor(int nranks) const override { return 2.0 * (nranks - 1) / nranks; }

  void InitData(const baton_perf::InitArgs& args) const override {
    args.pattern.FillInput(args.input, args.counts.send_count, 0, args.rank);
    args.pattern.FillReduced(args.expected, args.counts.recv_count, 0);
  }

  batonResult_t Run(const baton_perf::RunArgs& args) const override {
    return batonAllReduce(args.send, args.recv, args.count, args.type, args.op, args.comm,
                          args.stream);
  }
};

}  // namespace

int main(int argc, char** argv) {
  return baton_perf::PerfMain(argc, argv, AllReduce());
}
