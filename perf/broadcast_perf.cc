// broadcast_perf: nccl-tests' broadcast_perf for Baton; flags and output in perf_common.h.
//
// SPDX-License-Identifier: BSD-3-Clause
#include "perf_common.h"

namespace {

class Broadcast : public baton_perf::Collective {
 public:
  const char* Name() const override { return "Broadcast"; }
  bool UsesOp() const override { return false; }
  bool UsesRoot() const override { return true; }

  baton_perf::CollCounts GetCounts(size_t count, size_t /*type_size*/,
                                   int /*nranks*/) const override {
    // In place, the root sends from the buffer every rank receives into.
    return {.send_count = count, .recv_count = count, .param_count = count};
  }

  // Every rank receives the whole buffer once, whatever the algorithm (tree, pipeline).
  double BusBwFactor(int /*nranks*/) const override { return 1.0; }

  void InitData(const baton_perf::InitArgs& args) const override {
    // Only the root's input is read; the others' receive buffers start zeroed by the driver.
    if (args.rank == args.root) {
      args.pattern.FillInput(args.input, args.counts.send_count, 0, args.root);
    }
    args.pattern.FillInput(args.expected, args.counts.recv_count, 0, args.root);
  }

  batonResult_t Run(const baton_perf::RunArgs& args) const override {
    return batonBroadcast(args.send, args.recv, args.count, args.type, args.root, args.comm,
                          args.stream);
  }
};

}  // namespace

int main(int argc, char** argv) {
  return baton_perf::PerfMain(argc, argv, Broadcast());
}
