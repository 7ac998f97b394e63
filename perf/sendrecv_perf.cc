// sendrecv_perf: nccl-tests' sendrecv_perf for Baton; flags and output in perf_common.h. Every
// rank sends to the next rank and receives from the previous one, a ring shift.
//
// SPDX-License-Identifier: BSD-3-Clause
#include "perf_common.h"

namespace {

int NextRank(int rank, int nranks) {
  return (rank + 1) % nranks;
}

int PrevRank(int rank, int nranks) {
  return (rank - 1 + nranks) % nranks;
}

class SendRecv : public baton_perf::Collective {
 public:
  const char* Name() const override { return "SendRecv"; }
  // nccl-tests also sweeps -o here and prints the op's name, though nothing is reduced; running
  // the same exchange once per op would measure nothing new.
  bool UsesOp() const override { return false; }
  bool UsesRoot() const override { return false; }

  baton_perf::CollCounts GetCounts(size_t count, size_t /*type_size*/,
                                   int /*nranks*/) const override {
    return {.send_count = count, .recv_count = count, .param_count = count};
  }

  // Every rank sends and receives the whole buffer once.
  double BusBwFactor(int /*nranks*/) const override { return 1.0; }

  void InitData(const baton_perf::InitArgs& args) const override {
    args.pattern.FillInput(args.input, args.counts.send_count, 0, args.rank);
    args.pattern.FillInput(args.expected, args.counts.recv_count, 0,
                           PrevRank(args.rank, args.nranks));
  }

  // In place, a rank would overwrite what it is still sending; nccl-tests reports N/A.
  bool ChecksInPlace() const override { return false; }

  batonResult_t Run(const baton_perf::RunArgs& args) const override {
    // One group, so that the send and the receive progress together: each alone would wait for
    // a peer that is itself waiting.
    batonResult_t result = batonGroupStart();
    if (result != batonSuccess) return result;
    result = batonSend(args.send, args.count, args.type, NextRank(args.rank, args.nranks),
                       args.comm, args.stream);
    if (result == batonSuccess) {
      result = batonRecv(args.recv, args.count, args.type, PrevRank(args.rank, args.nranks),
                         args.comm, args.stream);
    }
    // Closed even after a failed call, so that this thread's later calls are not queued into a
    // group that never ends.
    const batonResult_t end = batonGroupEnd();
    return result != batonSuccess ? result : end;
  }
};

}  // namespace

int main(int argc, char** argv) {
  return baton_perf::PerfMain(argc, argv, SendRecv());
}
