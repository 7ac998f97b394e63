// scatter_perf: nccl-tests' scatter_perf for Baton; flags and output in perf_common.h.
//
// SPDX-License-Identifier: BSD-3-Clause
#include "perf_common.h"

namespace {

class Scatter : public baton_perf::Collective {
 public:
  const char* Name() const override { return "Scatter"; }
  bool UsesOp() const override { return false; }
  bool UsesRoot() const override { return true; }

  // The size is the root's input; each rank receives its share. In place, a rank's output is its
  // own block of the input buffer (only the root's counts).
  baton_perf::CollCounts GetCounts(size_t count, size_t type_size, int nranks) const override {
    const size_t share = baton_perf::RankShare(count, type_size, nranks);
    return {.send_count = share * nranks,
            .recv_count = share,
            .param_count = share,
            .recv_inplace_offset = share};
  }

  double AlgBytes(const baton_perf::CollCounts& counts, size_t type_size,
                  int nranks) const override {
    return static_cast<double>(counts.param_count * type_size) * nranks;
  }

  // As nccl-tests: the root must send the n-1 blocks it does not keep.
  double BusBwFactor(int nranks) const override { return (nranks - 1.0) / nranks; }

  void InitData(const baton_perf::InitArgs& args) const override {
    const size_t share = args.counts.recv_count;
    const batonDataType_t type = args.pattern.type();
    // Block r of the root's input is Input(r, r * share + i); only the root's input is read.
    if (args.rank == args.root)
      for (int r = 0; r < args.nranks; ++r)
        args.pattern.FillInput(baton_perf::ElementAt(args.input, r * share, type), share, r * share,
                               r);
    args.pattern.FillInput(args.expected, share, args.rank * share, args.rank);
  }

  batonResult_t Run(const baton_perf::RunArgs& args) const override {
    return batonScatter(args.send, args.recv, args.count, args.type, args.root, args.comm,
                        args.stream);
  }
};

}  // namespace

int main(int argc, char** argv) {
  return baton_perf::PerfMain(argc, argv, Scatter());
}
