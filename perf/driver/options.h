// The perf binaries' command line: nccl-tests' flags and Baton's own (-A,
// -S, -J).
#pragma once

#include <cstddef>
#include <string>

#include "baton.h"

namespace baton_perf {

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

// Returns -1 to go on, or the exit status to end with (help, bad arguments).
int ParseOptions(int argc, char** argv, const char* program, Options* opt);

}  // namespace baton_perf
