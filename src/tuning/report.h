// The tuning state of a communicator as text: the cost figures and the
// algorithm table, for the TUNING log, BATON_TOPO_DUMP_FILE and baton-topo.
#pragma once

#include <string>

#include "topology/comm_topology.h"
#include "tuning/cost_model.h"
#include "tuning/select.h"

namespace baton {

// "numa: alpha 0.25 us, overhead 0.08 us, 12 GB/s; ...; reduce float32 12 GB/s, ..."
std::string DescribeCostParams(const CostParams& params);

// One JSON object: "hosts" (each with its ranks and their package and NUMA
// node), "cost" (the figures per link class and datatype, and their
// source), "algorithms" (SelectionTable::Json).
std::string TuningReportJson(const CommTopology& topology, const CostModel& model,
                             const SelectionTable& table);

// The figures alone as a JSON object (the "cost" member above).
std::string CostParamsJson(const CostParams& params);

}  // namespace baton
