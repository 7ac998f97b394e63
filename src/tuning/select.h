// Which algorithm runs a call: BATON_ALGO's filter first, then a default
// preference by message size and rank count. The thresholds stand in for
// the calibrated cost model of a later issue, which will plug in here.
#pragma once

#include <cstddef>
#include <span>

#include "algorithms/collective.h"
#include "algorithms/schedule.h"
#include "base/status.h"
#include "tuning/algorithm_filter.h"

namespace baton {

// Builds one rank's schedule with one algorithm.
using BuildFn = void (*)(const CollArgs&, Schedule*);

// An algorithm that implements a collective, with its builder.
struct AlgorithmImpl {
  Algorithm algorithm;
  BuildFn build;
};

// Every algorithm that implements `c`, in default preference order for a
// call moving `bytes` (the whole vector for allreduce/broadcast/reduce, one
// rank's block times nranks for the others) on `nranks` ranks.
std::span<const AlgorithmImpl> CandidateAlgorithms(Collective c, size_t bytes, int nranks);

// The first candidate BATON_ALGO allows, or batonInvalidUsage.
Status SelectAlgorithm(const AlgorithmFilter& filter, Collective c, size_t bytes, int nranks,
                       AlgorithmImpl* out);

}  // namespace baton
