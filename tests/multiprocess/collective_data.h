// The collectives tests' data: fp16/bf16/fp8 conversions written
// independently of the library's kernels, deterministic inputs per (call, rank, element),
// per-datatype traits with the reference combine step, guarded buffers, and
// the size and mode grids. Inputs are chosen so that every reduction order
// gives the same bits: integers wrap (a commutative ring, so any order is
// exact) and take full-range random values; floating-point inputs are small
// multiples of powers of two whose partial sums and products are exact even
// in bf16 (8 significant bits). The reference is then a plain loop over the
// ranks in order, and any mismatch is a library bug, not rounding.
#pragma once

#include <baton.h>
#include <string.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "common/fp8_reference.h"
#include "common/mp_harness.h"

namespace baton_test {

// ---- Half and bfloat16, written independently of the library's kernels ----

inline uint16_t FloatToHalf(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof(x));
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t exp = (x >> 23) & 0xffu;
  const uint32_t man = x & 0x7fffffu;
  if (exp == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (man != 0 ? 0x200u : 0u));
  const int e = static_cast<int>(exp) - 127 + 15;
  if (e >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  if (e <= 0) {
    // Subnormal half: value = m * 2^-24, with m = (1.man) * 2^(e - 14 + 23) / 2^23.
    if (e < -10) return sign;
    const uint32_t full = man | 0x800000u;
    const int shift = 14 - e;
    uint32_t m = full >> shift;
    const uint32_t rem = full & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (m & 1))) ++m;
    return static_cast<uint16_t>(sign | m);
  }
  uint32_t h = sign | (static_cast<uint32_t>(e) << 10) | (man >> 13);
  const uint32_t rem = man & 0x1fffu;
  // A carry out of the mantissa correctly bumps the exponent (up to inf).
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) ++h;
  return static_cast<uint16_t>(h);
}

inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  uint32_t x;
  if (exp == 0) {
    const float v = std::ldexp(static_cast<float>(man), -24);
    return sign != 0 ? -v : v;
  }
  if (exp == 31) {
    x = sign | 0x7f800000u | (man << 13);
  } else {
    x = sign | ((exp - 15 + 127) << 23) | (man << 13);
  }
  float f;
  memcpy(&f, &x, sizeof(f));
  return f;
}

inline uint16_t FloatToBf16(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof(x));
  x += 0x7fffu + ((x >> 16) & 1u);  // round to nearest even; no NaNs here
  return static_cast<uint16_t>(x >> 16);
}

inline float Bf16ToFloat(uint16_t b) {
  const uint32_t x = static_cast<uint32_t>(b) << 16;
  float f;
  memcpy(&f, &x, sizeof(f));
  return f;
}

// ---- fp8 (common/fp8_reference.h) -------------------------------------------

inline uint8_t FloatToE4m3(float f) {
  return NearestFp8(f, kE4m3Mant, kE4m3Bias);
}
inline float E4m3ToFloat(uint8_t b) {
  return static_cast<float>(Fp8Value(b, kE4m3Mant, kE4m3Bias));
}
inline uint8_t FloatToE5m2(float f) {
  return NearestFp8(f, kE5m2Mant, kE5m2Bias);
}
inline float E5m2ToFloat(uint8_t b) {
  return static_cast<float>(Fp8Value(b, kE5m2Mant, kE5m2Bias));
}

// ---- Deterministic inputs --------------------------------------------------

inline uint64_t Mix(uint64_t x) {
  x ^= x >> 31;
  x *= 0x7fb5d329728ea185ull;
  x ^= x >> 27;
  x *= 0x81dadef4bc2dd44dull;
  x ^= x >> 33;
  return x;
}

// Random bits for element i of `rank`'s input to the call identified by seed.
inline uint64_t Bits(uint64_t seed, int rank, size_t i) {
  return Mix(seed + static_cast<uint64_t>(rank) * 0xd1b54a32d192ed03ull + i);
}

inline uint64_t Seed(std::initializer_list<uint64_t> parts) {
  uint64_t s = 0x243f6a8885a308d3ull;
  for (uint64_t p : parts) s = Mix(s ^ (p + 0x9e3779b97f4a7c15ull));
  return s;
}

// Products stay powers of two within 2^-8..2^8: exact in every float type.
inline double ProdInput(uint64_t h) {
  switch (h % 10) {
    case 7:
      return 2.0;
    case 8:
      return -1.0;
    case 9:
      return 0.5;
    default:
      return 1.0;
  }
}

// Each traits type gives, for one datatype: the storage type, the input value
// for an op, the reference combine step, and the avg finishing step.
template <typename T>
struct IntTraits {
  using Storage = T;
  static Storage Input(batonRedOp_t, uint64_t h) { return static_cast<T>(h); }
  static Storage Combine(batonRedOp_t op, Storage a, Storage b) {
    // Wrapping arithmetic, done in the unsigned type as the contract says.
    using U = std::make_unsigned_t<T>;
    switch (op) {
      case batonSum:
      case batonAvg:
        return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
      case batonProd:
        return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
      case batonMax:
        return std::max(a, b);
      default:
        return std::min(a, b);
    }
  }
  static Storage Finish(batonRedOp_t op, Storage acc, int nranks) {
    // C integer division (truncation toward zero) of the wrapped sum.
    return op == batonAvg ? static_cast<T>(acc / static_cast<T>(nranks)) : acc;
  }
  static std::string Format(Storage v) { return std::to_string(+v); }
};

template <typename T>
struct FloatTraits {
  using Storage = T;
  static Storage Input(batonRedOp_t op, uint64_t h) {
    switch (op) {
      case batonSum:
      case batonAvg:  // k/4 for |k| <= 32: 8 ranks sum to at most 64 exactly
        return static_cast<T>(static_cast<int>(h % 65) - 32) / 4;
      case batonProd:
        return static_cast<T>(ProdInput(h));
      default:  // k/8 for |k| <= 255; 0 is +0 only, so max/min are unambiguous
        return static_cast<T>(static_cast<int>(h % 511) - 255) / 8;
    }
  }
  static Storage Combine(batonRedOp_t op, Storage a, Storage b) {
    switch (op) {
      case batonSum:
      case batonAvg:
        return a + b;
      case batonProd:
        return a * b;
      case batonMax:
        return std::max(a, b);
      default:
        return std::min(a, b);
    }
  }
  static Storage Finish(batonRedOp_t op, Storage acc, int nranks) {
    return op == batonAvg ? acc / static_cast<T>(nranks) : acc;
  }
  static std::string Format(Storage v) {
    std::ostringstream os;
    os.precision(17);
    os << v;
    return os.str();
  }
};

// fp16, bf16 and fp8: values combine in fp32 and every partial result is
// rounded to the type; avg divides the (exact) sum in fp32 and rounds once.
template <typename S, S (*FromF)(float), float (*ToF)(S), int kSumRange, int kSumDiv>
struct SmallFloatTraits {
  using Storage = S;
  static Storage Input(batonRedOp_t op, uint64_t h) {
    switch (op) {
      case batonSum:
      case batonAvg:
        return FromF(static_cast<float>(static_cast<int>(h % (2 * kSumRange + 1)) - kSumRange) /
                     kSumDiv);
      case batonProd:
        return FromF(static_cast<float>(ProdInput(h)));
      default:
        return FromF(static_cast<float>(static_cast<int>(h % 511) - 255) / 8);
    }
  }
  static Storage Combine(batonRedOp_t op, Storage a, Storage b) {
    const float x = ToF(a), y = ToF(b);
    switch (op) {
      case batonSum:
      case batonAvg:
        return FromF(x + y);
      case batonProd:
        return FromF(x * y);
      case batonMax:
        return x >= y ? a : b;
      default:
        return x <= y ? a : b;
    }
  }
  static Storage Finish(batonRedOp_t op, Storage acc, int nranks) {
    return op == batonAvg ? FromF(ToF(acc) / static_cast<float>(nranks)) : acc;
  }
  static std::string Format(Storage v) {
    std::ostringstream os;
    os << ToF(v) << " (0x" << std::hex << +v << ")";
    return os.str();
  }
};

// fp16: k/4 for |k| <= 32 (8-rank sums need 9 of its 11 significant bits).
using HalfTraits = SmallFloatTraits<uint16_t, FloatToHalf, HalfToFloat, 32, 4>;
// bf16: integers in [-8, 8] (8-rank sums need 7 of its 8 significant bits).
using Bf16Traits = SmallFloatTraits<uint16_t, FloatToBf16, Bf16ToFloat, 8, 1>;
// E4M3: integers in [-2, 2] (8-rank sums reach 16, the last of its exact
// integers); E5M2: [-1, 1] (8). Products are powers of two in 2^-8..2^8,
// max/min take k/8 rounded to the type.
using E4m3Traits = SmallFloatTraits<uint8_t, FloatToE4m3, E4m3ToFloat, 2, 1>;
using E5m2Traits = SmallFloatTraits<uint8_t, FloatToE5m2, E5m2ToFloat, 1, 1>;

struct TypeDesc {
  batonDataType_t type;
  const char* name;
  size_t size;
};

constexpr TypeDesc kTypes[] = {
    {batonInt8, "int8", 1},         {batonUint8, "uint8", 1},       {batonInt32, "int32", 4},
    {batonUint32, "uint32", 4},     {batonInt64, "int64", 8},       {batonUint64, "uint64", 8},
    {batonFloat16, "float16", 2},   {batonFloat32, "float32", 4},   {batonFloat64, "float64", 8},
    {batonBfloat16, "bfloat16", 2}, {batonFloat8e4m3, "f8e4m3", 1}, {batonFloat8e5m2, "f8e5m2", 1},
};

constexpr batonRedOp_t kOps[] = {batonSum, batonProd, batonMax, batonMin, batonAvg};

inline const char* OpName(batonRedOp_t op) {
  static const char* const kNames[] = {"sum", "prod", "max", "min", "avg"};
  return kNames[op];
}

// Calls f with a default-constructed traits object for the datatype.
template <typename F>
void Dispatch(batonDataType_t type, F&& f) {
  switch (type) {
    case batonInt8:
      return f(IntTraits<int8_t>{});
    case batonUint8:
      return f(IntTraits<uint8_t>{});
    case batonInt32:
      return f(IntTraits<int32_t>{});
    case batonUint32:
      return f(IntTraits<uint32_t>{});
    case batonInt64:
      return f(IntTraits<int64_t>{});
    case batonUint64:
      return f(IntTraits<uint64_t>{});
    case batonFloat16:
      return f(HalfTraits{});
    case batonFloat32:
      return f(FloatTraits<float>{});
    case batonFloat64:
      return f(FloatTraits<double>{});
    case batonBfloat16:
      return f(Bf16Traits{});
    case batonFloat8e4m3:
      return f(E4m3Traits{});
    case batonFloat8e5m2:
      return f(E5m2Traits{});
    default:
      std::abort();
  }
}

// One call's buffer with guard bytes on both sides; the library must write
// exactly [0, count) of it. The 40-byte front guard also leaves data() only
// 8-byte aligned, which catches kernels that assume 16/32/64-byte alignment.
class GuardedBuffer {
 public:
  static constexpr size_t kGuard = 40;
  static constexpr uint8_t kGuardByte = 0xa5;
  static constexpr uint8_t kUnwrittenByte = 0x5a;

  explicit GuardedBuffer(size_t bytes) : bytes_(bytes), storage_(bytes + 2 * kGuard, kGuardByte) {
    memset(data(), kUnwrittenByte, bytes_);
  }
  uint8_t* data() { return storage_.data() + kGuard; }
  const uint8_t* data() const { return storage_.data() + kGuard; }
  size_t bytes() const { return bytes_; }
  bool GuardsIntact() const {
    for (size_t i = 0; i < kGuard; ++i) {
      if (storage_[i] != kGuardByte || storage_[kGuard + bytes_ + i] != kGuardByte) return false;
    }
    return true;
  }

 private:
  size_t bytes_;
  std::vector<uint8_t> storage_;
};

template <typename Tr>
void FillInput(void* dst, size_t count, uint64_t seed, int rank, batonRedOp_t op) {
  auto* p = static_cast<typename Tr::Storage*>(dst);
  for (size_t i = 0; i < count; ++i) p[i] = Tr::Input(op, Bits(seed, rank, i));
}

inline void FillInput(batonDataType_t type, void* dst, size_t count, uint64_t seed, int rank,
                      batonRedOp_t op) {
  Dispatch(type, [&](auto tr) { FillInput<decltype(tr)>(dst, count, seed, rank, op); });
}

// Compares got[0, count) with expected(i); reports the first few mismatches
// and the total as one failure.
template <typename Tr, typename Expected>
void CheckElements(RankContext& ctx, const std::string& what, const void* got, size_t count,
                   Expected expected) {
  using S = typename Tr::Storage;
  const auto* g = static_cast<const S*>(got);
  size_t mismatches = 0;
  std::ostringstream details;
  for (size_t i = 0; i < count; ++i) {
    const S want = expected(i);
    if (memcmp(&want, &g[i], sizeof(S)) == 0) continue;
    if (++mismatches <= 4) {
      details << "\n  [" << i << "] got " << Tr::Format(g[i]) << ", expected " << Tr::Format(want);
    }
  }
  MP_EXPECT_EQ(ctx, mismatches, 0u)
      << " wrong elements of " << count << " in " << what << details.str();
}

// The reference allreduce of element i: a plain loop over the ranks.
template <typename Tr>
typename Tr::Storage ReferenceReduce(batonRedOp_t op, uint64_t seed, int nranks, size_t i) {
  typename Tr::Storage acc = Tr::Input(op, Bits(seed, 0, i));
  for (int r = 1; r < nranks; ++r) acc = Tr::Combine(op, acc, Tr::Input(op, Bits(seed, r, i)));
  return Tr::Finish(op, acc, nranks);
}

inline void CheckAllReduceResult(RankContext& ctx, const std::string& what, batonDataType_t type,
                                 batonRedOp_t op, uint64_t seed, const void* got, size_t count) {
  Dispatch(type, [&](auto tr) {
    using Tr = decltype(tr);
    CheckElements<Tr>(ctx, what, got, count,
                      [&](size_t i) { return ReferenceReduce<Tr>(op, seed, ctx.nranks(), i); });
  });
}

// Checks that buf still holds `rank`'s input (a send buffer the library must
// not write, or a broadcast result).
inline void CheckInput(RankContext& ctx, const std::string& what, batonDataType_t type,
                       batonRedOp_t op, uint64_t seed, int rank, const void* got, size_t count) {
  Dispatch(type, [&](auto tr) {
    using Tr = decltype(tr);
    CheckElements<Tr>(ctx, what, got, count,
                      [&](size_t i) { return Tr::Input(op, Bits(seed, rank, i)); });
  });
}

// A host stream owned by one rank; destroyed (and checked) at scope exit.
class HostStream {
 public:
  explicit HostStream(RankContext& ctx) : ctx_(ctx) {
    MP_ASSERT_OK(ctx_, batonStreamCreate(&stream_));
    MP_ASSERT_TRUE(ctx_, stream_ != nullptr);
  }
  HostStream(const HostStream&) = delete;
  HostStream& operator=(const HostStream&) = delete;
  ~HostStream() { MP_EXPECT_OK(ctx_, batonStreamDestroy(stream_)); }
  batonStream_t get() const { return stream_; }

 private:
  RankContext& ctx_;
  batonStream_t stream_ = nullptr;
};

inline std::string Describe(const char* coll, const TypeDesc& t, const char* op, size_t count,
                            bool in_place, bool on_stream, int root = -1) {
  std::ostringstream os;
  os << coll << " " << t.name << " " << op << " count=" << count
     << (in_place ? " in-place" : " out-of-place") << (on_stream ? " host-stream" : " null-stream");
  if (root >= 0) os << " root=" << root;
  return os.str();
}

// Sizes for the datatype x op matrix: empty, tiny, odd, not divisible by
// nranks, a little over 512 KiB for 8-byte types, and kMediumCount.
constexpr size_t kMediumCount = 393219;  // odd; 3 MiB of 8-byte elements

inline std::vector<size_t> MatrixCounts(int nranks) {
  std::vector<size_t> counts = {
      0, 1, 2, 7, static_cast<size_t>(nranks) * 37 + nranks - 1, 1001, 65537, kMediumCount};
  std::sort(counts.begin(), counts.end());
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
  return counts;
}

// Placement and stream of matrix mode m (0..3). Every mode runs for the
// smaller counts; kMediumCount (several 512 KiB pipeline chunks for the wider
// types) runs in one mode per datatype, rotating, to bound the time.
inline bool InPlace(int mode) {
  return (mode & 1) != 0;
}
inline bool OnStream(int mode) {
  return (mode & 2) != 0;
}
inline bool RunMode(int mode, size_t count, int type_index) {
  // fp8 skips it: for 1-byte types it is still a single pipeline chunk, and
  // uint8/int8 already move those bytes; the fp8 arithmetic is the kernels
  // tests' job. This keeps the two types from adding a fifth to the time.
  const bool fp8 =
      kTypes[type_index].type == batonFloat8e4m3 || kTypes[type_index].type == batonFloat8e5m2;
  if (count >= kMediumCount && fp8) return false;
  return count < kMediumCount || mode == type_index % 4;
}

inline std::vector<int> Roots(int nranks) {
  std::vector<int> roots = {0, nranks / 2, nranks - 1};
  std::sort(roots.begin(), roots.end());
  roots.erase(std::unique(roots.begin(), roots.end()), roots.end());
  return roots;
}

// Runs `case_fn(ctx, stream, t, count, in_place)` for every datatype x count
// x {in-place, out-of-place} x {NULL stream, host stream} that RunMode
// selects, until case_fn returns false. A failing case does
// not stop the loop: the ranks must keep making the same calls, or the ones
// that stopped would leave the others blocked (the harness caps the number
// of failures reported per rank).
template <typename CaseFn>
void ForEachCase(RankContext& ctx, batonStream_t stream, const std::vector<size_t>& counts,
                 CaseFn case_fn) {
  for (int type_index = 0; type_index < batonNumTypes; ++type_index) {
    for (size_t count : counts) {
      for (int mode = 0; mode < 4; ++mode) {
        if (!RunMode(mode, count, type_index)) continue;
        const bool go_on = case_fn(ctx, OnStream(mode) ? stream : nullptr, kTypes[type_index],
                                   count, InPlace(mode));
        if (!go_on) return;
      }
    }
  }
}

// Runs section() and, on rank 0, logs how long it took.
template <typename Section>
void Timed(RankContext& ctx, const char* name, Section section) {
  const auto start = std::chrono::steady_clock::now();
  section();
  if (ctx.rank() == 0) {
    std::ostringstream os;
    os << name << ": " << SecondsSince(start) << " s";
    ctx.Log(os.str());
  }
}

}  // namespace baton_test
