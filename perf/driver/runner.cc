// The sweep of the perf driver (perf_common.h): sizes, timing, checks and
// the table, on any Backend.
//
// Output, flags and measurement follow NVIDIA nccl-tests (src/common.cu, src/util.cu, version
// 2.18; the flags as in 2.19) so that tables from NCCL and Baton runs can be compared line by
// line, parsed by the same scripts and produced by the same command lines. The differences are
// deliberate: the "# Using devices" lines describe host ranks, -A and -s are Baton's own flags,
// -J writes JSON lines, GPU only flags (-G, -R, -x, -D, -V, -M) and -I/-K are accepted and say
// on a "#" line that they do nothing, and the driver's own barriers and bookkeeping go through
// Baton (batonBarrier, batonSend/batonRecv) where nccl-tests uses MPI.
//
// SPDX-License-Identifier: BSD-3-Clause
#include <getopt.h>
#include <unistd.h>

#include <algorithm>
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
#include <utility>
#include <vector>

#include "driver/format.h"
#include "driver/options.h"
#include "driver/types.h"
#include "perf_common.h"

namespace baton_perf {
namespace {

// The nccl-tests output format this driver reproduces, printed in the first line.
constexpr char kNcclTestsFormatVersion[] = "2.18.0";

// Buffers come from aligned_alloc, or with -R from batonMemAlloc (freed after the communicator,
// whose destruction ends their registrations).
struct FreeDeleter {
  bool baton = false;
  void operator()(std::byte* p) const { baton ? (void)batonMemFree(p) : std::free(p); }
};
using Buffer = std::unique_ptr<std::byte[], FreeDeleter>;

// Page-aligned like device allocations, and touched once so that page faults do not land in the
// first timed iterations. With `comm` (-R), as nccl-tests' -R: in memory the peers can map,
// registered on the communicator.
Buffer AllocateBuffer(size_t bytes, batonComm_t comm = nullptr) {
  constexpr size_t kAlignment = 4096;
  const size_t size = (std::max<size_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
  void* p = nullptr;
  void* handle = nullptr;
  if (comm != nullptr && (batonMemAlloc(&p, size) != batonSuccess ||
                          batonCommRegister(comm, p, size, &handle) != batonSuccess)) {
    if (p != nullptr) batonMemFree(p);
    return Buffer();
  }
  Buffer buffer(static_cast<std::byte*>(comm ? p : std::aligned_alloc(kAlignment, size)),
                FreeDeleter{comm != nullptr});
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
  // -u: both buffers start `unalign` elements past their page alignment, as in nccl-tests.
  std::byte* SendBase() const { return send_.get() + opt_.unalign * ElementSize(); }
  std::byte* RecvBase() const { return recv_.get() + opt_.unalign * ElementSize(); }

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
    Print("# Blocking Enabled: wait and barrier after each inner iteration (-m) \n");
  }
  if (opt_.blocking == 2) {
    Print("# Blocking Enabled: wait after each inner iteration (-m), no barrier \n");
  }
  if (opt_.blocking == 3) {
    Print(
        "# Blocking Enabled: wait and barrier after each outer iteration (-n); time excludes "
        "barrier \n");
  }
  for (const std::string& notice : opt_.notices) Print("# %s\n", notice.c_str());
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
  const int ts_pad = opt_.report_timestamps ? 19 : 0;
  const char* ts_label = opt_.report_timestamps ? "timestamp" : "";
  const char* ts_format = opt_.report_timestamps ? kTimestampFormat : "";
  Print("#\n");
  Print(
      "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          "
      "\n",
      "", "", "", "", "");
  Print("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s\n", "size",
        "count", "type", "redop", "root", time, "algbw", "busbw", "#wrong", time, "algbw", "busbw",
        "#wrong", ts_pad, ts_label);
  Print("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s\n", "(B)",
        "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "",
        ts_pad, ts_format);
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
  std::memset(RecvBase(), 0, std::max(send_bytes_, expected_bytes_));
  std::byte* input =
      in_place ? RecvBase() + counts_.send_inplace_offset * rank_ * ElementSize() : SendBase();
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
      RecvBase() + (in_place ? counts_.recv_inplace_offset * rank_ * ElementSize() : 0);
  return CountWrong(output, expected_.get(), counts_.recv_count, type_, op_);
}

void Runner::StartColl(bool in_place, int iter) {
  // Successive iterations use successive slices of the buffers, as nccl-tests does, so that
  // small sizes do not run from a cache that a real application would not have warmed.
  const size_t slice = std::max(send_bytes_, expected_bytes_);
  const size_t steps =
      slice && backend_.ShiftsBuffers() ? std::max<size_t>(opt_.max_bytes / slice, 1) : 1;
  const size_t shift = slice * (static_cast<size_t>(iter) % steps);
  std::byte* recv = RecvBase() + shift;
  const std::byte* send =
      in_place ? recv + counts_.send_inplace_offset * rank_ * ElementSize() : SendBase() + shift;
  if (in_place) recv += counts_.recv_inplace_offset * rank_ * ElementSize();
  // -o mulsum: one op per call, created and destroyed around it as nccl-tests does; Baton keeps
  // the scalar with the queued call, so destroying the op at once is allowed.
  batonRedOp_t op = op_;
  if (op_ == kPreMulSum) {
    alignas(8) std::byte scalar[8] = {};
    StoreInt(type_, PreMulSumScalar(rank_), scalar);
    Check(batonRedOpCreatePreMulSum(&op, scalar, type_, batonScalarHostImmediate, comm()),
          "batonRedOpCreatePreMulSum");
  }
  const RunArgs args = {.send = send,
                        .recv = recv,
                        .count = counts_.param_count,
                        .type = type_,
                        .op = op,
                        .root = root_,
                        .comm = comm(),
                        .stream = backend_.stream(),
                        .rank = rank_,
                        .nranks = nranks_};
  Check(coll_.Run(args), coll_.Name());
  if (op_ == kPreMulSum) Check(batonRedOpDestroy(op, comm()), "batonRedOpDestroy");
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
  double coll_only = 0;  // -z 3: the time in the calls, without the barriers between iterations
  for (int iter = 0; iter < opt_.iters; ++iter) {
    // Only -z 3 reads the clock per iteration: a clock read costs a few
    // percent of an 8-byte call, which the other modes must not measure.
    const auto iter_start = opt_.blocking == 3 ? Clock::now() : start;
    if (opt_.agg_iters > 1) Check(backend_.GroupStart(), "batonGroupStart");
    for (int a = 0; a < opt_.agg_iters; ++a) StartColl(in_place, iter * opt_.agg_iters + a);
    if (opt_.agg_iters > 1) Check(backend_.GroupEnd(), "batonGroupEnd");
    WaitIfBlocking();
    if (opt_.blocking == 3) {
      coll_only += std::chrono::duration<double>(Clock::now() - iter_start).count();
      Barrier();
    }
  }
  const double calls = static_cast<double>(opt_.iters) * opt_.agg_iters;
  const auto elapsed = [&] {
    return opt_.blocking == 3 ? coll_only
                              : std::chrono::duration<double>(Clock::now() - start).count();
  };
  const double cpu_seconds = elapsed() / calls;
  CompleteColl();
  double seconds = elapsed() / calls;
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
  if (in_place && opt_.report_timestamps) Print("%21s", LocalTimestamp().c_str());
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
  // -T: nccl-tests aborts a test whose calls make no progress for that long; Baton's own
  // deadline on every wait does the same, and fails the call, which ends the run (Check).
  if (opt_.timeout > 0) setenv("BATON_TIMEOUT", std::to_string(opt_.timeout).c_str(), 1);
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
  // -u shifts both buffers by up to 8 bytes per element of unalignment, the largest type's.
  const size_t padded = opt_.max_bytes + 8 * static_cast<size_t>(opt_.unalign);
  batonComm_t registered = opt_.local_register != 0 ? comm() : nullptr;  // null: not Baton
  send_ = AllocateBuffer(padded, registered);
  recv_ = AllocateBuffer(padded, registered);
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
    for (int o = 0; o <= kPreMulSum; ++o) {  // nccl-tests' -o all includes mulsum
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
        op_name_ = o == -1 ? "none" : OpName(op_);
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
