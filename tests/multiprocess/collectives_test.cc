// End-to-end tests of batonAllReduce, batonBroadcast and batonBarrier: real
// ranks (one process each) over the shm and tcp transports, compared bitwise
// against a reference computed independently in every rank.
//
// Inputs are chosen so that every reduction order gives the same bits:
// integers wrap (a commutative ring, so any order is exact) and take full-range
// random values; floating-point inputs are small multiples of powers of two
// whose partial sums and products are exact even in bf16 (8 significant bits).
// The reference can then be a plain loop over the ranks in order, and any
// mismatch is a library bug, not rounding.
#include <baton.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <vector>

#include <gtest/gtest.h>

#include "common/mp_harness.h"

namespace {

using baton_test::Options;
using baton_test::RankContext;
using baton_test::RunRanks;
using baton_test::SecondsSince;

// ---- Half and bfloat16, written independently of the library's kernels ----

uint16_t FloatToHalf(float f) {
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

float HalfToFloat(uint16_t h) {
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

uint16_t FloatToBf16(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof(x));
  x += 0x7fffu + ((x >> 16) & 1u);  // round to nearest even; no NaNs here
  return static_cast<uint16_t>(x >> 16);
}

float Bf16ToFloat(uint16_t b) {
  const uint32_t x = static_cast<uint32_t>(b) << 16;
  float f;
  memcpy(&f, &x, sizeof(f));
  return f;
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

uint64_t Seed(std::initializer_list<uint64_t> parts) {
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

// fp16 and bf16: values combine in fp32 and every partial result is rounded
// to the type; avg divides the (exact) sum in fp32 and rounds once.
template <uint16_t (*FromF)(float), float (*ToF)(uint16_t), int kSumRange, int kSumDiv>
struct SmallFloatTraits {
  using Storage = uint16_t;
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
    os << ToF(v) << " (0x" << std::hex << v << ")";
    return os.str();
  }
};

// fp16: k/4 for |k| <= 32 (8-rank sums need 9 of its 11 significant bits).
using HalfTraits = SmallFloatTraits<FloatToHalf, HalfToFloat, 32, 4>;
// bf16: integers in [-8, 8] (8-rank sums need 7 of its 8 significant bits).
using Bf16Traits = SmallFloatTraits<FloatToBf16, Bf16ToFloat, 8, 1>;

struct TypeDesc {
  batonDataType_t type;
  const char* name;
  size_t size;
};

constexpr TypeDesc kTypes[] = {
    {batonInt8, "int8", 1},         {batonUint8, "uint8", 1},     {batonInt32, "int32", 4},
    {batonUint32, "uint32", 4},     {batonInt64, "int64", 8},     {batonUint64, "uint64", 8},
    {batonFloat16, "float16", 2},   {batonFloat32, "float32", 4}, {batonFloat64, "float64", 8},
    {batonBfloat16, "bfloat16", 2},
};

constexpr batonRedOp_t kOps[] = {batonSum, batonProd, batonMax, batonMin, batonAvg};

const char* OpName(batonRedOp_t op) {
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

void FillInput(batonDataType_t type, void* dst, size_t count, uint64_t seed, int rank,
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

void CheckAllReduceResult(RankContext& ctx, const std::string& what, batonDataType_t type,
                          batonRedOp_t op, uint64_t seed, const void* got, size_t count) {
  Dispatch(type, [&](auto tr) {
    using Tr = decltype(tr);
    CheckElements<Tr>(ctx, what, got, count,
                      [&](size_t i) { return ReferenceReduce<Tr>(op, seed, ctx.nranks(), i); });
  });
}

// Checks that buf still holds `rank`'s input (a send buffer the library must
// not write, or a broadcast result).
void CheckInput(RankContext& ctx, const std::string& what, batonDataType_t type, batonRedOp_t op,
                uint64_t seed, int rank, const void* got, size_t count) {
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

std::string Describe(const char* coll, const TypeDesc& t, const char* op, size_t count,
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

std::vector<size_t> MatrixCounts(int nranks) {
  std::vector<size_t> counts = {
      0, 1, 2, 7, static_cast<size_t>(nranks) * 37 + nranks - 1, 1001, 65537, kMediumCount};
  std::sort(counts.begin(), counts.end());
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
  return counts;
}

// Placement and stream of matrix mode m (0..3). Every mode runs for the
// smaller counts; kMediumCount (several 512 KiB pipeline chunks for the wider
// types) runs in one mode per datatype, rotating, to bound the time.
bool InPlace(int mode) {
  return (mode & 1) != 0;
}
bool OnStream(int mode) {
  return (mode & 2) != 0;
}
bool RunMode(int mode, size_t count, int type_index) {
  return count < kMediumCount || mode == type_index % 4;
}

std::vector<int> Roots(int nranks) {
  std::vector<int> roots = {0, nranks / 2, nranks - 1};
  std::sort(roots.begin(), roots.end());
  roots.erase(std::unique(roots.begin(), roots.end()), roots.end());
  return roots;
}

// Runs `case_fn(ctx, stream, t, count, in_place)` for every datatype x count
// x {in-place, out-of-place} x {NULL stream, host stream} that RunMode
// selects, until case_fn returns false (not implemented). A failing case does
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

// The five ops of one (type, count, placement): on a host stream they are
// queued back to back and synchronized once.
bool AllReduceCase(RankContext& ctx, batonStream_t stream, const TypeDesc& t, size_t count,
                   bool in_place) {
  const int rank = ctx.rank();
  const bool on_stream = stream != nullptr;
  struct Call {
    batonRedOp_t op;
    uint64_t seed;
    std::unique_ptr<GuardedBuffer> send, recv;
  };
  std::vector<Call> calls;
  for (batonRedOp_t op : kOps) {
    Call c{op,
           Seed({1, static_cast<uint64_t>(t.type), count, in_place, on_stream,
                 static_cast<uint64_t>(op)}),
           std::make_unique<GuardedBuffer>(count * t.size),
           std::make_unique<GuardedBuffer>(count * t.size)};
    FillInput(t.type, (in_place ? c.recv : c.send)->data(), count, c.seed, rank, op);
    calls.push_back(std::move(c));
  }
  for (Call& c : calls) {
    const std::string what = Describe("allreduce", t, OpName(c.op), count, in_place, on_stream);
    ctx.SetStep(what);
    const void* send = in_place ? c.recv->data() : c.send->data();
    MP_EXPECT_OK(ctx, batonAllReduce(send, c.recv->data(), count, t.type, c.op, ctx.comm(), stream))
        << " for " << what;
  }
  if (on_stream) {
    ctx.SetStep("batonStreamSynchronize after queued allreduces");
    MP_EXPECT_OK(ctx, batonStreamSynchronize(stream));
  }
  for (Call& c : calls) {
    const std::string what = Describe("allreduce", t, OpName(c.op), count, in_place, on_stream);
    CheckAllReduceResult(ctx, what, t.type, c.op, c.seed, c.recv->data(), count);
    MP_EXPECT_TRUE(ctx, c.recv->GuardsIntact()) << " recv guard overwritten in " << what;
    if (!in_place) {
      CheckInput(ctx, what + " (send buffer modified)", t.type, c.op, c.seed, rank, c.send->data(),
                 count);
      MP_EXPECT_TRUE(ctx, c.send->GuardsIntact()) << " send guard overwritten in " << what;
    }
  }
  return true;
}

// One broadcast per root of one (type, count, placement). Out of place, the
// non-roots pass a send buffer of their own that must stay untouched; in
// place, every rank passes sendbuff == recvbuff and non-roots start with
// their own (garbage) data.
bool BroadcastCase(RankContext& ctx, batonStream_t stream, const TypeDesc& t, size_t count,
                   bool in_place) {
  const int rank = ctx.rank();
  const bool on_stream = stream != nullptr;
  struct Call {
    int root;
    uint64_t seed;
    std::unique_ptr<GuardedBuffer> send, recv;
  };
  std::vector<Call> calls;
  for (int root : Roots(ctx.nranks())) {
    Call c{root,
           Seed({2, static_cast<uint64_t>(t.type), count, in_place, on_stream,
                 static_cast<uint64_t>(root)}),
           std::make_unique<GuardedBuffer>(count * t.size),
           std::make_unique<GuardedBuffer>(count * t.size)};
    FillInput(t.type, (in_place ? c.recv : c.send)->data(), count, c.seed, rank, batonMax);
    calls.push_back(std::move(c));
  }
  for (Call& c : calls) {
    const std::string what = Describe("broadcast", t, "", count, in_place, on_stream, c.root);
    ctx.SetStep(what);
    const void* send = in_place ? c.recv->data() : c.send->data();
    MP_EXPECT_OK(ctx,
                 batonBroadcast(send, c.recv->data(), count, t.type, c.root, ctx.comm(), stream))
        << " for " << what;
  }
  if (on_stream) {
    ctx.SetStep("batonStreamSynchronize after queued broadcasts");
    MP_EXPECT_OK(ctx, batonStreamSynchronize(stream));
  }
  for (Call& c : calls) {
    const std::string what = Describe("broadcast", t, "", count, in_place, on_stream, c.root);
    CheckInput(ctx, what, t.type, batonMax, c.seed, c.root, c.recv->data(), count);
    MP_EXPECT_TRUE(ctx, c.recv->GuardsIntact()) << " recv guard overwritten in " << what;
    if (!in_place) {
      CheckInput(ctx, what + " (send buffer modified)", t.type, batonMax, c.seed, rank,
                 c.send->data(), count);
      MP_EXPECT_TRUE(ctx, c.send->GuardsIntact()) << " send guard overwritten in " << what;
    }
  }
  return true;
}

void AllReduceMatrix(RankContext& ctx, batonStream_t stream) {
  ForEachCase(ctx, stream, MatrixCounts(ctx.nranks()), AllReduceCase);
}

void BroadcastMatrix(RankContext& ctx, batonStream_t stream) {
  ForEachCase(ctx, stream, MatrixCounts(ctx.nranks()), BroadcastCase);
}

// Cheap per-element pseudo-random bits for the 64 MiB buffers, where the
// Mix-based generator (times nranks for the reference) would dominate the time.
inline uint32_t CheapBits(size_t i) {
  return (static_cast<uint32_t>(i) * 0x9e3779b1u) >> 11 ^ static_cast<uint32_t>(i >> 16);
}

// Reports mismatches of got[i] != want(i) for i in [0, count) as one failure.
template <typename T, typename Want>
void CheckLarge(RankContext& ctx, const std::string& what, const T* got, size_t count, Want want) {
  size_t mismatches = 0;
  std::ostringstream details;
  for (size_t i = 0; i < count; ++i) {
    const T w = want(i);
    if (memcmp(&w, &got[i], sizeof(T)) == 0) continue;
    if (++mismatches <= 4) details << "\n  [" << i << "] got " << +got[i] << ", expected " << +w;
  }
  MP_EXPECT_EQ(ctx, mismatches, 0u)
      << " wrong elements of " << count << " in " << what << details.str();
}

// 64 MiB buffers for a few combinations: float sum out of place on the NULL
// stream, int8 max in place on a host stream, and a byte broadcast from the
// last rank. The inputs are built so the expected result has a closed form
// (O(1) per element instead of O(nranks)), and every rank contributes to it.
void LargeBuffers(RankContext& ctx, batonStream_t stream) {
  constexpr size_t kBytes = size_t{64} << 20;
  const int rank = ctx.rank();
  const int n = ctx.nranks();
  const auto spread = [&](size_t i) { return static_cast<int>((i + rank) % n); };  // 0..n-1
  {
    // v = k(i) * (spread + 1) / 4, so the sum is k(i) * n(n+1)/2 / 4, exactly.
    const size_t count = kBytes / sizeof(float);
    const auto k = [](size_t i) { return static_cast<int>(CheapBits(i) % 17) - 8; };
    GuardedBuffer send(kBytes), recv(kBytes);
    auto* in = reinterpret_cast<float*>(send.data());
    for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>(k(i) * (spread(i) + 1)) / 4;
    MP_EXPECT_OK(ctx, batonAllReduce(send.data(), recv.data(), count, batonFloat, batonSum,
                                     ctx.comm(), nullptr));
    const std::string what = Describe("allreduce", kTypes[7], "sum", count, false, false);
    CheckLarge(ctx, what, reinterpret_cast<const float*>(recv.data()), count,
               [&](size_t i) { return static_cast<float>(k(i) * n * (n + 1) / 2) / 4; });
    CheckLarge(ctx, what + " (send buffer modified)", in, count,
               [&](size_t i) { return static_cast<float>(k(i) * (spread(i) + 1)) / 4; });
    MP_EXPECT_TRUE(ctx, recv.GuardsIntact()) << " in " << what;
  }
  {
    // v = b(i) - spread with b(i) in [n - 129, 127]: the max is b(i), held by
    // a different rank for consecutive elements.
    const auto b = [&](size_t i) {
      return std::max(static_cast<int>(CheapBits(i) & 0xff) - 128, n - 129);
    };
    GuardedBuffer buf(kBytes);
    auto* v = reinterpret_cast<int8_t*>(buf.data());
    for (size_t i = 0; i < kBytes; ++i) v[i] = static_cast<int8_t>(b(i) - spread(i));
    MP_EXPECT_OK(ctx, batonAllReduce(v, v, kBytes, batonInt8, batonMax, ctx.comm(), stream));
    MP_EXPECT_OK(ctx, batonStreamSynchronize(stream));
    const std::string what = Describe("allreduce", kTypes[0], "max", kBytes, true, true);
    CheckLarge(ctx, what, v, kBytes, [&](size_t i) { return static_cast<int8_t>(b(i)); });
    MP_EXPECT_TRUE(ctx, buf.GuardsIntact()) << " in " << what;
  }
  {
    const int root = n - 1;
    const auto byte = [](size_t i, int r) { return static_cast<uint8_t>(CheapBits(i) + 31 * r); };
    GuardedBuffer buf(kBytes);
    for (size_t i = 0; i < kBytes; ++i) buf.data()[i] = byte(i, rank);
    MP_EXPECT_OK(
        ctx, batonBroadcast(buf.data(), buf.data(), kBytes, batonUint8, root, ctx.comm(), nullptr));
    const std::string what = Describe("broadcast", kTypes[1], "", kBytes, true, false, root);
    CheckLarge(ctx, what, buf.data(), kBytes, [&](size_t i) { return byte(i, root); });
    MP_EXPECT_TRUE(ctx, buf.GuardsIntact()) << " in " << what;
  }
}

int64_t MonotonicNanos() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

// No rank may leave a barrier before the last one entered it. CLOCK_MONOTONIC
// is shared by all processes of the machine, so the late rank's entry time,
// broadcast afterwards, is a direct check of that causality.
void BarrierCausality(RankContext& ctx, batonStream_t stream) {
  for (bool on_stream : {false, true}) {
    for (int late = 0; late < ctx.nranks(); ++late) {
      int64_t entered = 0;
      if (ctx.rank() == late) {
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
        entered = MonotonicNanos();
      }
      MP_EXPECT_OK(ctx, batonBarrier(ctx.comm(), on_stream ? stream : nullptr));
      if (on_stream) MP_EXPECT_OK(ctx, batonStreamSynchronize(stream));
      const int64_t left = MonotonicNanos();
      MP_EXPECT_OK(ctx,
                   batonBroadcast(&entered, &entered, 1, batonInt64, late, ctx.comm(), nullptr));
      MP_EXPECT_GE(ctx, left, entered) << " (ns) barrier returned before rank " << late
                                       << " entered it" << (on_stream ? " (host stream)" : "");
    }
  }
}

class CollectivesTest : public ::testing::TestWithParam<std::tuple<int, const char*>> {};

// One communicator per (nranks, transport) runs every combination, keeping
// the init cost (and the test time with 8 ranks on 2 cores) down.
TEST_P(CollectivesTest, AllReduceBroadcastBarrier) {
  const auto [nranks, transport] = GetParam();
  Options options;
  options.env = {{"BATON_TRANSPORT", transport}};
  options.deadline = std::chrono::seconds(300);
  RunRanks(
      nranks,
      [](RankContext& ctx) {
        HostStream stream(ctx);
        const auto time = [&](const char* name, void (*section)(RankContext&, batonStream_t)) {
          const auto start = std::chrono::steady_clock::now();
          section(ctx, stream.get());
          if (ctx.rank() == 0) {
            std::ostringstream os;
            os << name << ": " << SecondsSince(start) << " s";
            ctx.Log(os.str());
          }
        };
        time("allreduce matrix", AllReduceMatrix);
        time("broadcast matrix", BroadcastMatrix);
        time("barrier", BarrierCausality);
        const int n = ctx.nranks();
        if (n == 2 || n == 4 || n == 8) time("64 MiB buffers", LargeBuffers);
      },
      options);
}

INSTANTIATE_TEST_SUITE_P(Ranks, CollectivesTest,
                         ::testing::Combine(::testing::Range(1, 9),
                                            ::testing::Values("shm", "tcp")),
                         [](const auto& info) {
                           return std::string(std::get<1>(info.param)) + "_" +
                                  std::to_string(std::get<0>(info.param)) + "ranks";
                         });

// ---- Reduce, AllGather, ReduceScatter, AlltoAll, Send/Recv, groups ----
//
// Not part of the allreduce/broadcast work: until implemented, a call may
// return batonInvalidUsage and the section is skipped (logged). Any other
// result must be success with exactly the right data.

// Whether the call ran; batonInvalidUsage means "not implemented yet".
bool Ran(RankContext& ctx, batonResult_t r, const std::string& what) {
  if (r == batonInvalidUsage) {
    ctx.Log(what + ": batonInvalidUsage (not implemented?); section skipped");
    return false;
  }
  MP_EXPECT_EQ(ctx, r, batonSuccess)
      << " (" << baton_test::ResultName(r) << ") from " << what << ": " << ctx.LastError();
  return r == batonSuccess;
}

// Counts for these sections, smaller than the matrix's: the buffers of
// allgather, reducescatter and alltoall are nranks times larger. With 8
// ranks, 16411 8-byte elements per rank still span several 512 KiB chunks.
std::vector<size_t> SmallCounts(int nranks) {
  std::vector<size_t> counts = {0,    1,    2, 7, static_cast<size_t>(nranks) * 37 + nranks - 1,
                                1001, 16411};
  std::sort(counts.begin(), counts.end());
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
  return counts;
}

// Every byte of buf is still kUnwrittenByte (a buffer the call must ignore).
bool Untouched(const GuardedBuffer& buf) {
  for (size_t i = 0; i < buf.bytes(); ++i) {
    if (buf.data()[i] != GuardedBuffer::kUnwrittenByte) return false;
  }
  return buf.GuardsIntact();
}

// NCCL semantics: the result lands in the root's recvbuff only; on the other
// ranks recvbuff is ignored (it may be NULL) and sendbuff is const. Each op
// uses a different root.
bool ReduceCase(RankContext& ctx, batonStream_t stream, const TypeDesc& t, size_t count,
                bool in_place) {
  const int rank = ctx.rank();
  const bool on_stream = stream != nullptr;
  const std::vector<int> roots = Roots(ctx.nranks());
  struct Call {
    batonRedOp_t op;
    int root;
    uint64_t seed;
    std::unique_ptr<GuardedBuffer> send, recv;
  };
  std::vector<Call> calls;
  for (batonRedOp_t op : kOps) {
    Call c{op, roots[static_cast<size_t>(op) % roots.size()],
           Seed({4, static_cast<uint64_t>(t.type), count, in_place, on_stream,
                 static_cast<uint64_t>(op)}),
           std::make_unique<GuardedBuffer>(count * t.size),
           std::make_unique<GuardedBuffer>(count * t.size)};
    FillInput(t.type, (in_place ? c.recv : c.send)->data(), count, c.seed, rank, op);
    calls.push_back(std::move(c));
  }
  for (Call& c : calls) {
    const std::string what =
        Describe("reduce", t, OpName(c.op), count, in_place, on_stream, c.root);
    ctx.SetStep(what);
    const void* send = in_place ? c.recv->data() : c.send->data();
    if (!Ran(ctx,
             batonReduce(send, c.recv->data(), count, t.type, c.op, c.root, ctx.comm(), stream),
             what)) {
      return false;
    }
  }
  if (on_stream && !Ran(ctx, batonStreamSynchronize(stream), "batonStreamSynchronize")) {
    return false;
  }
  for (Call& c : calls) {
    const std::string what =
        Describe("reduce", t, OpName(c.op), count, in_place, on_stream, c.root);
    if (rank == c.root) {
      CheckAllReduceResult(ctx, what, t.type, c.op, c.seed, c.recv->data(), count);
    } else if (in_place) {
      CheckInput(ctx, what + " (non-root buffer modified)", t.type, c.op, c.seed, rank,
                 c.recv->data(), count);
    } else {
      MP_EXPECT_TRUE(ctx, Untouched(*c.recv)) << " non-root recvbuff written in " << what;
    }
    MP_EXPECT_TRUE(ctx, c.recv->GuardsIntact()) << " recv guard overwritten in " << what;
    if (!in_place) {
      CheckInput(ctx, what + " (send buffer modified)", t.type, c.op, c.seed, rank, c.send->data(),
                 count);
    }
  }
  return true;
}

// recv[r * count + i] = rank r's input[i]; in place, sendbuff is this rank's
// block of recvbuff.
bool AllGatherCase(RankContext& ctx, batonStream_t stream, const TypeDesc& t, size_t count,
                   bool in_place) {
  const int rank = ctx.rank(), n = ctx.nranks();
  const bool on_stream = stream != nullptr;
  const uint64_t seed = Seed({5, static_cast<uint64_t>(t.type), count, in_place, on_stream});
  const size_t block = count * t.size;
  GuardedBuffer send(block), recv(block * n);
  uint8_t* mine = in_place ? recv.data() + rank * block : send.data();
  FillInput(t.type, mine, count, seed, rank, batonMax);
  const std::string what = Describe("allgather", t, "", count, in_place, on_stream);
  ctx.SetStep(what);
  if (!Ran(ctx, batonAllGather(mine, recv.data(), count, t.type, ctx.comm(), stream), what)) {
    return false;
  }
  if (on_stream && !Ran(ctx, batonStreamSynchronize(stream), "batonStreamSynchronize")) {
    return false;
  }
  for (int r = 0; r < n; ++r) {
    CheckInput(ctx, what + " block " + std::to_string(r), t.type, batonMax, seed, r,
               recv.data() + r * block, count);
  }
  MP_EXPECT_TRUE(ctx, recv.GuardsIntact()) << " recv guard overwritten in " << what;
  if (!in_place) {
    CheckInput(ctx, what + " (send buffer modified)", t.type, batonMax, seed, rank, send.data(),
               count);
  }
  return true;
}

// recv[i] = op over ranks r of r's input[rank * count + i]; in place,
// recvbuff is this rank's block of sendbuff.
bool ReduceScatterCase(RankContext& ctx, batonStream_t stream, const TypeDesc& t, size_t count,
                       bool in_place) {
  const int rank = ctx.rank(), n = ctx.nranks();
  const bool on_stream = stream != nullptr;
  const size_t block = count * t.size;
  struct Call {
    batonRedOp_t op;
    uint64_t seed;
    std::unique_ptr<GuardedBuffer> send, recv;
  };
  std::vector<Call> calls;
  for (batonRedOp_t op : kOps) {
    Call c{op,
           Seed({6, static_cast<uint64_t>(t.type), count, in_place, on_stream,
                 static_cast<uint64_t>(op)}),
           std::make_unique<GuardedBuffer>(block * n), std::make_unique<GuardedBuffer>(block)};
    FillInput(t.type, c.send->data(), count * n, c.seed, rank, op);
    calls.push_back(std::move(c));
  }
  const auto out = [&](Call& c) {
    return in_place ? c.send->data() + rank * block : c.recv->data();
  };
  for (Call& c : calls) {
    const std::string what = Describe("reducescatter", t, OpName(c.op), count, in_place, on_stream);
    ctx.SetStep(what);
    if (!Ran(ctx,
             batonReduceScatter(c.send->data(), out(c), count, t.type, c.op, ctx.comm(), stream),
             what)) {
      return false;
    }
  }
  if (on_stream && !Ran(ctx, batonStreamSynchronize(stream), "batonStreamSynchronize")) {
    return false;
  }
  for (Call& c : calls) {
    const std::string what = Describe("reducescatter", t, OpName(c.op), count, in_place, on_stream);
    Dispatch(t.type, [&](auto tr) {
      using Tr = decltype(tr);
      CheckElements<Tr>(ctx, what, out(c), count, [&](size_t i) {
        return ReferenceReduce<Tr>(c.op, c.seed, n, rank * count + i);
      });
    });
    MP_EXPECT_TRUE(ctx, c.send->GuardsIntact()) << " send guard overwritten in " << what;
    if (!in_place) {
      MP_EXPECT_TRUE(ctx, c.recv->GuardsIntact()) << " recv guard overwritten in " << what;
      CheckInput(ctx, what + " (send buffer modified)", t.type, c.op, c.seed, rank, c.send->data(),
                 count * n);
    }
  }
  return true;
}

// count elements per peer: block j of sendbuff goes to rank j, and block i of
// recvbuff comes from rank i. Out of place only (the header defines no
// in-place form).
bool AlltoAllCase(RankContext& ctx, batonStream_t stream, const TypeDesc& t, size_t count,
                  bool in_place) {
  if (in_place) return true;
  const int rank = ctx.rank(), n = ctx.nranks();
  const bool on_stream = stream != nullptr;
  const uint64_t seed = Seed({7, static_cast<uint64_t>(t.type), count, on_stream});
  const size_t block = count * t.size;
  GuardedBuffer send(block * n), recv(block * n);
  FillInput(t.type, send.data(), count * n, seed, rank, batonMax);
  const std::string what = Describe("alltoall", t, "", count, false, on_stream);
  ctx.SetStep(what);
  if (!Ran(ctx, batonAlltoAll(send.data(), recv.data(), count, t.type, ctx.comm(), stream), what)) {
    return false;
  }
  if (on_stream && !Ran(ctx, batonStreamSynchronize(stream), "batonStreamSynchronize")) {
    return false;
  }
  for (int r = 0; r < n; ++r) {
    Dispatch(t.type, [&](auto tr) {
      using Tr = decltype(tr);
      CheckElements<Tr>(
          ctx, what + " block from rank " + std::to_string(r), recv.data() + r * block, count,
          [&](size_t i) { return Tr::Input(batonMax, Bits(seed, r, rank * count + i)); });
    });
  }
  MP_EXPECT_TRUE(ctx, recv.GuardsIntact()) << " recv guard overwritten in " << what;
  CheckInput(ctx, what + " (send buffer modified)", t.type, batonMax, seed, rank, send.data(),
             count * n);
  return true;
}

// Every rank sends two messages of different sizes to every rank (itself
// included) and receives from every rank, all in one group: any order of
// posting must complete, and messages between a pair must match in order.
bool SendRecvAllPairs(RankContext& ctx, batonStream_t stream, const TypeDesc& t, size_t count,
                      bool /*in_place*/) {
  const int rank = ctx.rank(), n = ctx.nranks();
  const bool on_stream = stream != nullptr;
  const uint64_t seed = Seed({8, static_cast<uint64_t>(t.type), count, on_stream});
  // Per pair: a first message of `first` elements, then the rest.
  const size_t first = count / 3, per_pair = count;
  GuardedBuffer send(per_pair * n * t.size), recv(per_pair * n * t.size);
  FillInput(t.type, send.data(), per_pair * n, seed, rank, batonMax);
  const std::string what = Describe("grouped send/recv all pairs", t, "", count, false, on_stream);
  ctx.SetStep(what);
  MP_EXPECT_OK(ctx, batonGroupStart());
  bool ran = true;
  // Receives posted before sends, in reverse peer order: only a group makes
  // this deadlock-free.
  for (int p = n - 1; p >= 0 && ran; --p) {
    uint8_t* dst = recv.data() + p * per_pair * t.size;
    ran = Ran(ctx, batonRecv(dst, first, t.type, p, ctx.comm(), stream), what) &&
          Ran(ctx, batonRecv(dst + first * t.size, per_pair - first, t.type, p, ctx.comm(), stream),
              what);
  }
  for (int p = 0; p < n && ran; ++p) {
    const uint8_t* src = send.data() + p * per_pair * t.size;
    ran = Ran(ctx, batonSend(src, first, t.type, p, ctx.comm(), stream), what) &&
          Ran(ctx, batonSend(src + first * t.size, per_pair - first, t.type, p, ctx.comm(), stream),
              what);
  }
  const batonResult_t end = batonGroupEnd();
  if (!ran) return false;
  if (!Ran(ctx, end, what + " batonGroupEnd")) return false;
  if (on_stream && !Ran(ctx, batonStreamSynchronize(stream), "batonStreamSynchronize")) {
    return false;
  }
  for (int p = 0; p < n; ++p) {
    Dispatch(t.type, [&](auto tr) {
      using Tr = decltype(tr);
      CheckElements<Tr>(ctx, what + " from rank " + std::to_string(p),
                        recv.data() + p * per_pair * t.size, per_pair, [&](size_t i) {
                          return Tr::Input(batonMax, Bits(seed, p, rank * per_pair + i));
                        });
    });
  }
  MP_EXPECT_TRUE(ctx, recv.GuardsIntact()) << " recv guard overwritten in " << what;
  return true;
}

// Collectives inside one group are launched together at batonGroupEnd and
// still produce their own results.
void GroupedCollectives(RankContext& ctx, batonStream_t stream) {
  const int rank = ctx.rank(), n = ctx.nranks();
  for (batonStream_t s : {static_cast<batonStream_t>(nullptr), stream}) {
    int64_t sum[5], max[3];
    float bcast[4];
    for (int i = 0; i < 5; ++i) sum[i] = rank * 10 + i;
    for (int i = 0; i < 3; ++i) max[i] = (rank + i) % n;  // a permutation of 0..n-1
    for (int i = 0; i < 4; ++i) bcast[i] = static_cast<float>(rank) + 0.25f * i;
    ctx.SetStep("grouped allreduce + broadcast + allreduce");
    MP_EXPECT_OK(ctx, batonGroupStart());
    const bool ran =
        Ran(ctx, batonAllReduce(sum, sum, 5, batonInt64, batonSum, ctx.comm(), s), "grouped sum") &&
        Ran(ctx, batonBroadcast(bcast, bcast, 4, batonFloat, n - 1, ctx.comm(), s),
            "grouped broadcast") &&
        Ran(ctx, batonAllReduce(max, max, 3, batonInt64, batonMax, ctx.comm(), s), "grouped max");
    const batonResult_t end = batonGroupEnd();
    if (!ran || !Ran(ctx, end, "batonGroupEnd")) return;
    if (s != nullptr) MP_EXPECT_OK(ctx, batonStreamSynchronize(s));
    for (int i = 0; i < 5; ++i) MP_EXPECT_EQ(ctx, sum[i], int64_t{10} * n * (n - 1) / 2 + n * i);
    for (int i = 0; i < 3; ++i) MP_EXPECT_EQ(ctx, max[i], int64_t{n - 1});
    for (int i = 0; i < 4; ++i) MP_EXPECT_EQ(ctx, bcast[i], static_cast<float>(n - 1) + 0.25f * i);
  }
}

class OtherCollectivesTest : public ::testing::TestWithParam<std::tuple<int, const char*>> {};

TEST_P(OtherCollectivesTest, ReduceAllGatherReduceScatterAlltoAllSendRecvGroups) {
  const auto [nranks, transport] = GetParam();
  Options options;
  options.env = {{"BATON_TRANSPORT", transport}};
  options.deadline = std::chrono::seconds(300);
  RunRanks(
      nranks,
      [](RankContext& ctx) {
        HostStream stream(ctx);
        const std::vector<size_t> counts = SmallCounts(ctx.nranks());
        const auto time = [&](const char* name, auto case_fn) {
          const auto start = std::chrono::steady_clock::now();
          ForEachCase(ctx, stream.get(), counts, case_fn);
          if (ctx.rank() == 0) {
            std::ostringstream os;
            os << name << ": " << SecondsSince(start) << " s";
            ctx.Log(os.str());
          }
        };
        time("reduce", ReduceCase);
        time("allgather", AllGatherCase);
        time("reducescatter", ReduceScatterCase);
        time("alltoall", AlltoAllCase);
        time("send/recv", SendRecvAllPairs);
        GroupedCollectives(ctx, stream.get());
      },
      options);
}

INSTANTIATE_TEST_SUITE_P(Ranks, OtherCollectivesTest,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 7, 8),
                                            ::testing::Values("shm", "tcp")),
                         [](const auto& info) {
                           return std::string(std::get<1>(info.param)) + "_" +
                                  std::to_string(std::get<0>(info.param)) + "ranks";
                         });

class TransportTest : public ::testing::TestWithParam<const char*> {};

// Two communicators over the same ranks (the second in reverse rank order)
// used alternately, synchronously and interleaved on one host stream: each
// must deliver its own results.
TEST_P(TransportTest, TwoCommunicatorsAlternately) {
  Options options;
  options.env = {{"BATON_TRANSPORT", GetParam()}};
  options.extra_ids = 1;
  RunRanks(
      4,
      [](RankContext& ctx) {
        const int n = ctx.nranks();
        const int rank_b = n - 1 - ctx.rank();
        batonComm_t b = nullptr;
        MP_ASSERT_OK(ctx, batonCommInitRank(&b, n, ctx.extra_id(0), rank_b));
        int got_rank = -1;
        MP_EXPECT_OK(ctx, batonCommUserRank(b, &got_rank));
        MP_EXPECT_EQ(ctx, got_rank, rank_b);
        HostStream stream(ctx);
        for (int iter = 0; iter < 10; ++iter) {
          const bool on_stream = iter % 2 == 1;
          batonStream_t s = on_stream ? stream.get() : nullptr;
          // Distinct values per comm and iteration, so a result delivered
          // to the wrong communicator cannot pass.
          int64_t sum_a[3], sum_b[3], bcast_a[2], bcast_b[2];
          for (int i = 0; i < 3; ++i) {
            sum_a[i] = (ctx.rank() + 1) * 10 + iter + i;
            sum_b[i] = (ctx.rank() + 1) * 1000 + iter + i;
          }
          for (int i = 0; i < 2; ++i) {
            bcast_a[i] = 100 * ctx.rank() + iter + i;
            bcast_b[i] = -100 * rank_b - iter - i;
          }
          const int root = iter % n;
          MP_EXPECT_OK(ctx, batonAllReduce(sum_a, sum_a, 3, batonInt64, batonSum, ctx.comm(), s));
          MP_EXPECT_OK(ctx, batonAllReduce(sum_b, sum_b, 3, batonInt64, batonSum, b, s));
          MP_EXPECT_OK(ctx, batonBroadcast(bcast_b, bcast_b, 2, batonInt64, root, b, s));
          MP_EXPECT_OK(ctx, batonBroadcast(bcast_a, bcast_a, 2, batonInt64, root, ctx.comm(), s));
          if (on_stream) MP_EXPECT_OK(ctx, batonStreamSynchronize(s));
          for (int i = 0; i < 3; ++i) {
            // sum over r of ((r + 1) * k + iter + i) = k * n(n+1)/2 + n * (iter + i)
            MP_EXPECT_EQ(ctx, sum_a[i], int64_t{10} * n * (n + 1) / 2 + n * (iter + i))
                << " iter " << iter;
            MP_EXPECT_EQ(ctx, sum_b[i], int64_t{1000} * n * (n + 1) / 2 + n * (iter + i))
                << " iter " << iter;
          }
          for (int i = 0; i < 2; ++i) {
            MP_EXPECT_EQ(ctx, bcast_a[i], 100 * root + iter + i) << " iter " << iter;
            MP_EXPECT_EQ(ctx, bcast_b[i], -100 * root - iter - i) << " iter " << iter;
          }
        }
        MP_EXPECT_OK(ctx, batonCommDestroy(b));
      },
      options);
}

INSTANTIATE_TEST_SUITE_P(Transports, TransportTest, ::testing::Values("shm", "tcp"),
                         [](const auto& info) { return std::string(info.param); });

// A communicator of one rank: every op is a copy (avg divides by 1), in place
// is a no-op, broadcast needs root 0, barrier returns.
TEST(SingleRankTest, CollectivesAreCopies) {
  RunRanks(1, [](RankContext& ctx) {
    const int32_t in[5] = {7, -3, 0, 2147483647, -2147483647 - 1};
    for (batonRedOp_t op : kOps) {
      int32_t out[5] = {};
      MP_EXPECT_OK(ctx, batonAllReduce(in, out, 5, batonInt32, op, ctx.comm(), nullptr));
      MP_EXPECT_EQ(ctx, memcmp(in, out, sizeof(in)), 0) << " op " << OpName(op);
      int32_t inout[5];
      memcpy(inout, in, sizeof(in));
      MP_EXPECT_OK(ctx, batonAllReduce(inout, inout, 5, batonInt32, op, ctx.comm(), nullptr));
      MP_EXPECT_EQ(ctx, memcmp(in, inout, sizeof(in)), 0) << " in place, op " << OpName(op);
    }
    const float f_in[3] = {1.5f, -2.25f, 1e30f};
    float f_out[3] = {};
    MP_EXPECT_OK(ctx, batonAllReduce(f_in, f_out, 3, batonFloat, batonAvg, ctx.comm(), nullptr));
    MP_EXPECT_EQ(ctx, memcmp(f_in, f_out, sizeof(f_in)), 0);
    double d[2] = {0.1, 0.2}, d_out[2] = {};
    MP_EXPECT_OK(ctx, batonBroadcast(d, d_out, 2, batonDouble, 0, ctx.comm(), nullptr));
    MP_EXPECT_EQ(ctx, memcmp(d, d_out, sizeof(d)), 0);
    MP_EXPECT_RESULT(ctx, batonBroadcast(d, d_out, 2, batonDouble, 1, ctx.comm(), nullptr),
                     batonInvalidArgument);
    MP_EXPECT_OK(ctx, batonBarrier(ctx.comm(), nullptr));
    int count = 0, rank = -1;
    MP_EXPECT_OK(ctx, batonCommCount(ctx.comm(), &count));
    MP_EXPECT_OK(ctx, batonCommUserRank(ctx.comm(), &rank));
    MP_EXPECT_EQ(ctx, count, 1);
    MP_EXPECT_EQ(ctx, rank, 0);
  });
}

// The fp16/bf16 helpers above are the reference for two datatypes; check
// them against known encodings so a bug there is not blamed on the library.
TEST(ReferenceTest, HalfAndBfloat16Conversions) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);                      // rounds up to inf
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);         // smallest subnormal
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000);         // tie to even: 0
  EXPECT_EQ(FloatToHalf(std::ldexp(3.0f, -25)), 0x0002);         // tie to even: 2
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie to even
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(3.0f, -11)), 0x3c02);
  EXPECT_EQ(FloatToHalf(1.0f / 3), 0x3555);
  EXPECT_EQ(FloatToHalf(1.0f / 7), 0x3092);
  for (uint32_t h = 0; h < 0x7c00; ++h) {  // every finite half round-trips
    ASSERT_EQ(FloatToHalf(HalfToFloat(static_cast<uint16_t>(h))), h);
    ASSERT_EQ(FloatToHalf(HalfToFloat(static_cast<uint16_t>(h | 0x8000))), h | 0x8000);
  }
  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBf16(1.0f / 3), 0x3eab);
  EXPECT_EQ(FloatToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);  // tie to even
  EXPECT_EQ(FloatToBf16(1.0f + std::ldexp(3.0f, -8)), 0x3f82);
  EXPECT_EQ(Bf16ToFloat(0xc040), -3.0f);
  // The input ranges really are exact: the worst-case 8-rank sums fit.
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(-64.0f + 1)), -63.0f);
  EXPECT_EQ(HalfToFloat(FloatToHalf(63.75f)), 63.75f);
}

}  // namespace
