#include "tuning/report.h"

#include <cstdio>

#include "base/datatype.h"

namespace baton {
namespace {

// Bandwidth in GB/s of a figure in microseconds per byte.
double GBps(double us_per_byte) {
  return us_per_byte > 0 ? 1e-3 / us_per_byte : 0;
}

}  // namespace

std::string DescribeCostParams(const CostParams& params) {
  std::string out = params.source + ":";
  char buf[160];
  for (int c = 1; c < kNumLinkClasses; ++c) {
    const LinkCost& l = params.link[c];
    snprintf(buf, sizeof(buf), " %s alpha %.3g us, overhead %.3g us, %.3g GB/s;",
             LinkClassName(static_cast<LinkClass>(c)), l.alpha_us, l.overhead_us,
             GBps(l.us_per_byte));
    out += buf;
  }
  snprintf(buf, sizeof(buf),
           " context switch %.3g us; reductions in cache up to %zu KiB; last-level cache %zu KiB;",
           params.switch_us, params.hot_reduce_bytes >> 10, params.llc_bytes >> 10);
  out += buf;
  out += " reduce";
  for (int t = 0; t < batonNumTypes; ++t) {
    snprintf(buf, sizeof(buf), "%s %s %.3g GB/s", t == 0 ? "" : ",",
             DatatypeName(static_cast<batonDataType_t>(t)), GBps(params.reduce_us_per_byte[t]));
    out += buf;
  }
  return out;
}

std::string CostParamsJson(const CostParams& params) {
  std::string out = "{\"source\": \"" + params.source + "\", \"links\": {";
  char buf[160];
  for (int c = 1; c < kNumLinkClasses; ++c) {
    const LinkCost& l = params.link[c];
    snprintf(buf, sizeof(buf),
             "%s\"%s\": {\"alpha_us\": %.6g, \"overhead_us\": %.6g, \"us_per_byte\": %.6g}",
             c == 1 ? "" : ", ", LinkClassName(static_cast<LinkClass>(c)), l.alpha_us,
             l.overhead_us, l.us_per_byte);
    out += buf;
  }
  snprintf(buf, sizeof(buf),
           "}, \"switch_us\": %.6g, \"hot_reduce_bytes\": %zu, \"llc_bytes\": %zu",
           params.switch_us, params.hot_reduce_bytes, params.llc_bytes);
  out += buf;
  out += ", \"reduce_us_per_byte\": {";
  for (int t = 0; t < batonNumTypes; ++t) {
    snprintf(buf, sizeof(buf), "%s\"%s\": %.6g", t == 0 ? "" : ", ",
             DatatypeName(static_cast<batonDataType_t>(t)), params.reduce_us_per_byte[t]);
    out += buf;
  }
  return out + "}}";
}

std::string TuningReportJson(const CommTopology& topology, const CostModel& model,
                             const SelectionTable& table) {
  std::string out = "{\"nranks\": " + std::to_string(topology.nranks()) + ", \"hosts\": [";
  for (int h = 0; h < topology.hosts(); ++h) {
    out += h == 0 ? "" : ", ";
    out += "{\"ranks\": [";
    bool first = true;
    for (int r : topology.host_ranks()[h]) {
      const RankPlace& p = topology.place(r);
      out += first ? "" : ", ";
      out += "{\"rank\": " + std::to_string(r) +
             ", \"package\": " + (p.package < 0 ? std::string("null") : std::to_string(p.package)) +
             ", \"numa\": " + (p.numa < 0 ? std::string("null") : std::to_string(p.numa)) + "}";
      first = false;
    }
    const RankPlace& first_place = topology.place(topology.host_ranks()[h][0]);
    out += "], \"packages\": " + std::to_string(first_place.packages) +
           ", \"numa_nodes\": " + std::to_string(first_place.numa_nodes) +
           ", \"cores\": " + std::to_string(first_place.cores) + "}";
  }
  out += "], \"uniform_hosts\": ";
  out += model.uniform_hosts() ? "true" : "false";
  out += ", \"cost\": " + CostParamsJson(model.params());
  out += ", \"algorithms\": " + table.Json(model) + "}\n";
  return out;
}

}  // namespace baton
