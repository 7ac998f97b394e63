// Driver shared by the Baton perf binaries; see perf_common.h.
//
// Output, flags and measurement follow NVIDIA nccl-tests (src/common.cu, src/util.cu, version
// 2.18) so that tables from NCCL and Baton runs can be compared line by line and parsed by the
// same scripts. The differences are deliberate: the "# Using devices" lines describe host ranks,
// -A/-S are Baton flags (-S is --report_timestamps in nccl-tests), -J writes JSON lines, GPU only
// flags (-G, -R, -x, -D, -V, -M) are absent or ignored, and the driver's own barriers and
// bookkeeping go through Baton (batonBarrier, batonSend/batonRecv) where nccl-tests uses MPI.
//
// SPDX-License-Identifier: BSD-3-Clause
#include "perf_common.h"

#include <getopt.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <source_location>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace baton_perf {
namespace {

// The nccl-tests output format this driver reproduces, printed in the first line.
constexpr char kNcclTestsFormatVersion[] = "2.18.0";

// ---- Datatypes ---------------------------------------------------------------------------------

struct TypeProps {
  const char* name;  // nccl-tests name, also accepted by -d
  size_t size;
  bool is_float;
  bool is_signed;
  // Largest magnitude up to which every integer is exact and fits: a sum over all ranks must stay
  // within it for the reduction to be exact in any order.
  int64_t exact_limit;
  // Most factors of 2 a product may contain without overflowing the type.
  int max_doublings;
  // Relative error allowed for avg, whose final division rounds (floating types only).
  double avg_tolerance;
};

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
}};

// Indexed by batonRedOp_t; the order is nccl-tests' order for -o all (without its mulsum).
constexpr std::array<const char*, batonNumOps> kOpNames = {"sum", "prod", "max", "min", "avg"};

const TypeProps& Props(batonDataType_t type) {
  return kTypes[static_cast<size_t>(type)];
}

// fp16 and bf16 as raw bits: the driver has no compiler support for them and needs none, since
// every value it generates or expects is a small integer or power of two.
struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

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
T FromInt(int64_t v) {
  if constexpr (std::is_same_v<T, Half>) {
    return FloatToHalf(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return FloatToBFloat16(static_cast<float>(v));
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
    const int64_t per_rank = Props(type).exact_limit / std::max(nranks, 1);
    // Small values keep fp16/bf16 exact; 100 is plenty of variety to catch misplaced elements.
    magnitude_ = std::clamp<int64_t>(per_rank, 1, 100);
    doublings_ = std::min(Props(type).max_doublings, nranks);
  }

  uint64_t RankKey(int rank) const { return Mix(seed_ * 0x100000001b3ULL + rank); }

  int64_t Value(uint64_t rank_key, int rank, size_t index) const {
    const uint64_t h = Mix(rank_key + index);
    if (prod_) return (rank < doublings_ && (h & 1)) ? 2 : 1;
    const uint64_t span = signed_ ? 2 * magnitude_ + 1 : magnitude_ + 1;
    const auto v = static_cast<int64_t>(((h >> 32) * span) >> 32);  // uniform in [0, span)
    return signed_ ? v - magnitude_ : v;
  }

 private:
  uint64_t seed_;
  bool prod_;
  bool signed_;
  int64_t magnitude_;
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

// ---- Formatting --------------------------------------------------------------------------------

// nccl-tests' getFloatStr: as many decimals as fit in `width` columns, then an exponent.
std::string FormatColumn(double value, int width) {
  char buf[64];
  if (!std::isfinite(value)) {
    std::snprintf(buf, sizeof(buf), "%*.2f", width, value);
    return buf;
  }
  int digits = 0;  // digits before the decimal point
  for (double power = 1; value >= power && digits < 400; power *= 10) ++digits;
  if (digits < width - 2) {
    std::snprintf(buf, sizeof(buf), "%*.2f", width, value);
  } else if (digits < width - 1) {
    std::snprintf(buf, sizeof(buf), "%*.1f", width, value);
  } else if (digits < width + 1) {
    std::snprintf(buf, sizeof(buf), "%*.0f", width, value);
  } else if (width >= 7) {
    std::snprintf(buf, sizeof(buf), "%*.1e", width, value);
  } else {
    std::snprintf(buf, sizeof(buf), "%*.0e", width, value);
  }
  return buf;
}

std::string JsonNumber(double value) {
  if (std::isnan(value)) return "\"nan\"";
  if (std::isinf(value)) return value > 0 ? "\"inf\"" : "\"-inf\"";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%f", value);
  return buf;
}

std::string JsonString(const char* s) {
  std::string out = "\"";
  for (; *s; ++s) {
    const auto c = static_cast<unsigned char>(*s);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

// Host name up to the first dot, as nccl-tests prints it.
std::string ShortHostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "unknown";
  char* dot = std::strchr(name, '.');
  if (dot) *dot = '\0';
  return name;
}

// ---- Options -----------------------------------------------------------------------------------

struct Options {
  int nthreads = 1;
  int ngpus = 1;
  size_t min_bytes = 32 << 20;
  size_t max_bytes = 32 << 20;
  size_t step_bytes = 1 << 20;
  size_t step_factor = 1;
  int iters = 20;
  int agg_iters = 1;
  int warmup_iters = 1;
  int run_cycles = 1;  // 0: run forever
  int datacheck = 1;   // check iterations per measurement
  int op = batonSum;   // -1: all
  int type = batonFloat;
  int root = 0;  // -1: all
  int blocking = 0;
  bool stream_null = false;
  int report_cputime = 0;
  int average = 1;  // 0: rank 0, 1: avg, 2: min, 3: max of the ranks' times
  std::string algo;
  std::string json_path;
};

// nccl-tests' parsesize: a number with an optional K/M/G (binary) suffix; -1 when invalid.
double ParseSize(const char* value) {
  double size = 0;
  char unit[2] = {};
  const int fields = std::sscanf(value, "%lf %1s", &size, unit);
  if (fields == 1) return size;
  if (fields != 2) return -1.0;
  switch (unit[0]) {
    case 'G':
    case 'g':
      return size * (1 << 30);
    case 'M':
    case 'm':
      return size * (1 << 20);
    case 'K':
    case 'k':
      return size * (1 << 10);
    default:
      return -1.0;
  }
}

int ParseType(const char* name) {
  for (int t = 0; t < batonNumTypes; ++t) {
    if (std::strcmp(name, kTypes[t].name) == 0) return t;
  }
  if (std::strcmp(name, "all") == 0) return -1;
  std::printf("invalid type %s, defaulting to %s .. \n", name, kTypes[batonFloat].name);
  return batonFloat;
}

int ParseOp(const char* name) {
  for (int o = 0; o < batonNumOps; ++o) {
    if (std::strcmp(name, kOpNames[o]) == 0) return o;
  }
  if (std::strcmp(name, "all") == 0) return -1;
  std::printf("invalid op %s, defaulting to %s .. \n", name, kOpNames[batonSum]);
  return batonSum;
}

int ParseInt(const char* s) {
  return static_cast<int>(std::strtol(s, nullptr, 0));
}

void PrintUsage(const char* program) {
  std::printf(
      "USAGE: %s \n\t"
      "[-t,--nthreads <num threads> (Baton: 1)] \n\t"
      "[-g,--ngpus <gpus per thread> (Baton: 1)] \n\t"
      "[-b,--minbytes <min size in bytes>] \n\t"
      "[-e,--maxbytes <max size in bytes>] \n\t"
      "[-i,--stepbytes <increment size>] \n\t"
      "[-f,--stepfactor <increment factor>] \n\t"
      "[-n,--iters <iteration count>] \n\t"
      "[-m,--agg_iters <aggregated iteration count>] \n\t"
      "[-w,--warmup_iters <warmup iteration count>] \n\t"
      "[-N,--run_cycles <cycle count> run & print each cycle (default: 1; 0=infinite)] \n\t"
      "[-p,--parallel_init <0/1> (ignored)] \n\t"
      "[-c,--check <check iteration count>] \n\t"
      "[-o,--op <sum/prod/min/max/avg/all>] \n\t"
      "[-d,--datatype <int8/uint8/int32/uint32/int64/uint64/half/float/double/bfloat16/all>] "
      "\n\t"
      "[-r,--root <root/all>] \n\t"
      "[-z,--blocking <0/1>] \n\t"
      "[-y,--stream_null <0/1>] \n\t"
      "[-T,--timeout <time in seconds> (ignored)] \n\t"
      "[-C,--report_cputime <0/1>] \n\t"
      "[-J,--output_file <file> write one JSON object per result line to file] \n\t"
      "[-a,--average <0/1/2/3> report average iteration time <0=RANK0/1=AVG/2=MIN/3=MAX>] \n\t"
      "[-A,--algo <algorithm> set BATON_ALGO before creating the communicator] \n\t"
      "[-S,--stream <stream/null> run on a host stream (default) or on the NULL stream] \n\t"
      "[-h,--help]\n",
      program);
}

// Returns -1 to go on, or the exit status to end with (help, bad arguments).
int ParseOptions(int argc, char** argv, const char* program, Options* opt) {
  static const option kLongOptions[] = {
      {"nthreads", required_argument, nullptr, 't'},
      {"ngpus", required_argument, nullptr, 'g'},
      {"minbytes", required_argument, nullptr, 'b'},
      {"maxbytes", required_argument, nullptr, 'e'},
      {"stepbytes", required_argument, nullptr, 'i'},
      {"stepfactor", required_argument, nullptr, 'f'},
      {"iters", required_argument, nullptr, 'n'},
      {"agg_iters", required_argument, nullptr, 'm'},
      {"warmup_iters", required_argument, nullptr, 'w'},
      {"run_cycles", required_argument, nullptr, 'N'},
      {"parallel_init", required_argument, nullptr, 'p'},
      {"check", required_argument, nullptr, 'c'},
      {"op", required_argument, nullptr, 'o'},
      {"datatype", required_argument, nullptr, 'd'},
      {"root", required_argument, nullptr, 'r'},
      {"blocking", required_argument, nullptr, 'z'},
      {"stream_null", required_argument, nullptr, 'y'},
      {"timeout", required_argument, nullptr, 'T'},
      {"cudagraph", required_argument, nullptr, 'G'},
      {"report_cputime", required_argument, nullptr, 'C'},
      {"output_file", required_argument, nullptr, 'J'},
      {"average", required_argument, nullptr, 'a'},
      {"algo", required_argument, nullptr, 'A'},
      {"stream", required_argument, nullptr, 'S'},
      {"help", no_argument, nullptr, 'h'},
      {nullptr, 0, nullptr, 0},
  };
  double parsed;
  for (;;) {
    const int c = getopt_long(
        argc, argv, "t:g:b:e:i:f:n:m:w:N:p:c:o:d:r:z:y:T:hG:C:a:J:A:S:", kLongOptions, nullptr);
    if (c == -1) break;
    switch (c) {
      case 't':
        opt->nthreads = ParseInt(optarg);
        break;
      case 'g':
        opt->ngpus = ParseInt(optarg);
        break;
      case 'b':
        if ((parsed = ParseSize(optarg)) < 0) {
          std::fprintf(stderr, "invalid size specified for 'minbytes'\n");
          return EXIT_FAILURE;
        }
        opt->min_bytes = static_cast<size_t>(parsed);
        break;
      case 'e':
        if ((parsed = ParseSize(optarg)) < 0) {
          std::fprintf(stderr, "invalid size specified for 'maxbytes'\n");
          return EXIT_FAILURE;
        }
        opt->max_bytes = static_cast<size_t>(parsed);
        break;
      case 'i':
        if ((parsed = ParseSize(optarg)) < 0) {
          std::fprintf(stderr, "invalid size specified for 'stepBytes'\n");
          return EXIT_FAILURE;
        }
        opt->step_bytes = static_cast<size_t>(parsed);
        break;
      case 'f':
        opt->step_factor = std::strtoul(optarg, nullptr, 0);
        break;
      case 'n':
        opt->iters = ParseInt(optarg);
        break;
      case 'm':
        opt->agg_iters = ParseInt(optarg);
        break;
      case 'w':
        opt->warmup_iters = ParseInt(optarg);
        break;
      case 'N':
        opt->run_cycles = ParseInt(optarg);
        break;
      case 'p':
        break;  // one thread per rank: there is nothing to initialise in parallel
      case 'c':
        opt->datacheck = ParseInt(optarg);
        break;
      case 'o':
        opt->op = ParseOp(optarg);
        break;
      case 'd':
        opt->type = ParseType(optarg);
        break;
      case 'r':
        opt->root = std::strcmp(optarg, "all") == 0 ? -1 : ParseInt(optarg);
        break;
      case 'z':
        opt->blocking = ParseInt(optarg);
        break;
      case 'y':
        opt->stream_null = ParseInt(optarg) != 0;
        break;
      case 'T':
        break;  // Baton has BATON_TIMEOUT for hung peers
      case 'G':
        if (ParseInt(optarg) != 0) std::printf("Option -G (CUDA graph) not supported. Ignoring\n");
        break;
      case 'C':
        opt->report_cputime = ParseInt(optarg);
        break;
      case 'J':
        opt->json_path = optarg;
        break;
      case 'a':
        opt->average = ParseInt(optarg);
        break;
      case 'A':
        opt->algo = optarg;
        break;
      case 'S':
        if (std::strcmp(optarg, "stream") == 0) {
          opt->stream_null = false;
        } else if (std::strcmp(optarg, "null") == 0) {
          opt->stream_null = true;
        } else {
          std::fprintf(stderr, "invalid stream '%s': expected 'stream' or 'null'\n", optarg);
          return EXIT_FAILURE;
        }
        break;
      case 'h':
      default:
        if (c != 'h') std::printf("invalid option '%c'\n", c);
        PrintUsage(program);
        return c == 'h' ? EXIT_SUCCESS : EXIT_FAILURE;
    }
  }
  // Every Baton rank is its own process with one communicator: threads and GPUs per process do
  // not exist here, and silently ignoring them would print a table that does not measure them.
  if (opt->nthreads != 1 || opt->ngpus != 1) {
    std::fprintf(stderr,
                 "%s: -t %d -g %d: only one thread and one rank per process are supported "
                 "(use -t 1 -g 1 and start more ranks with batonrun, mpirun or srun)\n",
                 program, opt->nthreads, opt->ngpus);
    return EXIT_FAILURE;
  }
  if (opt->min_bytes > opt->max_bytes) {
    std::fprintf(stderr, "invalid sizes for 'minbytes' and 'maxbytes': %llu > %llu\n",
                 static_cast<unsigned long long>(opt->min_bytes),
                 static_cast<unsigned long long>(opt->max_bytes));
    return EXIT_FAILURE;
  }
  if (opt->average < 0 || opt->average > 3) {
    std::fprintf(stderr, "invalid average mode %d: expected 0, 1, 2 or 3\n", opt->average);
    return EXIT_FAILURE;
  }
  if (opt->iters < 1 || opt->agg_iters < 1 || opt->warmup_iters < 0 || opt->datacheck < 0) {
    std::fprintf(stderr, "invalid iteration counts: -n and -m must be >= 1, -w and -c >= 0\n");
    return EXIT_FAILURE;
  }
  return -1;
}

// ---- Resources ---------------------------------------------------------------------------------

struct CommDestroyer {
  void operator()(batonComm* comm) const { batonCommDestroy(comm); }
};
using CommPtr = std::unique_ptr<batonComm, CommDestroyer>;

struct StreamDestroyer {
  void operator()(batonStream* stream) const { batonStreamDestroy(stream); }
};
using StreamPtr = std::unique_ptr<batonStream, StreamDestroyer>;

struct FreeDeleter {
  void operator()(std::byte* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<std::byte[], FreeDeleter>;

// Page-aligned like device allocations, and touched once so that page faults do not land in the
// first timed iterations.
Buffer AllocateBuffer(size_t bytes) {
  constexpr size_t kAlignment = 4096;
  const size_t size = (std::max<size_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
  Buffer buffer(static_cast<std::byte*>(std::aligned_alloc(kAlignment, size)));
  if (buffer) std::memset(buffer.get(), 0, size);
  return buffer;
}

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

// What each rank contributes to the "# Using devices" lines.
struct RankRecord {
  int32_t pid;
  char host[252];
};
static_assert(sizeof(RankRecord) == 256);

// ---- The Baton backend -------------------------------------------------------------------------

// Baton itself: a communicator from batonCommInitFromEnv, calls queued on a host stream.
class BatonBackend : public Backend {
 public:
  std::string Description() const override {
    int version = 0;
    batonGetVersion(&version);
    char buf[96];
    std::snprintf(buf, sizeof(buf), "baton %d.%d.%d) nccl-headers=%d nccl-library=%d",
                  version / 10000, version / 100 % 100, version % 100, BATON_VERSION_CODE, version);
    return buf;
  }

  batonResult_t Init(const std::string& algo, bool use_stream) override {
    if (!algo.empty()) setenv("BATON_ALGO", algo.c_str(), 1);
    batonComm_t comm = nullptr;
    const batonResult_t init = batonCommInitFromEnv(&comm);
    if (init != batonSuccess) return init;
    comm_.reset(comm);
    if (batonResult_t r = batonCommUserRank(comm, &rank_); r != batonSuccess) return r;
    if (batonResult_t r = batonCommCount(comm, &nranks_); r != batonSuccess) return r;
    if (use_stream) {
      batonStream_t stream = nullptr;
      if (batonResult_t r = batonStreamCreate(&stream); r != batonSuccess) return r;
      stream_.reset(stream);
    }
    return batonSuccess;
  }

  int Rank() const override { return rank_; }
  int Size() const override { return nranks_; }
  std::string ErrorDetail() const override { return batonGetLastError(comm_.get()); }
  std::string FinalError() const override { return batonGetLastError(nullptr); }
  void Abort() override {
    if (comm_) batonCommAbort(comm_.release());
  }

  batonResult_t Finalize() override {
    if (stream_) {
      if (batonResult_t r = batonStreamDestroy(stream_.release()); r != batonSuccess) return r;
    }
    return comm_ ? batonCommDestroy(comm_.release()) : batonSuccess;
  }

  batonResult_t Barrier() override { return batonBarrier(comm_.get(), nullptr); }
  batonResult_t GatherToRank0(const void* mine, size_t bytes, void* all) override;
  batonResult_t BroadcastFromRank0(void* buf, size_t bytes) override;

  batonResult_t GroupStart() override { return batonGroupStart(); }
  batonResult_t GroupEnd() override { return batonGroupEnd(); }
  batonResult_t Synchronize() override {
    return stream_ ? batonStreamSynchronize(stream_.get()) : batonSuccess;
  }
  batonComm_t comm() const override { return comm_.get(); }
  batonStream_t stream() const override { return stream_.get(); }

 private:
  CommPtr comm_;
  StreamPtr stream_;  // after comm_: destroyed first, as its queued calls use the communicator
  int rank_ = 0;
  int nranks_ = 1;
};

// The driver's bookkeeping uses batonBarrier and point-to-point calls only, never
// batonAllReduce or batonAllGather: -A (BATON_ALGO) restricts the algorithms of collectives and
// may leave none for the ones the driver would use (-A pairwise), while the driver's own
// bookkeeping must work whatever is measured, as nccl-tests' MPI calls do whatever NCCL_ALGO says.
// One group, so that rank 0 drains all its peers at once whatever order their messages come in.
batonResult_t BatonBackend::GatherToRank0(const void* mine, size_t bytes, void* all) {
  if (rank_ == 0) std::memcpy(all, mine, bytes);
  if (nranks_ == 1) return batonSuccess;
  if (batonResult_t r = batonGroupStart(); r != batonSuccess) return r;
  batonResult_t result = batonSuccess;
  if (rank_ == 0) {
    for (int r = 1; r < nranks_ && result == batonSuccess; ++r) {
      result = batonRecv(static_cast<std::byte*>(all) + r * bytes, bytes, batonUint8, r,
                         comm_.get(), nullptr);
    }
  } else {
    result = batonSend(mine, bytes, batonUint8, 0, comm_.get(), nullptr);
  }
  const batonResult_t end = batonGroupEnd();
  return result != batonSuccess ? result : end;
}

batonResult_t BatonBackend::BroadcastFromRank0(void* buf, size_t bytes) {
  if (nranks_ == 1) return batonSuccess;
  if (batonResult_t r = batonGroupStart(); r != batonSuccess) return r;
  batonResult_t result = batonSuccess;
  if (rank_ == 0) {
    for (int r = 1; r < nranks_ && result == batonSuccess; ++r) {
      result = batonSend(buf, bytes, batonUint8, r, comm_.get(), nullptr);
    }
  } else {
    result = batonRecv(buf, bytes, batonUint8, 0, comm_.get(), nullptr);
  }
  const batonResult_t end = batonGroupEnd();
  return result != batonSuccess ? result : end;
}

// ---- The run -----------------------------------------------------------------------------------

class Runner {
 public:
  Runner(const Options& opt, const Collective& coll, Backend& backend, std::string program)
      : opt_(opt),
        coll_(coll),
        backend_(backend),
        program_(std::move(program)),
        host_(ShortHostName()) {}
  // Before the buffers are freed, the backend's queued calls must finish (see Finalize).
  ~Runner() {
    if (!finalized_) backend_.Finalize();
  }
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;

  int Run();

 private:
  // Reports a failed call and ends the process. Peers blocked in a collective with this rank
  // learn of it through the abort (or their launcher), instead of hanging.
  void Check(batonResult_t result, const char* what,
             std::source_location where = std::source_location::current()) {
    if (result == batonSuccess) return;
    const char* file = std::strrchr(where.file_name(), '/');
    std::fprintf(stderr, "%s: Test Baton failure %s:%u %s: '%s' (%s)\n", host_.c_str(),
                 file ? file + 1 : where.file_name(), static_cast<unsigned>(where.line()), what,
                 batonGetErrorString(result), backend_.ErrorDetail().c_str());
    std::fflush(stdout);
    backend_.Abort();
    std::exit(EXIT_FAILURE);
  }

  [[gnu::format(printf, 2, 3)]] void Print(const char* format, ...) const {
    if (rank_ != 0) return;
    va_list args;
    va_start(args, format);
    std::vprintf(format, args);
    va_end(args);
  }

  batonComm_t comm() const { return backend_.comm(); }
  size_t ElementSize() const { return Props(type_).size; }

  void OpenJson();
  void PrintDeviceReport();
  void PrintResultHeader();
  void PrintFooter(int64_t errors, double avg_bus_bw, double min_bus_bw);

  // Synchronization and bookkeeping between ranks, through the backend (see Backend); every
  // rank calls them in the same order.
  void Barrier();
  // Rank 0 gets every rank's `bytes` at all + rank * bytes; other ranks' `all` is not touched.
  void GatherToRank0(const void* mine, size_t bytes, void* all);
  // Every rank gets rank 0's `bytes` at buf.
  void BroadcastFromRank0(void* buf, size_t bytes);
  // All ranks' `value`, folded by rank 0 in rank order and sent back: identical bits everywhere.
  template <typename T>
  T FoldAllRanks(T value, const std::function<T(T, T)>& fold);
  double CombineTime(double seconds);
  int64_t SumInt64(int64_t value);

  std::vector<size_t> SweepSizes() const;
  void Setup(size_t bytes);
  void InitData(bool in_place, uint64_t seed);
  int64_t CheckData(bool in_place);
  void StartColl(bool in_place, int iter);
  // -z: after each call, or each group of -m calls. Never inside a group, where the barrier (a
  // Baton collective itself) would be deferred into the group.
  void WaitIfBlocking();
  void CompleteColl();
  void BenchTime(bool in_place);
  void TimeTest();

  const Options& opt_;
  const Collective& coll_;
  Backend& backend_;
  const std::string program_;
  const std::string host_;

  // The destructor finalizes the backend (its stream and communicator) before these are freed.
  Buffer send_;
  Buffer recv_;
  Buffer expected_;
  bool finalized_ = false;
  int rank_ = 0;
  int nranks_ = 1;
  std::unique_ptr<std::FILE, FileCloser> json_;
  std::string json_line_;

  // The test being run and the size being measured.
  batonDataType_t type_ = batonFloat;
  batonRedOp_t op_ = batonSum;
  const char* op_name_ = "none";
  int root_ = -1;
  CollCounts counts_;
  size_t send_bytes_ = 0;
  size_t expected_bytes_ = 0;

  // Results.
  int check_rep_ = 0;   // seeds of successive checks, as nccl-tests' rep
  int64_t errors_ = 0;  // measurements with wrong elements on this rank
  double bus_bw_sum_ = 0;
  int bus_bw_count_ = 0;
};

void Runner::OpenJson() {
  if (opt_.json_path.empty() || rank_ != 0) return;
  json_.reset(std::fopen(opt_.json_path.c_str(), "w"));
  if (!json_) {
    std::printf("# skipping json output; %s not accessible\n", opt_.json_path.c_str());
    return;
  }
  std::printf("# Writing JSON output to %s\n", opt_.json_path.c_str());
}

void Runner::PrintDeviceReport() {
  Print("# nccl-tests version %s (%s\n", kNcclTestsFormatVersion, backend_.Description().c_str());
  Print("# Collective test starting: %s\n", program_.c_str());
  Print(
      "# nThread %d nGpus %d minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d "
      "agg iters: %d validation: %d graph: %d\n",
      opt_.nthreads, opt_.ngpus, opt_.min_bytes, opt_.max_bytes,
      opt_.step_factor > 1 ? opt_.step_factor : opt_.step_bytes,
      opt_.step_factor > 1 ? "factor" : "bytes", opt_.warmup_iters, opt_.iters, opt_.agg_iters,
      opt_.datacheck, 0);
  if (opt_.blocking == 1) {
    Print("# Blocking Enabled: wait for completion and barrier after each collective \n");
  }
  if (opt_.blocking > 1) {
    Print("# Blocking Enabled: wait for completion after each collective (no barrier) \n");
  }
  Print("#\n");
  Print("# Using devices\n");

  RankRecord mine = {};
  mine.pid = static_cast<int32_t>(getpid());
  std::snprintf(mine.host, sizeof(mine.host), "%s", host_.c_str());
  std::vector<RankRecord> all(rank_ == 0 ? static_cast<size_t>(nranks_) : 0);
  GatherToRank0(&mine, sizeof(RankRecord), all.data());
  for (size_t r = 0; r < all.size(); ++r) {
    // The device number is the rank's index on its host, like the local GPU index it replaces.
    int local = 0;
    for (size_t q = 0; q < r; ++q) local += std::strcmp(all[q].host, all[r].host) == 0;
    Print("#  Rank %2d Group %2d Pid %6d on %10s device %2d [cpu] host\n", static_cast<int>(r), 0,
          static_cast<int>(all[r].pid), all[r].host, local);
  }
}

void Runner::PrintResultHeader() {
  const char* time = opt_.report_cputime ? "cputime" : "time";
  Print("#\n");
  Print(
      "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          "
      "\n",
      "", "", "", "", "");
  Print("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s\n", "size",
        "count", "type", "redop", "root", time, "algbw", "busbw", "#wrong", time, "algbw", "busbw",
        "#wrong", 0, "");
  Print("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s\n", "(B)",
        "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "", 0,
        "");
}

void Runner::PrintFooter(int64_t errors, double avg_bus_bw, double min_bus_bw) {
  Print("# %-20s : %lld %s\n", "Out of bounds values", static_cast<long long>(errors),
        errors ? "FAILED" : "OK");
  Print("# %-20s : %g %s\n", "Avg bus bandwidth", avg_bus_bw,
        min_bus_bw < 0 ? "" : (avg_bus_bw < min_bus_bw * 0.9 ? "FAILED" : "OK"));
  Print("#\n");
  Print("# Collective test concluded: %s\n", program_.c_str());
  Print("#\n");
  const std::string last_error = backend_.FinalError();
  if (!last_error.empty()) {
    Print("# error: %s\n", last_error.c_str());
  } else {
    Print("\n");
  }
}

void Runner::Barrier() {
  Check(backend_.Barrier(), "batonBarrier");
}

void Runner::GatherToRank0(const void* mine, size_t bytes, void* all) {
  Check(backend_.GatherToRank0(mine, bytes, all), "GatherToRank0");
}

void Runner::BroadcastFromRank0(void* buf, size_t bytes) {
  Check(backend_.BroadcastFromRank0(buf, bytes), "BroadcastFromRank0");
}

template <typename T>
T Runner::FoldAllRanks(T value, const std::function<T(T, T)>& fold) {
  std::vector<T> all(rank_ == 0 ? static_cast<size_t>(nranks_) : 0);
  GatherToRank0(&value, sizeof(T), all.data());
  T result = value;
  if (rank_ == 0) {
    result = all[0];
    for (int r = 1; r < nranks_; ++r) result = fold(result, all[r]);
  }
  BroadcastFromRank0(&result, sizeof(T));
  return result;
}

double Runner::CombineTime(double seconds) {
  switch (opt_.average) {
    case 0:  // rank 0's time
      return FoldAllRanks<double>(seconds, [](double first, double) { return first; });
    case 2:
      return FoldAllRanks<double>(seconds, [](double a, double b) { return std::min(a, b); });
    case 3:
      return FoldAllRanks<double>(seconds, [](double a, double b) { return std::max(a, b); });
    default:
      return FoldAllRanks<double>(seconds, std::plus<double>()) / nranks_;
  }
}

int64_t Runner::SumInt64(int64_t value) {
  return FoldAllRanks<int64_t>(value, std::plus<int64_t>());
}

std::vector<size_t> Runner::SweepSizes() const {
  std::vector<size_t> sizes;
  for (size_t size = opt_.min_bytes; size <= opt_.max_bytes;) {
    sizes.push_back(size);
    const size_t next = opt_.step_factor > 1 ? size * opt_.step_factor : size + opt_.step_bytes;
    if (next <= size) break;  // a zero step or an overflow would never reach max_bytes
    size = next;
  }
  return sizes;
}

void Runner::Setup(size_t bytes) {
  counts_ = coll_.GetCounts(bytes / ElementSize(), ElementSize(), nranks_);
  send_bytes_ = counts_.send_count * ElementSize();
  expected_bytes_ = counts_.recv_count * ElementSize();
}

void Runner::InitData(bool in_place, uint64_t seed) {
  std::memset(recv_.get(), 0, std::max(send_bytes_, expected_bytes_));
  std::byte* input =
      in_place ? recv_.get() + counts_.send_inplace_offset * rank_ * ElementSize() : send_.get();
  const DataPattern pattern(type_, op_, nranks_, seed);
  coll_.InitData(InitArgs{.counts = counts_,
                          .pattern = pattern,
                          .rank = rank_,
                          .nranks = nranks_,
                          .root = root_,
                          .in_place = in_place,
                          .input = input,
                          .expected = expected_.get()});
  if (backend_.PeersWriteEarly()) Barrier();
}

int64_t Runner::CheckData(bool in_place) {
  const std::byte* output =
      recv_.get() + (in_place ? counts_.recv_inplace_offset * rank_ * ElementSize() : 0);
  return CountWrong(output, expected_.get(), counts_.recv_count, type_, op_);
}

void Runner::StartColl(bool in_place, int iter) {
  // Successive iterations use successive slices of the buffers, as nccl-tests does, so that
  // small sizes do not run from a cache that a real application would not have warmed.
  const size_t slice = std::max(send_bytes_, expected_bytes_);
  const size_t steps =
      slice && backend_.ShiftsBuffers() ? std::max<size_t>(opt_.max_bytes / slice, 1) : 1;
  const size_t shift = slice * (static_cast<size_t>(iter) % steps);
  std::byte* recv = recv_.get() + shift;
  const std::byte* send =
      in_place ? recv + counts_.send_inplace_offset * rank_ * ElementSize() : send_.get() + shift;
  if (in_place) recv += counts_.recv_inplace_offset * rank_ * ElementSize();
  const RunArgs args = {.send = send,
                        .recv = recv,
                        .count = counts_.param_count,
                        .type = type_,
                        .op = op_,
                        .root = root_,
                        .comm = comm(),
                        .stream = backend_.stream(),
                        .rank = rank_,
                        .nranks = nranks_};
  Check(coll_.Run(args), coll_.Name());
}

void Runner::WaitIfBlocking() {
  if (!opt_.blocking) return;
  Check(backend_.Synchronize(), "batonStreamSynchronize");
  if (opt_.blocking == 1) Barrier();
}

void Runner::CompleteColl() {
  if (opt_.blocking || !backend_.stream()) return;
  Check(backend_.Synchronize(), "batonStreamSynchronize");
}

void Runner::BenchTime(bool in_place) {
  if (opt_.datacheck) InitData(in_place, 99);

  // One untimed call, then a barrier, so that every rank starts timing together.
  StartColl(in_place, 0);
  WaitIfBlocking();
  CompleteColl();
  Barrier();

  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  for (int iter = 0; iter < opt_.iters; ++iter) {
    if (opt_.agg_iters > 1) Check(backend_.GroupStart(), "batonGroupStart");
    for (int a = 0; a < opt_.agg_iters; ++a) StartColl(in_place, iter * opt_.agg_iters + a);
    if (opt_.agg_iters > 1) Check(backend_.GroupEnd(), "batonGroupEnd");
    WaitIfBlocking();
  }
  const double calls = static_cast<double>(opt_.iters) * opt_.agg_iters;
  const double cpu_seconds = std::chrono::duration<double>(Clock::now() - start).count() / calls;
  CompleteColl();
  double seconds = std::chrono::duration<double>(Clock::now() - start).count() / calls;
  seconds = CombineTime(seconds);

  const double alg_bw = coll_.AlgBytes(counts_, ElementSize(), nranks_) / 1.0e9 / seconds;
  const double bus_bw = alg_bw * coll_.BusBwFactor(nranks_);
  Barrier();

  // Like nccl-tests, a result the collective does not define is still timed but not checked.
  const bool checked = opt_.datacheck > 0 && (!in_place || coll_.ChecksInPlace());
  int64_t wrong = 0;
  ++check_rep_;
  for (int c = 0; checked && c < opt_.datacheck; ++c) {
    InitData(in_place, static_cast<uint64_t>(check_rep_));
    StartColl(in_place, 0);
    WaitIfBlocking();
    CompleteColl();
    const int64_t local_wrong = CheckData(in_place);
    if (local_wrong) ++errors_;
    wrong = SumInt64(local_wrong);
    if (wrong) break;
  }

  const double time_us = (opt_.report_cputime ? cpu_seconds : seconds) * 1.0e6;
  const std::string time = FormatColumn(time_us, 7);
  const std::string alg = FormatColumn(alg_bw, 6);
  const std::string bus = FormatColumn(bus_bw, 6);
  if (checked) {
    Print("  %7s  %6s  %6s  %6g", time.c_str(), alg.c_str(), bus.c_str(),
          static_cast<double>(wrong));
  } else {
    Print("  %7s  %6s  %6s    N/A", time.c_str(), alg.c_str(), bus.c_str());
  }
  if (json_) {
    json_line_ += in_place ? ",\"in_place\":{" : ",\"out_of_place\":{";
    json_line_ += opt_.report_cputime ? "\"cpu_time\":" : "\"time\":";
    json_line_ += JsonNumber(time_us) + ",\"alg_bw\":" + JsonNumber(alg_bw) +
                  ",\"bus_bw\":" + JsonNumber(bus_bw) +
                  ",\"nwrong\":" + (checked ? std::to_string(wrong) : std::string("null")) + "}";
  }
  bus_bw_sum_ += bus_bw;
  ++bus_bw_count_;
}

void Runner::TimeTest() {
  Barrier();

  // Warm up every power-of-two size once, so that connections and buffers for all of them
  // exist before anything is timed.
  for (size_t size = opt_.min_bytes; size <= opt_.max_bytes; size = size ? size * 2 : 1) {
    Setup(size);
    for (int iter = 0; iter < opt_.warmup_iters; ++iter) {
      StartColl(false, iter);
      WaitIfBlocking();
    }
    CompleteColl();
    if (size > opt_.max_bytes / 2) break;  // the next doubling would overflow or pass the end
  }

  const std::vector<size_t> sizes = SweepSizes();
  long cycles_left = opt_.run_cycles;  // 0 counts down past zero: forever, as in nccl-tests
  do {
    for (const size_t size : sizes) {
      Setup(size);
      const size_t bytes = std::max(send_bytes_, expected_bytes_);
      Print("%12zu  %12zu  %8s  %6s  %6i", bytes, counts_.param_count, Props(type_).name, op_name_,
            root_);
      if (json_) {
        json_line_ = "{\"collective\":" + JsonString(coll_.Name()) +
                     ",\"size\":" + std::to_string(bytes) +
                     ",\"count\":" + std::to_string(counts_.param_count) +
                     ",\"type\":" + JsonString(Props(type_).name) +
                     ",\"redop\":" + JsonString(op_name_) + ",\"root\":" + std::to_string(root_);
      }
      BenchTime(false);
      BenchTime(true);
      Print("\n");
      if (json_) {
        json_line_ += ",\"actual_iterations\":" + std::to_string(opt_.iters) + "}\n";
        std::fputs(json_line_.c_str(), json_.get());
        std::fflush(json_.get());
      }
    }
  } while (--cycles_left);
}

int Runner::Run() {
  const batonResult_t init = backend_.Init(opt_.algo, !opt_.stream_null);
  if (init != batonSuccess) {
    std::fprintf(stderr, "%s: %s: batonCommInitFromEnv failed: %s (%s)\n", host_.c_str(),
                 program_.c_str(), batonGetErrorString(init), backend_.ErrorDetail().c_str());
    backend_.Finalize();
    finalized_ = true;
    return EXIT_FAILURE;
  }
  rank_ = backend_.Rank();
  nranks_ = backend_.Size();

  OpenJson();
  PrintDeviceReport();
  // As nccl-tests: the send and receive buffers hold the largest size, the reference one too.
  send_ = AllocateBuffer(opt_.max_bytes);
  recv_ = AllocateBuffer(opt_.max_bytes);
  if (opt_.datacheck) expected_ = AllocateBuffer(opt_.max_bytes);
  if (!send_ || !recv_ || (opt_.datacheck && !expected_)) {
    std::fprintf(stderr, "%s: cannot allocate 3 buffers of %zu bytes\n", host_.c_str(),
                 opt_.max_bytes);
    Check(batonSystemError, "buffer allocation");
  }

  std::fflush(stdout);
  PrintResultHeader();

  std::vector<int> types;
  for (int t = 0; t < batonNumTypes; ++t) {
    if (opt_.type == -1 || opt_.type == t) types.push_back(t);
  }
  std::vector<int> ops = {-1};  // -1: no op, printed "none"
  if (coll_.UsesOp()) {
    ops.clear();
    for (int o = 0; o < batonNumOps; ++o) {
      if (opt_.op == -1 || opt_.op == o) ops.push_back(o);
    }
  }
  std::vector<int> roots = {-1};  // -1: no root
  if (coll_.UsesRoot()) {
    roots.clear();
    for (int r = 0; r < nranks_; ++r) {
      if (opt_.root == -1 || opt_.root == r) roots.push_back(r);
    }
    if (opt_.root >= nranks_ || opt_.root < -1) roots.push_back(opt_.root);  // Baton rejects it
  }
  for (const int t : types) {
    for (const int o : ops) {
      for (const int r : roots) {
        type_ = static_cast<batonDataType_t>(t);
        op_ = o == -1 ? batonSum : static_cast<batonRedOp_t>(o);
        op_name_ = o == -1 ? "none" : kOpNames[o];
        root_ = r;
        if (std::string why; !backend_.Supports(type_, op_, &why)) {
          Print("# skipping type %s op %s: %s\n", Props(type_).name, op_name_, why.c_str());
          continue;
        }
        TimeTest();
      }
    }
  }

  const int64_t errors = SumInt64(errors_);
  const double avg_bus_bw = bus_bw_count_ ? bus_bw_sum_ / bus_bw_count_ : 0.0;
  const char* min_env = std::getenv("NCCL_TESTS_MIN_BW");
  const double min_bus_bw = min_env ? std::atof(min_env) : -1.0;
  finalized_ = true;
  Check(backend_.Finalize(), "batonCommDestroy");

  PrintFooter(errors, avg_bus_bw, min_bus_bw);
  const bool failed = errors != 0 || (min_bus_bw >= 0 && avg_bus_bw < min_bus_bw * 0.9);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

}  // namespace

size_t TypeSize(batonDataType_t type) {
  return type >= 0 && type < batonNumTypes ? Props(type).size : 0;
}

const char* TypeName(batonDataType_t type) {
  return type >= 0 && type < batonNumTypes ? Props(type).name : "invalid";
}

const char* OpName(batonRedOp_t op) {
  return op >= 0 && op < batonNumOps ? kOpNames[static_cast<size_t>(op)] : "invalid";
}

// ---- DataPattern -------------------------------------------------------------------------------

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
      int64_t acc = gen.Value(keys[0], 0, index);
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

int PerfMain(int argc, char** argv, const Collective& coll) {
  BatonBackend baton;
  return PerfMain(argc, argv, coll, baton);
}

int PerfMain(int argc, char** argv, const Collective& coll, Backend& backend) {
  // Line-buffered even into a pipe (batonrun, mpirun), so that progress shows as it happens.
  setlinebuf(stdout);
  const char* slash = std::strrchr(argv[0], '/');
  const std::string program = slash ? slash + 1 : argv[0];
  Options opt;
  if (const int status = ParseOptions(argc, argv, program.c_str(), &opt); status >= 0) {
    return status;
  }
  return Runner(opt, coll, backend, program).Run();
}

}  // namespace baton_perf
