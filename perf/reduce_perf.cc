// reduce_perf: nccl-tests' reduce_perf for Baton; flags and output in perf_common.h.
//
// SPDX-License-Identifier: BSD-3-Clause
#include "perf_common.h"

#include <cstring>

namespace {

class Reduce : public baton_perf::Collective {
 public:
  const char* Name() const override { return "Reduce"; }
  bool UsesOp() const override { return true; }
  bool UsesRoot() const override { return true; }

  baton_perf::CollCounts GetCounts(size_t count, size_t /*type_size*/,
                                   int /*nranks*/) const override {
    // In place, the root reduces into the buffer it sends from: both offsets are 0.
    return {.send_count = count, .recv_count = count, .param_count = count};
  }

  // Only the root receives, and at least the whole result must reach it once.
  double BusBwFactor(int /*nranks*/) const override { return 1.0; }

  void InitData(const baton_perf::InitArgs& args) const override {
    const size_t count = args.counts.send_count;
    args.pattern.FillInput(args.input, count, 0, args.rank);
    if (args.rank == args.root) {
      args.pattern.FillReduced(args.expected, args.counts.recv_count, 0);
    } else if (args.in_place) {
      // A non-root's receive buffer is not Baton's to write (it may even be NULL), so it must
      // come back as it was, as nccl-tests checks: holding the input in place, zeroed otherwise.
      args.pattern.FillInput(args.expected, count, 0, args.rank);
    } else {
      std::memset(args.expected, 0, count * baton_perf::TypeSize(args.pattern.type()));
    }
  }

  batonResult_t Run(const baton_perf::RunArgs& args) const override {
    return batonReduce(args.send, args.recv, args.count, args.type, args.op, args.root, args.comm,
                       args.stream);
  }
};

}  // namespace

int main(int argc, char** argv) {
  return baton_perf::PerfMain(argc, argv, Reduce());
}
