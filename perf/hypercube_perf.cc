// hypercube_perf: nccl-tests' hypercube_perf for Baton; flags and output in perf_common.h. An
// allgather built from point-to-point calls: in step k every rank swaps everything it has
// gathered so far with the rank whose number differs in bit k, so after log2(n) steps (one
// batonSend/batonRecv group each) every rank holds all n blocks. Power-of-two rank counts only.
//
// SPDX-License-Identifier: BSD-3-Clause
#include <cstdio>

#include "perf_common.h"

namespace {

bool IsPowerOfTwo(int n) {
  return n > 0 && (n & (n - 1)) == 0;
}

// One group of calls; closed even after a failed call, so that this thread's later calls are
// not queued into a group that never ends.
template <typename Calls>
batonResult_t InGroup(Calls&& calls) {
  if (batonResult_t r = batonGroupStart(); r != batonSuccess) return r;
  const batonResult_t result = calls();
  const batonResult_t end = batonGroupEnd();
  return result != batonSuccess ? result : end;
}

class HyperCube : public baton_perf::Collective {
 public:
  const char* Name() const override { return "HyperCube"; }
  bool UsesOp() const override { return false; }
  bool UsesRoot() const override { return false; }

  // As all_gather_perf (nccl-tests' HyperCubeGetCollByteCount): each rank contributes a share of
  // the gathered buffer, in place at recv + rank * share.
  baton_perf::CollCounts GetCounts(size_t count, size_t type_size, int nranks) const override {
    const size_t share = baton_perf::RankShare(count, type_size, nranks);
    return {.send_count = share,
            .recv_count = share * nranks,
            .param_count = share,
            .send_inplace_offset = share};
  }

  // nccl-tests' HyperCubeGetBw: algbw = size * (n-1) / time with size the whole gathered
  // buffer, and busbw = algbw (factor 1). Unlike all_gather_perf, both count the n-1 blocks that
  // cross the links, so busbw here is n times all_gather_perf's for the same time.
  double AlgBytes(const baton_perf::CollCounts& counts, size_t type_size,
                  int nranks) const override {
    return static_cast<double>(counts.recv_count * type_size) * (nranks - 1);
  }
  double BusBwFactor(int /*nranks*/) const override { return 1.0; }

  void InitData(const baton_perf::InitArgs& args) const override {
    const size_t share = args.counts.send_count;
    args.pattern.FillInput(args.input, share, args.rank * share, args.rank);
    for (int r = 0; r < args.nranks; ++r) {
      args.pattern.FillInput(baton_perf::ElementAt(args.expected, r * share, args.pattern.type()),
                             share, r * share, r);
    }
  }

  batonResult_t Run(const baton_perf::RunArgs& args) const override {
    // nccl-tests skips other rank counts with a line; failing says so where a script looks.
    if (!IsPowerOfTwo(args.nranks)) {
      std::fprintf(stderr, "hypercube_perf: %d ranks is not a power of two\n", args.nranks);
      return batonInvalidArgument;
    }
    auto* recv = static_cast<std::byte*>(args.recv);
    const size_t block = args.count * baton_perf::TypeSize(args.type);
    // Out of place, this rank's block goes to its slot first: a send to self and its receive,
    // so that the copy is queued on the stream in order with the exchanges (nccl-tests uses
    // cudaMemcpyAsync on its stream).
    std::byte* mine = recv + args.rank * block;
    if (mine != args.send) {
      const batonResult_t copy = InGroup([&] {
        batonResult_t r =
            batonSend(args.send, args.count, args.type, args.rank, args.comm, args.stream);
        if (r == batonSuccess) {
          r = batonRecv(mine, args.count, args.type, args.rank, args.comm, args.stream);
        }
        return r;
      });
      if (copy != batonSuccess) return copy;
    }
    // Step `mask`: this rank holds the `mask` blocks from `have` on and swaps them for the
    // partner's `mask` blocks, which start at `have ^ mask`.
    for (int mask = 1; mask < args.nranks; mask <<= 1) {
      const int have = args.rank & ~(mask - 1);
      const int partner = args.rank ^ mask;
      const batonResult_t step = InGroup([&] {
        batonResult_t r = batonSend(recv + have * block, args.count * mask, args.type, partner,
                                    args.comm, args.stream);
        if (r == batonSuccess) {
          r = batonRecv(recv + (have ^ mask) * block, args.count * mask, args.type, partner,
                        args.comm, args.stream);
        }
        return r;
      });
      if (step != batonSuccess) return step;
    }
    return batonSuccess;
  }
};

}  // namespace

int main(int argc, char** argv) {
  return baton_perf::PerfMain(argc, argv, HyperCube());
}
