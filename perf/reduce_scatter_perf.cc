// reduce_scatter_perf: nccl-tests' reduce_scatter_perf for Baton; flags and output in
// perf_common.h.
//
// SPDX-License-Identifier: BSD-3-Clause
#include "perf_common.h"

namespace {

class ReduceScatter : public baton_perf::Collective {
 public:
  const char* Name() const override { return "ReduceScatter"; }
  bool UsesOp() const override { return true; }
  bool UsesRoot() const override { return false; }

  // The size is the send buffer; each rank ends with the reduction of its block of it. In place,
  // a rank's output is its own block of the input: recv = send + rank * share.
  baton_perf::CollCounts GetCounts(size_t count, size_t type_size, int nranks) const override {
    const size_t share = baton_perf::RankShare(count, type_size, nranks);
    return {.send_count = share * nranks,
            .recv_count = share,
            .param_count = share,
            .recv_inplace_offset = share};
  }

  // algbw counts the whole input a rank reduces over, its own block included.
  double AlgBytes(const baton_perf::CollCounts& counts, size_t type_size,
                  int nranks) const override {
    return static_cast<double>(counts.param_count * type_size) * nranks;
  }

  // Each rank must send the n-1 blocks that others reduce: (n-1)/n of the input.
  double BusBwFactor(int nranks) const override { return (nranks - 1.0) / nranks; }

  void InitData(const baton_perf::InitArgs& args) const override {
    args.pattern.FillInput(args.input, args.counts.send_count, 0, args.rank);
    const size_t share = args.counts.recv_count;
    args.pattern.FillReduced(args.expected, share, args.rank * share);
  }

  batonResult_t Run(const baton_perf::RunArgs& args) const override {
    return batonReduceScatter(args.send, args.recv, args.count, args.type, args.op, args.comm,
                              args.stream);
  }
};

}  // namespace

int main(int argc, char** argv) {
  return baton_perf::PerfMain(argc, argv, ReduceScatter());
}
