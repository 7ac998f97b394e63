// The perf binaries' command line: every nccl-tests flag with nccl-tests'
// letter and meaning (perf/README.md has the table), and Baton's own options
// (-A, -s) on letters nccl-tests does not use.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "baton.h"
#include "driver/buffers.h"

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
  int op = batonSum;   // -1: all; kPreMulSum (perf_common.h): a PreMulSum op per call
  int type = batonFloat;
  int root = 0;  // -1: all
  // 0: no waits; 1: wait and barrier after each call (or -m group); 2: wait only; 3: also wait
  // and barrier after each -n iteration, timing the calls without the barriers.
  int blocking = 0;
  bool stream_null = false;  // -y 1 or -s null: synchronous calls, no host stream
  int timeout = 0;           // -T: seconds, given to Baton as BATON_TIMEOUT; 0: Baton's default
  int report_cputime = 0;
  int report_timestamps = 0;  // -S: a timestamp column after each result line
  int average = 1;            // 0: rank 0, 1: avg, 2: min, 3: max of the ranks' times
  int local_register = 0;     // -R: buffers from batonMemAlloc, registered
  int unalign = 0;            // -u: the buffers start this many elements past their alignment
  // -B: host memory, or CUDA device memory with the calls on a CUDA stream (kRegistered comes
  // from -R, not from here).
  BufferSpace buffers = BufferSpace::kHost;
  std::string algo;
  std::string json_path;
  // Lines about accepted flags that Baton does not act on (-R, -G, ...), printed by rank 0 at
  // the top of the table: parsing runs on every rank, before ranks are known.
  std::vector<std::string> notices;
};

// Returns -1 to go on, or the exit status to end with (help, bad arguments).
int ParseOptions(int argc, char** argv, const char* program, Options* opt);

}  // namespace baton_perf
