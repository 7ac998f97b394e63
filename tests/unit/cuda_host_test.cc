// Host-side tests of the CUDA reduce-copy kernels' own code (no GPU needed):
// the 16-byte pack split and the launch geometry of
// src/kernels/cuda/reduce_copy_device.h, and the per-thread body the kernels
// run, emulated thread by thread for several launch shapes (including the
// one the launcher picks), compared byte for byte with the CPU back end
// (ReduceCopy, itself checked against a scalar reference in kernels_test).
//
// SPDX-License-Identifier: BSD-3-Clause

#include <gtest/gtest.h>
#include <string.h>

#include <random>
#include <string>
#include <vector>

#include <baton.h>

#include "base/datatype.h"
#include "common/reference.h"
#include "kernels/cpu_reduce.h"
#include "kernels/cuda/reduce_copy_device.h"
#include "kernels/reduce_copy.h"

namespace baton {
namespace {

using cudakern::KernelArgs;
using cudakern::VectorSplit;

// Storage whose data() starts `offset` bytes past a 64-byte boundary.
class OffsetBuffer {
 public:
  OffsetBuffer(size_t bytes, size_t offset) : storage_(bytes + 128) {
    const auto base = reinterpret_cast<uintptr_t>(storage_.data());
    start_ = ((base + 63) & ~uintptr_t{63}) - base + offset;
  }
  uint8_t* data() { return storage_.data() + start_; }

 private:
  std::vector<uint8_t> storage_;
  size_t start_ = 0;
};

// Values without NaNs (whose payload a reduction leaves unspecified), small
// enough that products stay finite in most cases; integers use all bits.
void FillRandom(uint8_t* p, size_t count, batonDataType_t dt, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> real(-8.0f, 8.0f);
  for (size_t i = 0; i < count; ++i) {
    switch (dt) {
      case batonFloat16: {
        half_t h = FloatToHalf(real(rng));
        memcpy(p + 2 * i, &h, 2);
        break;
      }
      case batonBfloat16: {
        bfloat16_t b = FloatToBf16(real(rng));
        memcpy(p + 2 * i, &b, 2);
        break;
      }
      case batonFloat8e4m3:  // up to 128: products of 8 sources saturate
        p[i] = FloatToFp8<fp8_e4m3_t>(real(rng) * 16).bits;
        break;
      case batonFloat8e5m2:
        p[i] = FloatToFp8<fp8_e5m2_t>(real(rng) * 16).bits;
        break;
      case batonFloat32: {
        float f = real(rng);
        memcpy(p + 4 * i, &f, 4);
        break;
      }
      case batonFloat64: {
        double d = static_cast<double>(real(rng)) / 3.0;
        memcpy(p + 8 * i, &d, 8);
        break;
      }
      default: {
        const size_t es = DatatypeSize(dt);
        for (size_t b = 0; b < es; ++b) p[es * i + b] = static_cast<uint8_t>(rng());
      }
    }
  }
}

// Runs the kernels' per-thread body for every thread of a grid x block
// launch, sequentially (the threads touch disjoint elements).
void EmulateLaunch(const KernelArgs& k, batonDataType_t dt, batonRedOp_t op, unsigned grid,
                   unsigned block) {
  const bool ok = DispatchReduce(dt, op, [&](auto type_tag, auto op_tag) {
    using T = typename decltype(type_tag)::type;
    using Op = typename decltype(op_tag)::type;
    const VectorSplit split = cudakern::SplitForVectors(k, sizeof(T));
    const size_t nthreads = static_cast<size_t>(grid) * block;
    for (size_t tid = 0; tid < nthreads; ++tid)
      cudakern::ReduceCopyThread<T, Op>(k, split, tid, nthreads);
  });
  ASSERT_TRUE(ok);
}

// The launch shape the CUDA launcher uses for these arguments.
cudakern::LaunchShape LauncherShape(const KernelArgs& k, batonDataType_t dt) {
  return cudakern::ShapeFor(cudakern::SplitForVectors(k, DatatypeSize(dt)));
}

TEST(CudaSplitTest, PartsCoverEveryElementOnce) {
  alignas(16) static uint8_t arena[4096];
  for (size_t es : {1, 2, 4, 8}) {
    for (size_t offset = 0; offset < 16; offset += es) {
      for (size_t count : {0, 1, 2, 7, 15, 16, 17, 31, 33, 100, 1000}) {
        KernelArgs k{};
        k.nsrcs = 2;
        k.ndsts = 2;
        k.count = count;
        k.srcs[0] = arena + offset;
        k.srcs[1] = arena + 1024 + offset;
        k.dsts[0] = arena + 2048 + offset;
        k.dsts[1] = arena + 3072 + offset;
        const VectorSplit sp = cudakern::SplitForVectors(k, es);
        const size_t per = 16 / es;
        SCOPED_TRACE("es " + std::to_string(es) + " offset " + std::to_string(offset) + " count " +
                     std::to_string(count));
        EXPECT_EQ(sp.head + sp.packs * per + sp.tail, count);
        EXPECT_LT(sp.tail, per);
        // The first pack starts on a 16-byte boundary.
        if (sp.packs > 0) {
          EXPECT_EQ((offset + sp.head * es) % 16, 0u);
        }
        EXPECT_EQ(sp.head, std::min(count, ((16 - offset) % 16) / es));
      }
    }
  }
}

TEST(CudaSplitTest, MixedOffsetsFallBackToScalar) {
  alignas(16) static uint8_t arena[1024];
  KernelArgs k{};
  k.nsrcs = 2;
  k.ndsts = 1;
  k.count = 100;
  k.srcs[0] = arena;
  k.srcs[1] = arena + 256 + 4;  // differs modulo 16 from the others
  k.dsts[0] = arena + 512;
  VectorSplit sp = cudakern::SplitForVectors(k, 4);
  EXPECT_EQ(sp.head, 100u);
  EXPECT_EQ(sp.packs, 0u);
  EXPECT_EQ(sp.tail, 0u);
  // A pointer that is not even element-aligned cannot take packs either.
  k.srcs[0] = arena + 2;
  k.srcs[1] = arena + 256 + 2;
  k.dsts[0] = arena + 512 + 2;
  sp = cudakern::SplitForVectors(k, 4);
  EXPECT_EQ(sp.packs, 0u);
  EXPECT_EQ(sp.head, 100u);
}

TEST(CudaSplitTest, LaunchShapeIsBoundedAndCoversWork) {
  for (size_t packs : {size_t{0}, size_t{1}, size_t{255}, size_t{256}, size_t{257}, size_t{1} << 20,
                       size_t{1} << 34}) {
    const cudakern::LaunchShape s = cudakern::ShapeFor(VectorSplit{3, packs, 5});
    EXPECT_GE(s.blocks, 1u);
    EXPECT_LE(s.blocks, cudakern::kMaxBlocks);
    EXPECT_EQ(s.threads, cudakern::kThreadsPerBlock);
    // One thread per pack until the block cap; grid-stride loops do the rest.
    const size_t wanted = std::max<size_t>(packs, 5);
    if (wanted <= size_t{cudakern::kMaxBlocks} * cudakern::kThreadsPerBlock) {
      EXPECT_GE(size_t{s.blocks} * s.threads, wanted);
    } else {
      EXPECT_EQ(s.blocks, cudakern::kMaxBlocks);
    }
  }
}

// Alignment cases: every pointer on a 16-byte boundary, all sharing one
// element-sized offset (scalar head, then packs), or offsets that differ
// (all scalar).
enum class Alignment { kAligned, kSameOffset, kMixed };

struct KernelCase {
  batonDataType_t dt;
  batonRedOp_t op;
};

class CudaKernelEmulationTest : public ::testing::TestWithParam<KernelCase> {};

TEST_P(CudaKernelEmulationTest, MatchesCpuBackEnd) {
  const batonDataType_t dt = GetParam().dt;
  const batonRedOp_t op = GetParam().op;
  const size_t es = DatatypeSize(dt);
  std::mt19937_64 rng(static_cast<uint64_t>(dt) * 131 + static_cast<uint64_t>(op));
  std::vector<size_t> counts;
  for (size_t c = 0; c <= 40; ++c) counts.push_back(c);
  for (size_t c : {63, 64, 65, 127, 257, 1000, 4099}) counts.push_back(c);
  for (int nsrcs : {1, 2, 3, 8}) {
    for (int ndsts : {1, 2}) {
      for (Alignment al : {Alignment::kAligned, Alignment::kSameOffset, Alignment::kMixed}) {
        for (size_t count : counts) {
          const size_t bytes = count * es;
          auto offset_of = [&](int buffer) -> size_t {
            if (al == Alignment::kAligned) return 0;
            if (al == Alignment::kSameOffset) return es < 16 ? es : 0;
            return (static_cast<size_t>(buffer) * es) % 16;  // differs across buffers
          };
          std::vector<OffsetBuffer> srcs;
          for (int s = 0; s < nsrcs; ++s) {
            srcs.emplace_back(bytes, offset_of(s));
            FillRandom(srcs.back().data(), count, dt, rng);
          }
          // In place on every other case: destination 0 is source 0.
          const bool in_place = count % 2 == 1;
          std::vector<OffsetBuffer> dsts;
          for (int d = 0; d < ndsts; ++d) dsts.emplace_back(bytes, offset_of(nsrcs + d + 1));
          std::vector<uint8_t> src0(srcs[0].data(), srcs[0].data() + bytes);

          // Reference: the CPU back end on copies.
          ReduceCopyArgs ref;
          std::vector<std::vector<uint8_t>> ref_out(ndsts, std::vector<uint8_t>(bytes + 1));
          ref.nsrcs = nsrcs;
          ref.ndsts = ndsts;
          for (int s = 0; s < nsrcs; ++s) ref.srcs[s] = srcs[s].data();
          for (int d = 0; d < ndsts; ++d) ref.dsts[d] = ref_out[d].data();
          ref.count = count;
          ref.datatype = dt;
          ref.op = op;
          ref.post_divisor = op == batonAvg ? static_cast<uint32_t>(nsrcs) : 0;
          ReduceCopy(ref);

          const unsigned shapes[][2] = {{1, 1}, {1, 32}, {3, 7}, {0, 0}};
          for (const auto& shape : shapes) {
            KernelArgs k{};
            k.nsrcs = nsrcs;
            k.ndsts = ndsts;
            k.count = count;
            k.post_divisor = ref.post_divisor;
            for (int s = 0; s < nsrcs; ++s) k.srcs[s] = srcs[s].data();
            for (int d = 0; d < ndsts; ++d) k.dsts[d] = dsts[d].data();
            if (in_place) {
              memcpy(srcs[0].data(), src0.data(), bytes);  // restore after the last run
              k.dsts[0] = srcs[0].data();
            }
            unsigned grid = shape[0], block = shape[1];
            if (grid == 0) {  // what the launcher would use
              const cudakern::LaunchShape ls = LauncherShape(k, dt);
              grid = ls.blocks;
              block = ls.threads;
            }
            EmulateLaunch(k, dt, op, grid, block);
            for (int d = 0; d < ndsts; ++d) {
              const uint8_t* got = static_cast<const uint8_t*>(k.dsts[d]);
              ASSERT_EQ(memcmp(got, ref_out[d].data(), bytes), 0)
                  << DatatypeName(dt) << " " << RedOpName(op) << " S=" << nsrcs << " D=" << ndsts
                  << " count " << count << " alignment " << static_cast<int>(al) << " grid " << grid
                  << "x" << block << (in_place ? " in place" : "") << " destination " << d;
            }
          }
          if (in_place) memcpy(srcs[0].data(), src0.data(), bytes);
        }
      }
    }
  }
}

std::vector<KernelCase> AllCases() {
  std::vector<KernelCase> cases;
  for (batonDataType_t dt : kAllTypes)
    for (batonRedOp_t op : kAllOps) cases.push_back({dt, op});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllTypesAndOps, CudaKernelEmulationTest, ::testing::ValuesIn(AllCases()),
                         [](const ::testing::TestParamInfo<KernelCase>& info) {
                           return std::string(DatatypeName(info.param.dt)) + "_" +
                                  RedOpName(info.param.op);
                         });

}  // namespace
}  // namespace baton
