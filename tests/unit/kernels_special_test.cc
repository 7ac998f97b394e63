// ReduceCopy on the edge values of every type, bit-for-bit agreement of
// each kernel level with the portable core, and the device-style
// grid-stride use of the core (the CUDA kernels' loop, run on the host).
// The cases run through the harness of kernels_harness.h; the suite is
// instantiated in kernels_test.cc.
//
// SPDX-License-Identifier: BSD-3-Clause

#include "unit/kernels_harness.h"

namespace baton::kernel_test {
namespace {

// ---- Special values and agreement with the portable core ------------------------------

// Raw bit patterns at the edges of each type: signed zeros, infinities,
// quiet and signalling NaNs with payloads and both signs, the smallest and
// largest subnormals, the smallest normal, the largest finite value, one and
// its neighbour (for rounding ties); for integers the extremes and small
// values. Entries wider than the element are truncated, so only each type's
// own row matters.
uint64_t SpecialElement(batonDataType_t dt, FastRng& rng) {
  static const std::vector<uint64_t> kHalf = {
      0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0xfe01, 0x7c01, 0xfd55, 0x0001, 0x8001,
      0x03ff, 0x83ff, 0x0400, 0x7bff, 0xfbff, 0x3c00, 0xbc00, 0x3c01, 0x1400, 0x6800};
  static const std::vector<uint64_t> kBf16 = {
      0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0xffc1, 0x7f81, 0xff95, 0x0001, 0x8001,
      0x007f, 0x807f, 0x0080, 0x7f7f, 0xff7f, 0x3f80, 0xbf80, 0x3f81, 0x3b80, 0x4b80};
  static const std::vector<uint64_t> kFloat = {
      0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00001, 0x7f800001,
      0xff812345, 0x00000001, 0x80000001, 0x007fffff, 0x807fffff, 0x00800000, 0x7f7fffff,
      0xff7fffff, 0x3f800000, 0xbf800000, 0x3f800001, 0x33800000, 0x4b800000};
  static const std::vector<uint64_t> kDouble = {
      0x0000000000000000, 0x8000000000000000, 0x7ff0000000000000, 0xfff0000000000000,
      0x7ff8000000000000, 0xfff8000000000001, 0x7ff0000000000001, 0xfff0123456789abc,
      0x0000000000000001, 0x8000000000000001, 0x000fffffffffffff, 0x800fffffffffffff,
      0x0010000000000000, 0x7fefffffffffffff, 0xffefffffffffffff, 0x3ff0000000000000,
      0xbff0000000000000, 0x3ff0000000000001, 0x3ca0000000000000, 0x4340000000000000};
  static const std::vector<uint64_t> kInt = {0,
                                             1,
                                             2,
                                             ~uint64_t{0},
                                             0x7f,
                                             0x80,
                                             0xff,
                                             0x7fffffff,
                                             0x80000000,
                                             0xffffffff,
                                             0x7fffffffffffffff,
                                             0x8000000000000000,
                                             0xfffffffffffffffe,
                                             0x100000001};
  const std::vector<uint64_t>* pool = &kInt;
  switch (KindOf(dt)) {
    case Kind::kE4m3:
    case Kind::kE5m2:
      // 256 patterns in all: any byte is special enough.
      if (rng() % 8 == 0) return RandomElement(dt, rng);
      return rng() & 0xff;
    case Kind::kHalf:
      pool = &kHalf;
      break;
    case Kind::kBf16:
      pool = &kBf16;
      break;
    case Kind::kFloat:
      pool = &kFloat;
      break;
    case Kind::kDouble:
      pool = &kDouble;
      break;
    default:
      break;
  }
  // A few ordinary values too, so specials meet finite operands.
  if (rng() % 8 == 0) return RandomElement(dt, rng);
  return (*pool)[rng() % pool->size()];
}

// Every op x nsrcs x ndsts over operands drawn mostly from SpecialElement.
TEST_P(ReduceCopyTest, SpecialValues) {
  const batonDataType_t dt = datatype();
  FastRng rng(5000 + dt);
  FailureBudget budget;
  for (batonRedOp_t op : kAllOps) {
    for (int nsrcs : {1, 2, 3, 8}) {
      for (int ndsts : {1, 2}) {
        for (uint32_t divisor : {0u, 3u}) {
          for (size_t count : {size_t{200}, size_t{301}}) {
            Case c{dt, op, nsrcs, ndsts, count, count % 2 == 1, Placement::kSeparate, divisor};
            if (!budget.Check(RunCase(c, rng, SpecialElement))) return;
          }
        }
      }
    }
  }
}

// The selected level against the portable core itself (ReduceCopyRange run
// as a plain loop), bit for bit. For max/min and for copies even NaN payloads
// must agree: the core's choice of operand is fully specified there. Sums and
// products of two NaNs may carry either payload (the core leaves it open), so
// there both only need to be NaN. For fp16, bf16 and fp8 the first run feeds
// every bit pattern through the conversions (x + -0 and x max -0 are exact
// in fp32, so the store must reproduce the core's rounding of every input).
TEST_P(ReduceCopyTest, MatchesPortableCoreBitwise) {
  const batonDataType_t dt = datatype();
  const size_t size = DatatypeSize(dt);
  const Kind kind = KindOf(dt);
  FastRng rng(6000 + dt);
  const bool is16 = kind == Kind::kHalf || kind == Kind::kBf16;
  const bool is8 = kind == Kind::kE4m3 || kind == Kind::kE5m2;
  constexpr size_t kCount = 65536 + 37;
  for (batonRedOp_t op : kAllOps) {
    for (int nsrcs : {2, 3}) {
      for (uint32_t divisor : {0u, 3u}) {
        for (int run = 0; run < 2; ++run) {
          const bool exhaustive = (is16 || is8) && run == 0;
          const uint64_t neg_zero = is8 ? 0x80 : 0x8000;
          std::vector<std::vector<uint8_t>> srcs(nsrcs, std::vector<uint8_t>(kCount * size));
          for (int s = 0; s < nsrcs; ++s) {
            for (size_t i = 0; i < kCount; ++i) {
              uint64_t v = run == 0 ? rng() : SpecialElement(dt, rng);
              if (exhaustive) v = s == 0 ? (i & 0xffff) : neg_zero;  // x op -0
              StoreRaw(srcs[s].data(), size, i, v);
            }
          }
          std::vector<uint8_t> got(kCount * size), want(kCount * size);
          ReduceCopyArgs args;
          for (int s = 0; s < nsrcs; ++s) args.srcs[s] = srcs[s].data();
          args.nsrcs = nsrcs;
          args.dsts[0] = got.data();
          args.ndsts = 1;
          args.count = kCount;
          args.datatype = dt;
          args.op = op;
          args.post_divisor = divisor;
          ReduceCopy(args);
          ASSERT_TRUE(DispatchReduce(dt, op, [&](auto type_tag, auto op_tag) {
            using T = typename decltype(type_tag)::type;
            using Op = typename decltype(op_tag)::type;
            const T* typed_srcs[kMaxReduceSrcs];
            for (int s = 0; s < nsrcs; ++s)
              typed_srcs[s] = reinterpret_cast<const T*>(srcs[s].data());
            T* typed_dst = reinterpret_cast<T*>(want.data());
            ReduceCopyRange<T, Op>(typed_srcs, nsrcs, &typed_dst, 1, 0, kCount, 1, divisor);
          }));
          const bool payloads_free = op == batonSum || op == batonProd || op == batonAvg;
          for (size_t i = 0; i < kCount; ++i) {
            const uint64_t g = LoadRaw(got.data(), size, i);
            const uint64_t w = LoadRaw(want.data(), size, i);
            const bool ok = g == w || (payloads_free && SameElement(kind, g, w));
            ASSERT_TRUE(ok) << DatatypeName(dt) << " " << RedOpName(op) << " nsrcs=" << nsrcs
                            << " div=" << divisor << " run=" << run << " element " << i << std::hex
                            << ": got 0x" << g << " want 0x" << w;
          }
        }
      }
    }
  }
}

// ---- Grid emulation ----------------------------------------------------------------

// Runs ReduceCopyRange the way a CUDA kernel's grid-stride loop does: one
// call per (block, thread) with begin = block * blockDim + thread and
// stride = grid * blockDim. The calls are sequential here, but as on a GPU
// each covers a disjoint set of indices, so their order does not matter.
template <typename T, typename Op>
void EmulateGrid(const ReduceCopyArgs& args, int grid, int block) {
  const T* srcs[kMaxReduceSrcs];
  T* dsts[kMaxReduceDsts];
  for (int s = 0; s < args.nsrcs; ++s) srcs[s] = static_cast<const T*>(args.srcs[s]);
  for (int d = 0; d < args.ndsts; ++d) dsts[d] = static_cast<T*>(args.dsts[d]);
  const size_t stride = static_cast<size_t>(grid) * block;
  for (int b = 0; b < grid; ++b) {
    for (int t = 0; t < block; ++t) {
      ReduceCopyRange<T, Op>(srcs, args.nsrcs, dsts, args.ndsts, static_cast<size_t>(b) * block + t,
                             args.count, stride, args.post_divisor);
    }
  }
}

TEST_P(ReduceCopyTest, GridEmulationMatchesCpu) {
  const batonDataType_t dt = datatype();
  const size_t size = DatatypeSize(dt);
  const Kind kind = KindOf(dt);
  FastRng rng(4000 + dt);
  const std::pair<int, int> kShapes[] = {{1, 1}, {3, 7}, {13, 32}, {64, 256}};
  const std::pair<int, int> kFanout[] = {{1, 1}, {2, 1}, {3, 2}, {8, 2}};
  for (batonRedOp_t op : kAllOps) {
    for (auto [nsrcs, ndsts] : kFanout) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{1000}, size_t{4099}}) {
        for (auto [grid, block] : kShapes) {
          const bool in_place = (count + grid) % 2 == 0;
          std::vector<std::vector<uint8_t>> srcs(nsrcs, std::vector<uint8_t>(count * size));
          for (auto& s : srcs) {
            for (size_t i = 0; i < count; ++i) StoreRaw(s.data(), size, i, RandomElement(dt, rng));
          }
          // Two copies of everything: one for the CPU path, one for the grid,
          // so in-place runs start from the same inputs.
          std::vector<std::vector<uint8_t>> grid_srcs = srcs;
          std::vector<std::vector<uint8_t>> cpu_dsts(ndsts, std::vector<uint8_t>(count * size));
          std::vector<std::vector<uint8_t>> grid_dsts = cpu_dsts;
          ReduceCopyArgs cpu;
          ReduceCopyArgs dev;
          for (int s = 0; s < nsrcs; ++s) {
            cpu.srcs[s] = srcs[s].data();
            dev.srcs[s] = grid_srcs[s].data();
          }
          for (int d = 0; d < ndsts; ++d) {
            cpu.dsts[d] = cpu_dsts[d].data();
            dev.dsts[d] = grid_dsts[d].data();
          }
          if (in_place) {
            cpu.dsts[0] = srcs[0].data();
            dev.dsts[0] = grid_srcs[0].data();
          }
          cpu.nsrcs = dev.nsrcs = nsrcs;
          cpu.ndsts = dev.ndsts = ndsts;
          cpu.count = dev.count = count;
          cpu.datatype = dev.datatype = dt;
          cpu.op = dev.op = op;
          cpu.post_divisor = dev.post_divisor = op == batonAvg ? static_cast<uint32_t>(nsrcs) : 0;
          ReduceCopy(cpu);
          ASSERT_TRUE(DispatchReduce(dt, op, [&](auto type_tag, auto op_tag) {
            EmulateGrid<typename decltype(type_tag)::type, typename decltype(op_tag)::type>(
                dev, grid, block);
          }));
          // Bit-exact except for NaN payloads: both run the same core functors,
          // but the compiler may commute the operands of a vectorized float add,
          // and which NaN's payload survives is not specified.
          for (int d = 0; d < ndsts; ++d) {
            const uint8_t* want = static_cast<const uint8_t*>(cpu.dsts[d]);
            const uint8_t* got = static_cast<const uint8_t*>(dev.dsts[d]);
            for (size_t i = 0; i < count; ++i) {
              ASSERT_TRUE(SameElement(kind, LoadRaw(got, size, i), LoadRaw(want, size, i)))
                  << DatatypeName(dt) << " " << RedOpName(op) << " nsrcs=" << nsrcs
                  << " ndsts=" << ndsts << " count=" << count << " grid=" << grid
                  << " block=" << block << (in_place ? " in place" : "") << " dst " << d
                  << " element " << i;
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace baton::kernel_test
