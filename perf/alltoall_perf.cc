// alltoall_perf: nccl-tests' alltoall_perf for Baton; flags and output in perf_common.h.
//
// SPDX-License-Identifier: BSD-3-Clause
#include "perf_common.h"

namespace {

class AlltoAll : public baton_perf::Collective {
 public:
  const char* Name() const override { return "AlltoAll"; }
  bool UsesOp() const override { return false; }
  bool UsesRoot() const override { return false; }

  // The size is a rank's whole send (and receive) buffer: one block per rank. In place, both are
  // the same buffer.
  baton_perf::CollCounts GetCounts(size_t count, size_t type_size, int nranks) const override {
    const size_t share = baton_perf::RankShare(count, type_size, nranks);
    return {.send_count = share * nranks, .recv_count = share * nranks, .param_count = share};
  }

  double AlgBytes(const baton_perf::CollCounts& counts, size_t type_size,
                  int nranks) const override {
    return static_cast<double>(counts.param_count * type_size) * nranks;
  }

  // Every block but the one a rank keeps crosses a link: (n-1)/n of the buffer.
  double BusBwFactor(int nranks) const override { return (nranks - 1.0) / nranks; }

  void InitData(const baton_perf::InitArgs& args) const override {
    const size_t share = args.counts.param_count;
    args.pattern.FillInput(args.input, args.counts.send_count, 0, args.rank);
    // Block r of the output is block `rank` of rank r's input.
    for (int r = 0; r < args.nranks; ++r) {
      args.pattern.FillInput(baton_perf::ElementAt(args.expected, r * share, args.pattern.type()),
                             share, args.rank * share, r);
    }
  }

  batonResult_t Run(const baton_perf::RunArgs& args) const override {
    return batonAlltoAll(args.send, args.recv, args.count, args.type, args.comm, args.stream);
  }
};

}  // namespace

int main(int argc, char** argv) {
  return baton_perf::PerfMain(argc, argv, AlltoAll());
}
