// all_gather_v_perf: batonAllGatherV with a fixed uneven pattern; flags and output in
// perf_common.h. nccl-tests has no allgatherv, so the conventions are these (perf/README.md):
// rank r contributes w(r) = (r + 1) % 4 units (1, 2, 3, 0, 1, ...: uneven, some ranks empty);
// the blocks sit at displs[r] = r * 3 units, so the size (the receive buffer) is nranks * 3
// units and the gaps between blocks must come back untouched (they are checked as zeros).
// algbw counts the bytes actually gathered, sum of w(r) units; busbw = algbw * (n-1)/n as for
// allgather.
//
// SPDX-License-Identifier: BSD-3-Clause
#include <cstring>
#include <vector>

#include "perf_common.h"

namespace {

int Weight(int r) {
  return (r + 1) % 4;
}

class AllGatherV : public baton_perf::Collective {
 public:
  const char* Name() const override { return "AllGatherV"; }
  bool UsesOp() const override { return false; }
  bool UsesRoot() const override { return false; }

  // param_count is the unit; a block's stride is 3 units, so in place a rank's input is at
  // recv + rank * 3 units = recv + displs[rank].
  baton_perf::CollCounts GetCounts(size_t count, size_t type_size, int nranks) const override {
    const size_t unit = baton_perf::RankShare(count, type_size, 3 * nranks);
    return {.send_count = 3 * unit,  // room for the largest block; Weight(rank) units are sent
            .recv_count = 3 * unit * nranks,
            .param_count = unit,
            .send_inplace_offset = 3 * unit};
  }

  double AlgBytes(const baton_perf::CollCounts& counts, size_t type_size,
                  int nranks) const override {
    size_t units = 0;
    for (int r = 0; r < nranks; ++r) units += Weight(r);
    return static_cast<double>(counts.param_count * type_size * units);
  }

  double BusBwFactor(int nranks) const override { return (nranks - 1.0) / nranks; }

  void InitData(const baton_perf::InitArgs& args) const override {
    const size_t unit = args.counts.param_count;
    const batonDataType_t type = args.pattern.type();
    args.pattern.FillInput(args.input, Weight(args.rank) * unit, args.rank * 3 * unit, args.rank);
    // The gaps between blocks must come back as the driver left them: zero.
    std::memset(args.expected, 0, args.counts.recv_count * baton_perf::TypeSize(type));
    for (int r = 0; r < args.nranks; ++r)
      args.pattern.FillInput(baton_perf::ElementAt(args.expected, r * 3 * unit, type),
                             Weight(r) * unit, r * 3 * unit, r);
  }

  batonResult_t Run(const baton_perf::RunArgs& args) const override {
    if (counts_.size() != static_cast<size_t>(args.nranks) || unit_ != args.count) {
      unit_ = args.count;
      counts_.assign(args.nranks, 0);
      displs_.assign(args.nranks, 0);
      for (int r = 0; r < args.nranks; ++r) {
        counts_[r] = Weight(r) * unit_;
        displs_[r] = r * 3 * unit_;
      }
    }
    return batonAllGatherV(args.send, counts_[args.rank], args.recv, counts_.data(), displs_.data(),
                           args.type, args.comm, args.stream);
  }

 private:
  // The arrays of the last size, so that timing does not include building them.
  mutable size_t unit_ = 0;
  mutable std::vector<size_t> counts_, displs_;
};

}  // namespace

int main(int argc, char** argv) {
  return baton_perf::PerfMain(argc, argv, AllGatherV());
}
