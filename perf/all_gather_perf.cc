// all_gather_perf: nccl-tests' all_gather_perf for Baton; flags and output in perf_common.h.
//
// SPDX-License-Identifier: BSD-3-Clause
#include "perf_common.h"

namespace {

class AllGather : public baton_perf::Collective {
 public:
  const char* Name() const override { return "AllGather"; }
  bool UsesOp() const override { return false; }
  bool UsesRoot() const override { return false; }

  // The size is the gathered (receive) buffer; each rank contributes its share of it. In place,
  // a rank's input is already its own block of the output: send = recv + rank * share.
  baton_perf::CollCounts GetCounts(size_t count, size_t type_size, int nranks) const override {
    const size_t share = baton_perf::RankShare(count, type_size, nranks);
    return {.send_count = share,
            .recv_count = share * nranks,
            .param_count = share,
            .send_inplace_offset = share};
  }

  // algbw counts everything a rank ends up with, its own block included.
  double AlgBytes(const baton_perf::CollCounts& counts, size_t type_size,
                  int nranks) const override {
    return static_cast<double>(counts.param_count * type_size) * nranks;
  }

  // Each rank must receive the n-1 blocks it does not have: (n-1)/n of the output.
  double BusBwFactor(int nranks) const override { return (nranks - 1.0) / nranks; }

  void InitData(const baton_perf::InitArgs& args) const override {
    // Block r holds Input(r, r * share + i): distinct ranks and distinct indices, so a block
    // landing at the wrong offset cannot match by accident.
    const size_t share = args.counts.send_count;
    args.pattern.FillInput(args.input, share, args.rank * share, args.rank);
    for (int r = 0; r < args.nranks; ++r) {
      args.pattern.FillInput(baton_perf::ElementAt(args.expected, r * share, args.pattern.type()),
                             share, r * share, r);
    }
  }

  batonResult_t Run(const baton_perf::RunArgs& args) const override {
    return batonAllGather(args.send, args.recv, args.count, args.type, args.comm, args.stream);
  }
};

}  // namespace

int main(int argc, char** argv) {
  return baton_perf::PerfMain(argc, argv, AllGather());
}
