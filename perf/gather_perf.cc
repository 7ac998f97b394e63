// gather_perf: nccl-tests' gather_perf for Baton; flags and output in perf_common.h.
//
// SPDX-License-Identifier: BSD-3-Clause
#include <cstring>

#include "perf_common.h"

namespace {

class Gather : public baton_perf::Collective {
 public:
  const char* Name() const override { return "Gather"; }
  bool UsesOp() const override { return false; }
  bool UsesRoot() const override { return true; }

  // The size is the root's gathered buffer; each rank sends its share. In place, a rank's input
  // is its own block of its receive buffer (only the root's counts).
  baton_perf::CollCounts GetCounts(size_t count, size_t type_size, int nranks) const override {
    const size_t share = baton_perf::RankShare(count, type_size, nranks);
    return {.send_count = share,
            .recv_count = share * nranks,
            .param_count = share,
            .send_inplace_offset = share};
  }

  double AlgBytes(const baton_perf::CollCounts& counts, size_t type_size,
                  int nranks) const override {
    return static_cast<double>(counts.param_count * type_size) * nranks;
  }

  // As nccl-tests: the root must receive the n-1 blocks it does not have.
  double BusBwFactor(int nranks) const override { return (nranks - 1.0) / nranks; }

  void InitData(const baton_perf::InitArgs& args) const override {
    const size_t share = args.counts.send_count;
    const batonDataType_t type = args.pattern.type();
    args.pattern.FillInput(args.input, share, args.rank * share, args.rank);
    if (args.rank == args.root) {
      for (int r = 0; r < args.nranks; ++r)
        args.pattern.FillInput(baton_perf::ElementAt(args.expected, r * share, type), share,
                               r * share, r);
      return;
    }
    // A non-root's receive buffer is not Baton's to write: it must come back as it was.
    std::memset(args.expected, 0, args.counts.recv_count * baton_perf::TypeSize(type));
    if (args.in_place)
      args.pattern.FillInput(baton_perf::ElementAt(args.expected, args.rank * share, type), share,
                             args.rank * share, args.rank);
  }

  batonResult_t Run(const baton_perf::RunArgs& args) const override {
    return batonGather(args.send, args.recv, args.count, args.type, args.root, args.comm,
                       args.stream);
  }
};

}  // namespace

int main(int argc, char** argv) {
  return baton_perf::PerfMain(argc, argv, Gather());
}
