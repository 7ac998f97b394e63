// The perf driver's sweep (runner.cc) and its printing (runner_report.cc): one Runner per run of a
// perf binary, on any Backend.
#pragma once

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <source_location>
#include <string>
#include <utility>
#include <vector>

#include "driver/buffers.h"
#include "driver/device.h"
#include "driver/format.h"
#include "driver/options.h"
#include "driver/types.h"
#include "perf_common.h"

namespace baton_perf {

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

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
    DeviceStreamDestroy(device_stream_);
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
  std::byte* SendBase() const { return buffers_.send() + opt_.unalign * ElementSize(); }
  std::byte* RecvBase() const { return buffers_.recv() + opt_.unalign * ElementSize(); }
  bool OnDevice() const { return opt_.buffers == BufferSpace::kCuda; }
  // The stream calls go on: Baton's host stream, a CUDA stream (-B cuda), or null (-y 1).
  batonStream_t CallStream() const { return OnDevice() ? device_stream_ : backend_.stream(); }
  void SynchronizeCalls();
  // Fails the run with a buffer error's text (see Check).
  void CheckBuffers(batonResult_t result, const std::string& error, const char* what);

  void OpenJson();
  // -B cuda: picks this rank's GPU (its index among the ranks of its host) and the stream.
  void SetUpDevice();
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
  RankBuffers buffers_;
  batonStream_t device_stream_ = nullptr;  // -B cuda without -y 1
  std::string device_;                     // -B cuda: SelectDevice's description
  int gpu_ = -1;                           // -B cuda: the CUDA device index
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

}  // namespace baton_perf
