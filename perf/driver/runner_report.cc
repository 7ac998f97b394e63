// The perf driver's printing: the header lines, the "# Using devices" lines (with -B cuda the
// GPU each rank picked), the table's header and the footer, as nccl-tests prints them.
//
// SPDX-License-Identifier: BSD-3-Clause
#include <unistd.h>

#include "driver/device.h"
#include "driver/format.h"
#include "driver/runner.h"
#include "driver/types.h"

namespace baton_perf {
namespace {

// The nccl-tests output format this driver reproduces, printed in the first line.
constexpr char kNcclTestsFormatVersion[] = "2.18.0";

// What each rank contributes to the "# Using devices" lines.
struct RankRecord {
  int32_t pid;
  int32_t gpu;  // -B cuda: the CUDA device index; else -1
  char host[120];
  char device[128];  // -B cuda: what the GPU is (SelectDevice); else empty
};

}  // namespace

void Runner::OpenJson() {
  if (opt_.json_path.empty() || rank_ != 0) return;
  json_.reset(std::fopen(opt_.json_path.c_str(), "w"));
  if (!json_) {
    std::printf("# skipping json output; %s not accessible\n", opt_.json_path.c_str());
    return;
  }
  std::printf("# Writing JSON output to %s\n", opt_.json_path.c_str());
}

void Runner::SetUpDevice() {
  // Every rank learns every rank's host, so that it knows its index among the ranks of its host
  // whatever the launcher (the local rank a launcher variable would give).
  char host[sizeof(RankRecord::host)] = {};
  std::snprintf(host, sizeof(host), "%s", host_.c_str());
  std::vector<char> hosts(static_cast<size_t>(nranks_) * sizeof(host));
  GatherToRank0(host, sizeof(host), hosts.data());
  BroadcastFromRank0(hosts.data(), hosts.size());
  int local = 0;
  for (int q = 0; q < rank_; ++q) local += std::strcmp(&hosts[q * sizeof(host)], host) == 0;
  // (LastDeviceError is read after each call: argument order is unspecified.)
  const batonResult_t selected = SelectDevice(local, &gpu_, &device_);
  CheckBuffers(selected, LastDeviceError(), "selecting the GPU");
  if (!opt_.stream_null) {
    const batonResult_t created = DeviceStreamCreate(&device_stream_);
    CheckBuffers(created, LastDeviceError(), "creating a CUDA stream");
  }
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
  mine.gpu = gpu_;
  std::snprintf(mine.host, sizeof(mine.host), "%s", host_.c_str());
  std::snprintf(mine.device, sizeof(mine.device), "%s", device_.c_str());
  std::vector<RankRecord> all(rank_ == 0 ? static_cast<size_t>(nranks_) : 0);
  GatherToRank0(&mine, sizeof(RankRecord), all.data());
  for (size_t r = 0; r < all.size(); ++r) {
    // The device number is the rank's index on its host, like the local GPU index it replaces
    // (with -B cuda, the GPU is that index modulo the host's GPUs).
    int local = 0;
    for (size_t q = 0; q < r; ++q) local += std::strcmp(all[q].host, all[r].host) == 0;
    Print("#  Rank %2d Group %2d Pid %6d on %10s device %2d %s\n", static_cast<int>(r), 0,
          static_cast<int>(all[r].pid), all[r].host, all[r].gpu >= 0 ? all[r].gpu : local,
          all[r].device[0] != '\0' ? all[r].device : "[cpu] host");
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

}  // namespace baton_perf
