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
#include "driver/runner.h"

#include <getopt.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "driver/device.h"
#include "driver/format.h"
#include "driver/types.h"

namespace baton_perf {

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
  std::string error;
  CheckBuffers(buffers_.Zero(RecvBase(), std::max(send_bytes_, expected_bytes_), &error), error,
               "zeroing the receive buffer");
  std::byte* input_at =
      in_place ? RecvBase() + counts_.send_inplace_offset * rank_ * ElementSize() : SendBase();
  std::byte* input = buffers_.HostView(input_at, send_bytes_);
  const DataPattern pattern(type_, op_, nranks_, seed);
  coll_.InitData(InitArgs{.counts = counts_,
                          .pattern = pattern,
                          .rank = rank_,
                          .nranks = nranks_,
                          .root = root_,
                          .in_place = in_place,
                          .input = input,
                          .expected = buffers_.expected()});
  CheckBuffers(buffers_.Store(input_at, send_bytes_, &error), error, "writing the input");
  if (backend_.PeersWriteEarly()) Barrier();
}

int64_t Runner::CheckData(bool in_place) {
  const std::byte* output_at =
      RecvBase() + (in_place ? counts_.recv_inplace_offset * rank_ * ElementSize() : 0);
  const std::byte* output = nullptr;
  std::string error;
  CheckBuffers(buffers_.Load(output_at, expected_bytes_, &output, &error), error,
               "reading the output");
  return CountWrong(output, buffers_.expected(), counts_.recv_count, type_, op_);
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
                        .stream = CallStream(),
                        .rank = rank_,
                        .nranks = nranks_};
  Check(coll_.Run(args), coll_.Name());
  if (op_ == kPreMulSum) Check(batonRedOpDestroy(op, comm()), "batonRedOpDestroy");
}

void Runner::SynchronizeCalls() {
  if (!OnDevice()) {
    Check(backend_.Synchronize(), "batonStreamSynchronize");
  } else if (device_stream_ != nullptr) {
    const batonResult_t synchronized = DeviceStreamSynchronize(device_stream_);
    CheckBuffers(synchronized, LastDeviceError(), "cudaStreamSynchronize");
  }
}

void Runner::CheckBuffers(batonResult_t result, const std::string& error, const char* what) {
  if (result == batonSuccess) return;
  std::fprintf(stderr, "%s: rank %d: %s: %s\n", host_.c_str(), rank_, what, error.c_str());
  Check(result, what);
}

void Runner::WaitIfBlocking() {
  if (!opt_.blocking) return;
  SynchronizeCalls();
  if (opt_.blocking == 1) Barrier();
}

void Runner::CompleteColl() {
  if (opt_.blocking || !CallStream()) return;
  SynchronizeCalls();
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
  if (OnDevice() && !backend_.SupportsDeviceBuffers()) {
    std::fprintf(stderr, "%s: -B cuda: %s measures host buffers only\n", program_.c_str(),
                 backend_.Description().c_str());
    return EXIT_FAILURE;
  }
  // With device buffers the calls go on a CUDA stream of the driver's, not on a host stream.
  const batonResult_t init = backend_.Init(opt_.algo, !opt_.stream_null && !OnDevice());
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
  if (OnDevice()) SetUpDevice();
  PrintDeviceReport();
  // As nccl-tests: the send and receive buffers hold the largest size, the reference one too.
  // -u shifts both buffers by up to 8 bytes per element of unalignment, the largest type's.
  const size_t padded = opt_.max_bytes + 8 * static_cast<size_t>(opt_.unalign);
  // -R on a library that has no registration (comm() is null) measures ordinary buffers.
  const BufferSpace space = OnDevice() ? BufferSpace::kCuda
                            : opt_.local_register != 0 && comm() != nullptr
                                ? BufferSpace::kRegistered
                                : BufferSpace::kHost;
  std::string error;
  const batonResult_t allocated =
      buffers_.Allocate(space, padded, opt_.datacheck ? opt_.max_bytes : 0, comm(), &error);
  if (allocated != batonSuccess) {
    std::fprintf(stderr, "%s: cannot allocate 3 buffers of %zu bytes\n", host_.c_str(),
                 opt_.max_bytes);
    CheckBuffers(allocated, error, "buffer allocation");
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