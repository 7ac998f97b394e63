#include "driver/options.h"

#include <getopt.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "driver/device.h"
#include "perf_common.h"

namespace baton_perf {
namespace {

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
    if (std::strcmp(name, TypeName(static_cast<batonDataType_t>(t))) == 0) return t;
  }
  if (std::strcmp(name, "all") == 0) return -1;
  std::printf("invalid type %s, defaulting to %s .. \n", name, TypeName(batonFloat));
  return batonFloat;
}

// nccl-tests' op names; "mulsum" (and Baton's "premulsum") is a PreMulSum op, as in nccl-tests
// whose -o all includes it.
int ParseOp(const char* name) {
  for (int o = 0; o < batonNumOps; ++o) {
    if (std::strcmp(name, OpName(static_cast<batonRedOp_t>(o))) == 0) return o;
  }
  if (std::strcmp(name, "mulsum") == 0 || std::strcmp(name, "premulsum") == 0) return kPreMulSum;
  if (std::strcmp(name, "all") == 0) return -1;
  std::printf("invalid op %s, defaulting to %s .. \n", name, OpName(batonSum));
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
      "[-p,--parallel_init <0/1> (ignored: one rank per process)] \n\t"
      "[-c,--check <check iteration count>] \n\t"
      "[-o,--op <sum/prod/min/max/avg/mulsum/all> (premulsum = mulsum)] \n\t"
      "[-d,--datatype "
      "<int8/uint8/int32/uint32/int64/uint64/half/float/double/bfloat16/f8e4m3/f8e5m2/all>] "
      "\n\t"
      "[-r,--root <root/all>] \n\t"
      "[-z,--blocking <0/1/2/3> 1=barrier after each inner iter (-m), 2=no barrier, 3=wait and "
      "barrier after each outer iter (-n)] \n\t"
      "[-y,--stream_null <0/1> synchronous calls on the NULL stream] \n\t"
      "[-T,--timeout <time in seconds> (Baton: BATON_TIMEOUT)] \n\t"
      "[-G,--cudagraph <num graph launches> (ignored: host streams)] \n\t"
      "[-C,--report_cputime <0/1>] \n\t"
      "[-S,--report_timestamps <0/1> report timestamps (default 0)] \n\t"
      "[-J,--output_file <file> write one JSON object per result line to file] \n\t"
      "[-a,--average <0/1/2/3> report average iteration time <0=RANK0/1=AVG/2=MIN/3=MAX>] \n\t"
      "[-R,--local_register <0/1/2> batonMemAlloc + batonCommRegister the buffers] \n\t"
      "[-x,--cta_policy <0/1/2> (ignored: no CTAs)] \n\t"
      "[-D,--device_implementation <0/...> (only 0)] \n\t"
      "[-V,--device_cta_count <number> (ignored: no CTAs)] \n\t"
      "[-M,--memory <0/1> (ignored: no device memory)] \n\t"
      "[-u,--unalign <index of first element> misalign send and receive buffers] \n\t"
      "[-I,--per_iter_timing <0/1> (not implemented)] \n\t"
      "[-K,--per_iter_skip <count> (not implemented)] \n\t"
      "[-A,--algo <algorithm> (Baton) set BATON_ALGO before creating the communicator] \n\t"
      "[-s,--stream <stream/null> (Baton) host stream (default) or synchronous calls, as -y] "
      "\n\t"
      "[-B,--buffers <host/cuda> (Baton) buffers in host memory (default) or cudaMalloc'd on the "
      "GPU of the rank's index on its host, calls on a CUDA stream (-y 1: synchronous)] \n\t"
      "[-h,--help]\n",
      program);
}

// A flag Baton accepts for nccl-tests' sake but does not act on: one line saying so when it
// asks for something (a zero value asks for nothing).
void Notice(Options* opt, const char* flag, const char* value, const char* what) {
  if (ParseInt(value) == 0) return;
  opt->notices.push_back(std::string("Option ") + flag + " " + value + ": " + what);
}

}  // namespace

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
      {"report_timestamps", required_argument, nullptr, 'S'},
      {"output_file", required_argument, nullptr, 'J'},
      {"average", required_argument, nullptr, 'a'},
      {"local_register", required_argument, nullptr, 'R'},
      {"cta_policy", required_argument, nullptr, 'x'},
      {"device_implementation", required_argument, nullptr, 'D'},
      {"device_cta_count", required_argument, nullptr, 'V'},
      {"memory", required_argument, nullptr, 'M'},
      {"unalign", required_argument, nullptr, 'u'},
      {"per_iter_timing", required_argument, nullptr, 'I'},
      {"per_iter_skip", required_argument, nullptr, 'K'},
      {"algo", required_argument, nullptr, 'A'},
      {"stream", required_argument, nullptr, 's'},
      {"buffers", required_argument, nullptr, 'B'},
      {"help", no_argument, nullptr, 'h'},
      {nullptr, 0, nullptr, 0},
  };
  double parsed;
  for (;;) {
    const int c = getopt_long(
        argc, argv,
        "t:g:b:e:i:f:n:m:w:N:p:I:K:c:o:d:r:z:y:T:hG:C:a:R:x:D:V:J:S:M:u:A:s:B:", kLongOptions,
        nullptr);
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
        opt->timeout = ParseInt(optarg);
        break;
      case 'G':
        Notice(opt, "-G", optarg, "CUDA graphs are ignored: calls run on host streams");
        break;
      case 'C':
        opt->report_cputime = ParseInt(optarg);
        break;
      case 'S': {
        // -S was Baton's stream choice before it took nccl-tests' meaning: an old "-S null"
        // must fail loudly rather than run on a host stream with timestamps off.
        char* end = nullptr;
        opt->report_timestamps = static_cast<int>(std::strtol(optarg, &end, 0));
        if (end == optarg || *end != '\0') {
          std::fprintf(stderr,
                       "invalid -S '%s': -S is --report_timestamps <0/1> as in nccl-tests; "
                       "synchronous calls are -y 1 (or -s null)\n",
                       optarg);
          return EXIT_FAILURE;
        }
        break;
      }
      case 'R':
        // Non-zero: the buffers come from batonMemAlloc and are registered (batonCommRegister).
        // Baton registers locally only, so symmetric registration (2) is said aloud.
        opt->local_register = ParseInt(optarg);
        if (opt->local_register == 2)
          Notice(opt, "-R", optarg,
                 "symmetric registration is local registration in Baton (batonCommRegister)");
        break;
      case 'x':
        Notice(opt, "-x", optarg, "CTA policy ignored: Baton has no CTAs");
        break;
      case 'D':
        Notice(opt, "-D", optarg,
               "device implementations are not available; running Baton's own calls");
        break;
      case 'V':
        Notice(opt, "-V", optarg, "device CTA count ignored: Baton has no CTAs");
        break;
      case 'M':
        Notice(opt, "-M", optarg, "memory report ignored: no device memory to report");
        break;
      case 'u':
        opt->unalign = ParseInt(optarg);
        break;
      case 'I':
        Notice(opt, "-I", optarg, "per-iteration timing is not implemented; ignored");
        break;
      case 'K':
        Notice(opt, "-K", optarg, "per-iteration timing is not implemented; ignored");
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
      case 's':
        if (std::strcmp(optarg, "stream") == 0) {
          opt->stream_null = false;
        } else if (std::strcmp(optarg, "null") == 0) {
          opt->stream_null = true;
        } else {
          std::fprintf(stderr, "invalid stream '%s': expected 'stream' or 'null'\n", optarg);
          return EXIT_FAILURE;
        }
        break;
      case 'B':
        if (std::strcmp(optarg, "host") == 0) {
          opt->buffers = BufferSpace::kHost;
        } else if (std::strcmp(optarg, "cuda") == 0) {
          opt->buffers = BufferSpace::kCuda;
        } else {
          std::fprintf(stderr, "invalid buffers '%s': expected 'host' or 'cuda'\n", optarg);
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
  if (opt->buffers == BufferSpace::kCuda && opt->local_register != 0) {
    std::fprintf(stderr,
                 "%s: -R %d with -B cuda: Baton registers host memory only (device buffers of "
                 "one host are reached through CUDA IPC without registration)\n",
                 program, opt->local_register);
    return EXIT_FAILURE;
  }
  if (opt->buffers == BufferSpace::kCuda && !DeviceBuild()) {
    std::fprintf(stderr, "%s: -B cuda: %s\n", program, LastDeviceError().c_str());
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
  if (opt->blocking < 0 || opt->blocking > 3) {
    std::fprintf(stderr, "invalid blocking mode %d: expected 0, 1, 2 or 3\n", opt->blocking);
    return EXIT_FAILURE;
  }
  if (opt->unalign < 0 || opt->timeout < 0) {
    std::fprintf(stderr, "invalid -u %d or -T %d: expected >= 0\n", opt->unalign, opt->timeout);
    return EXIT_FAILURE;
  }
  if (opt->iters < 1 || opt->agg_iters < 1 || opt->warmup_iters < 0 || opt->datacheck < 0) {
    std::fprintf(stderr, "invalid iteration counts: -n and -m must be >= 1, -w and -c >= 0\n");
    return EXIT_FAILURE;
  }
  return -1;
}

}  // namespace baton_perf
