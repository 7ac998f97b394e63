// Datatypes and the deterministic test data of the perf driver (DataPattern
// in perf_common.h).
#include "driver/types.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "perf_common.h"

namespace baton_perf {
namespace {

// Indexed by batonDataType_t; the order is nccl-tests' order for -d all.
constexpr std::array<TypeProps, batonNumTypes> kTypes = {{
    {"int8", 1, false, true, INT8_MAX, 6, 0},
    {"uint8", 1, false, false, UINT8_MAX, 7, 0},
    {"int32", 4, false, true, INT32_MAX, 30, 0},
    {"uint32", 4, false, false, UINT32_MAX, 31, 0},
    {"int64", 8, false, true, INT64_MAX / 2, 62, 0},
    {"uint64", 8, false, false, INT64_MAX / 2, 63, 0},
    {"half", 2, true, true, 2048, 15, 1e-3},
    {"float", 4, true, true, int64_t{1} << 24, 30, 1e-6},
    {"double", 8, true, true, int64_t{1} << 53, 60, 1e-12},
    {"bfloat16", 2, true, true, 256, 30, 1e-2},
    // fp8: integers exact up to 2^(mantissa bits + 1); the quotient of avg
    // may round by half an ulp (1/16 and 1/8 relative).
    {"f8e4m3", 1, true, true, 16, 8, 0.07},
    {"f8e5m2", 1, true, true, 8, 15, 0.13},
}};

// Indexed by batonRedOp_t, then kPreMulSum; the order is nccl-tests' order for -o all.
constexpr std::array<const char*, batonNumOps + 1> kOpNames = {"sum", "prod", "max",
                                                               "min", "avg",  "mulsum"};

// fp16 and bf16 as raw bits: the driver has no compiler support for them and needs none, since
// every value it generates or expects is a small integer or power of two.
struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};
// The OCP fp8 formats as raw bits, with their mantissa width, bias and
// largest finite code (E4M3 has no infinity; its NaN is S.1111.111).
template <int kMant, int kBias, int kMaxCode>
struct Fp8 {
  static constexpr int kMantBits = kMant;
  static constexpr int kExpBias = kBias;
  static constexpr int kMaxFinite = kMaxCode;
  uint8_t bits;
};
using F8e4m3 = Fp8<3, 7, 0x7e>;
using F8e5m2 = Fp8<2, 15, 0x7b>;
template <typename T>
inline constexpr bool kIsFp8 = std::is_same_v<T, F8e4m3> || std::is_same_v<T, F8e5m2>;

float BitsToFloat(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

uint32_t FloatToBits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return bits;
}

float HalfToFloat(Half h) {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000) << 16;
  const uint32_t exponent = (h.bits >> 10) & 0x1f;
  const uint32_t mantissa = h.bits & 0x3ff;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) return BitsToFloat(sign | 0x7f800000 | (mantissa << 13));
  return BitsToFloat(sign | ((exponent + 127 - 15) << 23) | (mantissa << 13));
}

// Round to nearest even, like the hardware conversion.
Half FloatToHalf(float f) {
  const uint32_t bits = FloatToBits(f);
  const auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  const uint32_t magnitude = bits & 0x7fffffff;
  if (magnitude > 0x7f800000) return Half{static_cast<uint16_t>(sign | 0x7e00)};   // NaN
  if (magnitude >= 0x477ff000) return Half{static_cast<uint16_t>(sign | 0x7c00)};  // >= 65520
  if (magnitude < 0x38800000) {  // below 2^-14: subnormal, in units of 2^-24
    const float units = BitsToFloat(magnitude) * 16777216.0f;
    return Half{static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(units)))};
  }
  uint32_t half = (((magnitude >> 23) - 127 + 15) << 10) | ((magnitude >> 13) & 0x3ff);
  const uint32_t rest = magnitude & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (half & 1))) ++half;  // a carry rounds up the exponent
  return Half{static_cast<uint16_t>(sign | half)};
}

float BFloat16ToFloat(BFloat16 b) {
  return BitsToFloat(static_cast<uint32_t>(b.bits) << 16);
}

BFloat16 FloatToBFloat16(float f) {
  const uint32_t bits = FloatToBits(f);
  if ((bits & 0x7fffffff) > 0x7f800000) {
    return BFloat16{static_cast<uint16_t>((bits >> 16) | 0x40)};  // keep NaNs quiet NaNs
  }
  return BFloat16{static_cast<uint16_t>((bits + 0x7fff + ((bits >> 16) & 1)) >> 16)};
}

template <typename T>
double Fp8ToDouble(T v) {
  const int em = v.bits & 0x7f;
  const int exponent = em >> T::kMantBits;
  const int mantissa = em & ((1 << T::kMantBits) - 1);
  double magnitude;
  if (em > T::kMaxFinite) {
    magnitude = (T::kMantBits == 2 && mantissa == 0) ? INFINITY : NAN;
  } else if (exponent == 0) {
    magnitude = std::ldexp(mantissa, 1 - T::kExpBias - T::kMantBits);
  } else {
    magnitude = std::ldexp(mantissa + (1 << T::kMantBits), exponent - T::kExpBias - T::kMantBits);
  }
  return (v.bits & 0x80) ? -magnitude : magnitude;
}

// Round to nearest even, saturating at the largest finite value (as the
// library documents for fp8).
template <typename T>
T DoubleToFp8(double v) {
  const uint8_t sign = std::signbit(v) ? 0x80 : 0;
  if (std::isnan(v)) return T{static_cast<uint8_t>(sign | 0x7f)};
  const double a = std::fabs(v);
  if (a >= Fp8ToDouble(T{T::kMaxFinite})) return T{static_cast<uint8_t>(sign | T::kMaxFinite)};
  int e = 0;
  std::frexp(a, &e);  // a = f * 2^e with f in [0.5, 1)
  int exponent = std::max(e - 1, 1 - T::kExpBias);
  double q = std::nearbyint(std::ldexp(a, T::kMantBits - exponent));  // ties to even
  const double top = std::ldexp(1.0, T::kMantBits + 1);
  if (q >= top) {  // rounded up into the next binade
    q /= 2;
    ++exponent;
  }
  const int code = q < top / 2 ? static_cast<int>(q)  // subnormal
                               : ((exponent + T::kExpBias) << T::kMantBits) |
                                     (static_cast<int>(q) - (1 << T::kMantBits));
  return T{static_cast<uint8_t>(sign | std::min(code, T::kMaxFinite))};
}

template <typename T>
T FromInt(int64_t v) {
  if constexpr (std::is_same_v<T, Half>) {
    return FloatToHalf(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return FloatToBFloat16(static_cast<float>(v));
  } else if constexpr (kIsFp8<T>) {
    return DoubleToFp8<T>(static_cast<double>(v));
  } else {
    return static_cast<T>(v);  // integers wrap, as the library's integer arithmetic does
  }
}

template <typename T>
T FromDouble(double v) {
  if constexpr (std::is_same_v<T, Half>) {
    return FloatToHalf(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return FloatToBFloat16(static_cast<float>(v));
  } else if constexpr (kIsFp8<T>) {
    // Through float first, as the library rounds its fp32 quotient.
    return DoubleToFp8<T>(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}

template <typename T>
double ToDouble(T v) {
  if constexpr (std::is_same_v<T, Half>) {
    return HalfToFloat(v);
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return BFloat16ToFloat(v);
  } else if constexpr (kIsFp8<T>) {
    return Fp8ToDouble(v);
  } else {
    return static_cast<double>(v);
  }
}

// Calls fn(T{}) with the C++ type stored for `type`.
template <typename Fn>
void DispatchType(batonDataType_t type, Fn&& fn) {
  switch (type) {
    case batonInt8:
      fn(int8_t{});
      break;
    case batonUint8:
      fn(uint8_t{});
      break;
    case batonInt32:
      fn(int32_t{});
      break;
    case batonUint32:
      fn(uint32_t{});
      break;
    case batonInt64:
      fn(int64_t{});
      break;
    case batonUint64:
      fn(uint64_t{});
      break;
    case batonFloat16:
      fn(Half{});
      break;
    case batonFloat32:
      fn(float{});
      break;
    case batonFloat64:
      fn(double{});
      break;
    case batonBfloat16:
      fn(BFloat16{});
      break;
    case batonFloat8e4m3:
      fn(F8e4m3{});
      break;
    case batonFloat8e5m2:
      fn(F8e5m2{});
      break;
    default:
      break;
  }
}

// splitmix64's finalizer: cheap, and consecutive inputs give unrelated outputs.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Input(rank, index) as an integer; see DataPattern. Precomputes what does not depend on index.
class ValueGenerator {
 public:
  ValueGenerator(batonDataType_t type, batonRedOp_t op, int nranks, uint64_t seed)
      : seed_(seed), prod_(op == batonProd), signed_(Props(type).is_signed) {
    // PreMulSum doubles odd ranks' inputs: half the bound keeps the scaled sum exact.
    const int64_t scale = op == kPreMulSum ? 2 : 1;
    const int64_t per_rank = Props(type).exact_limit / (scale * std::max(nranks, 1));
    // Small values keep fp16/bf16 exact; 100 is plenty of variety to catch misplaced elements.
    magnitude_ = std::clamp<int64_t>(per_rank, 1, 100);
    // fp8 cannot hold a sum of one unit per rank beyond a few ranks (e5m2:
    // 9 is not representable), so only as many ranks as stay exact
    // contribute; the others send zeros, which still catch misplaced data.
    active_ranks_ = per_rank >= 1
                        ? nranks
                        : static_cast<int>(std::max<int64_t>(1, Props(type).exact_limit / scale));
    doublings_ = std::min(Props(type).max_doublings, nranks);
  }

  uint64_t RankKey(int rank) const { return Mix(seed_ * 0x100000001b3ULL + rank); }

  int64_t Value(uint64_t rank_key, int rank, size_t index) const {
    const uint64_t h = Mix(rank_key + index);
    if (prod_) return (rank < doublings_ && (h & 1)) ? 2 : 1;
    if (rank >= active_ranks_) return 0;
    const uint64_t span = signed_ ? 2 * magnitude_ + 1 : magnitude_ + 1;
    const auto v = static_cast<int64_t>(((h >> 32) * span) >> 32);  // uniform in [0, span)
    return signed_ ? v - magnitude_ : v;
  }

 private:
  uint64_t seed_;
  bool prod_;
  bool signed_;
  int64_t magnitude_;
  int active_ranks_;
  int doublings_;
};

template <typename T>
int64_t CountWrongTyped(const T* got, const T* expected, size_t count, double tolerance) {
  int64_t wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    if constexpr (std::is_integral_v<T>) {
      wrong += got[i] != expected[i];  // through double, 64-bit values could compare equal
      continue;
    }
    const double g = ToDouble(got[i]);
    const double e = ToDouble(expected[i]);
    if (g == e) continue;  // NaN never matches
    if (tolerance > 0 && std::fabs(g - e) <= tolerance * std::max(1.0, std::fabs(e))) continue;
    ++wrong;
  }
  return wrong;
}

}  // namespace

const TypeProps& Props(batonDataType_t type) {
  return kTypes[static_cast<size_t>(type)];
}

int64_t CountWrong(const void* got, const void* expected, size_t count, batonDataType_t type,
                   batonRedOp_t op) {
  const double tolerance = op == batonAvg ? Props(type).avg_tolerance : 0.0;
  int64_t wrong = 0;
  DispatchType(type, [&](auto tag) {
    using T = decltype(tag);
    wrong = CountWrongTyped(static_cast<const T*>(got), static_cast<const T*>(expected), count,
                            tolerance);
  });
  return wrong;
}

size_t TypeSize(batonDataType_t type) {
  return type >= 0 && type < batonNumTypes ? Props(type).size : 0;
}

void* ElementAt(void* base, size_t index, batonDataType_t type) {
  return static_cast<char*>(base) + index * TypeSize(type);
}

const char* TypeName(batonDataType_t type) {
  return type >= 0 && type < batonNumTypes ? Props(type).name : "invalid";
}

const char* OpName(batonRedOp_t op) {
  return op >= 0 && op <= kPreMulSum ? kOpNames[static_cast<size_t>(op)] : "invalid";
}

void StoreInt(batonDataType_t type, int64_t value, void* out) {
  DispatchType(type, [&](auto tag) {
    using T = decltype(tag);
    *static_cast<T*>(out) = FromInt<T>(value);
  });
}

DataPattern::DataPattern(batonDataType_t type, batonRedOp_t op, int nranks, uint64_t seed)
    : type_(type), op_(op), nranks_(nranks), seed_(seed) {}

void DataPattern::FillInput(void* buf, size_t count, size_t first_index, int rank) const {
  const ValueGenerator gen(type_, op_, nranks_, seed_);
  const uint64_t key = gen.RankKey(rank);
  DispatchType(type_, [&](auto tag) {
    using T = decltype(tag);
    T* out = static_cast<T*>(buf);
    for (size_t i = 0; i < count; ++i) out[i] = FromInt<T>(gen.Value(key, rank, first_index + i));
  });
}

void DataPattern::FillReduced(void* buf, size_t count, size_t first_index) const {
  const ValueGenerator gen(type_, op_, nranks_, seed_);
  std::vector<uint64_t> keys(static_cast<size_t>(nranks_));
  for (int r = 0; r < nranks_; ++r) keys[r] = gen.RankKey(r);
  const bool is_float = Props(type_).is_float;
  DispatchType(type_, [&](auto tag) {
    using T = decltype(tag);
    T* out = static_cast<T*>(buf);
    for (size_t i = 0; i < count; ++i) {
      const size_t index = first_index + i;
      const bool premul = op_ == kPreMulSum;
      int64_t acc = gen.Value(keys[0], 0, index) * (premul ? PreMulSumScalar(0) : 1);
      // Products use unsigned arithmetic: 2^63 fits a uint64 but not an int64.
      auto prod = static_cast<uint64_t>(acc);
      for (int r = 1; r < nranks_; ++r) {
        const int64_t v = gen.Value(keys[r], r, index);
        switch (op_) {
          case batonProd:
            prod *= static_cast<uint64_t>(v);
            break;
          case batonMax:
            acc = std::max(acc, v);
            break;
          case batonMin:
            acc = std::min(acc, v);
            break;
          case kPreMulSum:
            acc += v * PreMulSumScalar(r);
            break;
          default:
            acc += v;
            break;  // sum, avg
        }
      }
      if (op_ == batonProd) {
        out[i] = is_float ? FromDouble<T>(static_cast<double>(prod))
                          : FromInt<T>(static_cast<int64_t>(prod));
      } else if (op_ == batonAvg && is_float) {
        out[i] = FromDouble<T>(static_cast<double>(acc) / nranks_);
      } else if (op_ == batonAvg) {
        out[i] = FromInt<T>(acc / nranks_);  // C integer division, as Baton documents
      } else {
        out[i] = FromInt<T>(acc);
      }
    }
  });
}

}  // namespace baton_perf
