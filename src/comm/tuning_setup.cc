// Communicator::SetUpTuning: the host layout, the cost figures (defaults or
// calibrated), the cost model and the algorithm table of a communicator.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include "base/log.h"
#include "comm/calibrate.h"
#include "comm/comm.h"
#include "tuning/report.h"

namespace baton {

Status Communicator::SetUpTuning() {
  const auto& hosts = topology_.host_ranks();
  const int per_host = static_cast<int>(hosts[0].size());
  bool uniform = true;
  for (const auto& members : hosts)
    uniform = uniform && static_cast<int>(members.size()) == per_host;
  if (uniform) {
    host_layout_.hosts = static_cast<int>(hosts.size());
    host_layout_.per_host = per_host;
    host_layout_.ranks.clear();
    for (const auto& members : hosts)
      host_layout_.ranks.insert(host_layout_.ranks.end(), members.begin(), members.end());
    host_layout_.slot_of.assign(nranks_, 0);
    for (int i = 0; i < nranks_; ++i) host_layout_.slot_of[host_layout_.ranks[i]] = i;
  }

  // The slowest NIC any rank reported sets the default network figures.
  int nic_mbps = 0;
  for (const PeerInfo& p : peers_)
    if (p.nic_mbps > 0) nic_mbps = nic_mbps == 0 ? p.nic_mbps : std::min(nic_mbps, p.nic_mbps);
  CostParams params = DefaultCostParams(nic_mbps);
  if (config_.calibrate) BATON_RETURN_IF_ERROR(Calibrate(this, &params));
  params.rhd_switch_bytes = config_.rhd_switch_bytes;
  // The smallest of a cache size the ranks reported (KiB; 0: none knew).
  auto smallest_kib = [&](int32_t PeerInfo::*kib) {
    uint64_t smallest = 0;
    for (const PeerInfo& p : peers_)
      if (p.*kib > 0) smallest = smallest == 0 ? p.*kib : std::min<uint64_t>(smallest, p.*kib);
    return smallest;
  };
  // The smallest level-2 cache bounds what stays hot; the smallest
  // last-level cache, what the outputs of a call overflow.
  params.hot_reduce_bytes = HotReduceBytes(smallest_kib(&PeerInfo::l2_kib) << 10);
  params.llc_bytes = smallest_kib(&PeerInfo::llc_kib) << 10;

  std::vector<int> cores(hosts.size(), 0);
  for (size_t h = 0; h < hosts.size(); ++h) cores[h] = topology_.place(hosts[h][0]).cores;
  const auto start = std::chrono::steady_clock::now();
  cost_model_ = std::make_unique<CostModel>(topology_, ring_, cores, params);
  selection_.Build(*cost_model_, config_.algorithms, config_.chunk_bytes,
                   FoldedRhdMaxBytes(topology_.hosts(), nranks_, cores[0], params.llc_bytes));
  registered_min_bytes_ =
      RegisteredMinBytes(config_.registered_min_bytes, cost_model_->Oversubscribed());
  lines_max_bytes_ = LinesMaxBytes(config_.lines_max_bytes, cost_model_->Oversubscribed(), nranks_);
  const double build_us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  // On every rank, as the lines and copy-in say which calls they take.
  if (selection_.rhd_below() != 0)
    BATON_INFO(kLogColl,
               "allreduce below %llu B takes rhd, not copy-in or the model's choice: %d ranks on "
               "%d cores fold to a rank per core",
               static_cast<unsigned long long>(selection_.rhd_below()), nranks_, cores[0]);

  if (rank_ == 0 && LogEnabled(LogLevel::kInfo, kLogTuning)) {
    BATON_INFO(kLogTuning, "TUNING cost figures (%s)", DescribeCostParams(params).c_str());
    BATON_INFO(kLogTuning, "TUNING table of %d ranks on %d hosts built in %.0f us", nranks_,
               topology_.hosts(), build_us);
    auto human = [](size_t bytes) {
      return bytes == SIZE_MAX ? std::string("never") : std::to_string(bytes) + " B";
    };
    BATON_INFO(kLogTuning,
               "TUNING rhd allreduce (float32) switches to Rabenseifner at %s, among the hosts "
               "at %s (%s)",
               human(cost_model_->RhdSwitchBytes(batonFloat32)).c_str(),
               human(cost_model_->RhdSwitchBytes(batonFloat32, true)).c_str(),
               params.rhd_switch_bytes != 0 ? "BATON_RHD_SWITCH" : "the cost model");
    for (const std::string& line : selection_.Describe(*cost_model_))
      BATON_INFO(kLogTuning, "TUNING %s", line.c_str());
  }
  if (rank_ == 0 && !config_.topo_dump_file.empty()) {
    const std::string json = TuningReportJson(topology_, *cost_model_, selection_);
    FILE* f = fopen(config_.topo_dump_file.c_str(), "w");
    if (f == nullptr || fwrite(json.data(), 1, json.size(), f) != json.size()) {
      BATON_WARN(kLogInit, "BATON_TOPO_DUMP_FILE=%s: cannot write it",
                 config_.topo_dump_file.c_str());
    }
    if (f != nullptr) fclose(f);
  }
  return Status::Ok();
}

}  // namespace baton
