// alltoallv_perf: batonAlltoAllV with a fixed uneven pattern; flags and output in
// perf_common.h. nccl-tests has no alltoallv, so the conventions are these (perf/README.md):
// rank i sends w(i, j) = (i + j) % 4 units to rank j (0 to 3 units: uneven, some pairs empty);
// blocks sit at a stride of 3 units in both buffers (sdispls[j] = j * 3 units, rdispls[i] =
// i * 3 units), so the size is nranks * 3 units per buffer. algbw counts the bytes this pattern
// moves per rank on average (sum over pairs of w / nranks units); busbw = algbw * (n-1)/n as for
// alltoall. In place, send and receive buffer are one.
//
// SPDX-License-Identifier: BSD-3-Clause
#include <cstring>
#include <vector>

#include "perf_common.h"

namespace {

int Weight(int i, int j) {
  return (i + j) % 4;
}

class AlltoAllV : public baton_perf::Collective {
 public:
  const char* Name() const override { return "AlltoAllV"; }
  bool UsesOp() const override { return false; }
  bool UsesRoot() const override { return false; }

  baton_perf::CollCounts GetCounts(size_t count, size_t type_size, int nranks) const override {
    const size_t unit = baton_perf::RankShare(count, type_size, 3 * nranks);
    return {.send_count = 3 * unit * nranks, .recv_count = 3 * unit * nranks, .param_count = unit};
  }

  double AlgBytes(const baton_perf::CollCounts& counts, size_t type_size,
                  int nranks) const override {
    size_t units = 0;
    for (int i = 0; i < nranks; ++i)
      for (int j = 0; j < nranks; ++j) units += Weight(i, j);
    return static_cast<double>(counts.param_count * type_size) * units / nranks;
  }

  double BusBwFactor(int nranks) const override { return (nranks - 1.0) / nranks; }

  void InitData(const baton_perf::InitArgs& args) const override {
    const size_t unit = args.counts.param_count, stride = 3 * unit;
    const batonDataType_t type = args.pattern.type();
    const size_t es = baton_perf::TypeSize(type);
    // Block j of the input: Input(rank, j * stride + k).
    for (int j = 0; j < args.nranks; ++j)
      args.pattern.FillInput(baton_perf::ElementAt(args.input, j * stride, type),
                             Weight(args.rank, j) * unit, j * stride, args.rank);
    // In place the buffer keeps what was not received into; out of place it stays zero.
    if (args.in_place) {
      std::memcpy(args.expected, args.input, args.counts.recv_count * es);
    } else {
      std::memset(args.expected, 0, args.counts.recv_count * es);
    }
    // Block i of the output: rank i's block for this rank.
    for (int i = 0; i < args.nranks; ++i)
      args.pattern.FillInput(baton_perf::ElementAt(args.expected, i * stride, type),
                             Weight(i, args.rank) * unit, args.rank * stride, i);
  }

  batonResult_t Run(const baton_perf::RunArgs& args) const override {
    if (rank_ != args.rank || sc_.size() != static_cast<size_t>(args.nranks) ||
        unit_ != args.count) {
      rank_ = args.rank;
      unit_ = args.count;
      sc_.assign(args.nranks, 0);
      rc_.assign(args.nranks, 0);
      d_.assign(args.nranks, 0);
      for (int j = 0; j < args.nranks; ++j) {
        sc_[j] = Weight(args.rank, j) * unit_;
        rc_[j] = Weight(j, args.rank) * unit_;
        d_[j] = j * 3 * unit_;
      }
    }
    return batonAlltoAllV(args.send, sc_.data(), d_.data(), args.recv, rc_.data(), d_.data(),
                          args.type, args.comm, args.stream);
  }

 private:
  // The arrays of the last size, so that timing does not include building them.
  mutable int rank_ = -1;
  mutable size_t unit_ = 0;
  mutable std::vector<size_t> sc_, rc_, d_;
};

}  // namespace

int main(int argc, char** argv) {
  return baton_perf::PerfMain(argc, argv, AlltoAllV());
}
