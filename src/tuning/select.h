// The selection table: which algorithm (and chunk size, and inter-host
// stage) runs each call, computed once per communicator from the cost model
// for every (collective, datatype, size class) and looked up in O(1) on
// every call, without allocating. BATON_ALGO restricts what the model may
// choose from; BATON_CHUNKSIZE fixes the chunk size.
#pragma once

#include <baton.h>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "algorithms/collective.h"
#include "algorithms/schedule.h"
#include "base/settings.h"
#include "base/status.h"
#include "tuning/algorithm_filter.h"
#include "tuning/cost_model.h"

namespace baton {

// Builds one rank's schedule with one algorithm.
using BuildFn = void (*)(const CollArgs&, Schedule*);

// Whether allreduces on ordinary buffers of ranks that all share one host
// take the copy-in path (comm/copy_in.cc) instead of the table's choice:
// BATON_COPY_IN=1, or by default (-1) where that host runs more ranks than
// cores (the cost model's figure; measured faster only then,
// docs/performance.md) and BATON_ALGO leaves allreduce's algorithm open (a
// forced algorithm runs as asked). The communicator and baton-topo both ask.
inline bool CopyInChosen(int copy_in, bool oversubscribed, const AlgorithmFilter& algorithms) {
  // As CommConfig clamps BATON_COPY_IN: above 0 on, below 0 the default.
  return copy_in > 0 ||
         (copy_in < 0 && oversubscribed && !algorithms.Restricts(Collective::kAllReduce));
}

// The smallest call on registered buffers that reads the peers' buffers in
// place (comm/host_ipc.h) when BATON_REGISTERED_MIN_BYTES is left to the
// machine: the registered path meets the ranks three times per call, about
// 1 us where each rank has a core (faster than the slots from 16-32 KiB);
// where ranks outnumber cores each meeting can cost a context switch, and it
// is faster from 64 KiB (docs/performance.md, "Registered buffers where
// ranks outnumber cores, and where they do not"). The communicator and
// baton-topo both ask.
inline constexpr uint64_t kRegisteredMinBytes = 32 << 10;
inline constexpr uint64_t kRegisteredMinBytesOversubscribed = 64 << 10;
inline uint64_t RegisteredMinBytes(uint64_t setting, bool oversubscribed) {
  if (setting != kSizeFromMachine) return setting;
  return oversubscribed ? kRegisteredMinBytesOversubscribed : kRegisteredMinBytes;
}

// The largest allreduce that runs on the lines (comm/lines.cc) when every
// rank shares memory with every other: BATON_LINES_MAX_BYTES, or by default
// what keeps the peers' bytes a rank reads near a budget, as a power of two
// of at least 512 bytes and at most what the lines hold. Where ranks
// outnumber cores the budget is 128 KiB: each of recursive doubling's
// log2(n) meetings can cost a context switch there, and the lines measured
// 0.6-0.8 of the default's time at 16 KiB on 3, 4 and 8 ranks on 2 cores,
// but 1.3 at 32 KiB on 8 ranks. Where each rank has a core it is 2 KiB (at
// 2 ranks the lines led up to 2 KiB and were level at 4 KiB).
// docs/performance.md, "The lines up to 32 KiB". The communicator and
// baton-topo both ask.
inline constexpr uint64_t kLinesCapacityBytes = 32 << 10;
inline constexpr uint64_t kLinesPeerBytesOversubscribed = 128 << 10;
inline constexpr uint64_t kLinesPeerBytes = 2 << 10;
inline uint64_t LinesMaxBytes(uint64_t setting, bool oversubscribed, int nranks) {
  if (setting != kSizeFromMachine) return std::min(setting, kLinesCapacityBytes);
  const uint64_t peers = static_cast<uint64_t>(std::max(nranks - 1, 1));
  const uint64_t budget = oversubscribed ? kLinesPeerBytesOversubscribed : kLinesPeerBytes;
  return std::clamp<uint64_t>(std::bit_floor(budget / peers), 512, kLinesCapacityBytes);
}

// Below how many bytes an allreduce of ranks that all share one host takes
// recursive halving/doubling, instead of the copy-in path and the table's
// choice (0: none): where the ranks outnumber the cores but the power of
// two rhd folds them to does not (3 ranks on 2 cores, 5-7 on 4), the folded
// ranks wait off their cores while the others exchange, a rank per core.
// Measured 0.73-0.92 of copy-in's time on 3 ranks on 2 cores from 64 KiB
// to 8 MiB, out of place (0.53-0.80 in place), while copy-in led from 12
// MiB (docs/performance.md, "Three ranks on two cores: rhd folds them to
// one per core"): so while the exchanging ranks' inputs and outputs fit the
// last-level cache. The communicator and baton-topo both ask.
inline uint64_t FoldedRhdMaxBytes(int hosts, int nranks, int cores, uint64_t llc_bytes) {
  const int exchanging = static_cast<int>(std::bit_floor(static_cast<unsigned>(nranks)));
  if (hosts != 1 || cores <= 0 || nranks <= cores || exchanging > cores) return 0;
  return llc_bytes / (2 * static_cast<uint64_t>(exchanging));
}

// The smallest allreduce copy-in takes: BATON_COPY_IN_MIN_BYTES, and where
// BATON_COPY_IN is left to the machine (< 0) not below the sizes the table
// gives rhd instead (SelectionTable::rhd_below). The communicator and
// baton-topo both ask.
inline uint64_t CopyInMinBytes(int copy_in, uint64_t setting, uint64_t rhd_below) {
  return copy_in < 0 ? std::max(setting, rhd_below) : setting;
}

// An algorithm that implements a collective, with its builder.
struct AlgorithmImpl {
  Algorithm algorithm;
  BuildFn build;
};

// Every algorithm that implements `c`, with its builder (collective.h's
// Implements table, in enum order).
std::span<const AlgorithmImpl> ImplementationsOf(Collective c);

// What runs one call.
struct Choice {
  BuildFn build = nullptr;  // null: BATON_ALGO left nothing (error in `error`)
  Algorithm algorithm = Algorithm::kRing;
  Algorithm inter = Algorithm::kRing;  // hierarchical: the inter-host stage
  uint32_t chunk_bytes = 0;            // 0: the algorithm does not pipeline
  float predicted_us = 0;
  // Allreduce by rhd, flat or among the hosts: recursive doubling below
  // this many bytes, Rabenseifner from it (the cost model's crossover).
  size_t rhd_switch_bytes = kRhdSmallMessageBytes;
};

// Sets what `choice` decided in the arguments of the call it runs (chunk
// size, inter-host stage, rhd variant): the one path from the table to the
// builders, for calls and for anything replaying their schedules.
inline void ApplyChoice(const Choice& choice, CollArgs* args) {
  if (choice.chunk_bytes != 0) args->chunk_bytes = choice.chunk_bytes;
  args->inter_host = choice.inter;
  args->rhd_switch_bytes = choice.rhd_switch_bytes;
}

class SelectionTable {
 public:
  // Size classes: 0 bytes, then [2^k, 2^(k+1)) for k = 0 .. kMaxLog2 - 1,
  // and everything from 2^kMaxLog2 up. A class is decided at its lower end.
  static constexpr int kMaxLog2 = 40;
  static constexpr int kSizeClasses = kMaxLog2 + 2;

  // Fills the table from `model`, among the algorithms `filter` allows;
  // `fixed_chunk` > 0 is used instead of the model's chunk choice. Allreduce
  // takes rhd below `rhd_below` bytes (FoldedRhdMaxBytes) where `filter`
  // leaves its algorithm open.
  void Build(const CostModel& model, const AlgorithmFilter& filter, size_t fixed_chunk,
             uint64_t rhd_below = 0);

  // Below how many bytes allreduce takes rhd whatever the model says (0:
  // nowhere): Build's `rhd_below`, or 0 where the filter chose allreduce's
  // algorithm.
  uint64_t rhd_below() const { return rhd_below_; }

  // The choice for a call moving `bytes` (CountIsPerRank collectives: all
  // nranks blocks).
  const Choice& Lookup(Collective c, batonDataType_t datatype, size_t bytes) const {
    return table_[Index(c, datatype, SizeClass(bytes))];
  }
  // batonInvalidUsage naming what BATON_ALGO asked for, when Lookup gave no
  // builder for `c`.
  Status NothingAllowed(Collective c) const;

  // The TUNING log: one line per collective and size from 8 B to 1 GiB
  // (float), the predicted time of every candidate and the choice; other
  // datatypes only where their choice differs.
  std::vector<std::string> Describe(const CostModel& model) const;
  // The same as a JSON array of {"collective", "datatype", "bytes",
  // "algorithm", "chunk", "inter", "rhd_switch" (an rhd allreduce's switch
  // to Rabenseifner, else null), "predicted_us", "candidates": {...}}.
  std::string Json(const CostModel& model) const;

  static int SizeClass(size_t bytes) {
    if (bytes == 0) return 0;
    const int log2 = 63 - __builtin_clzll(bytes);
    return 1 + (log2 < kMaxLog2 ? log2 : kMaxLog2);
  }
  // The size a class is decided at.
  static size_t ClassBytes(int size_class) {
    return size_class == 0 ? 0 : size_t{1} << (size_class - 1);
  }

 private:
  // Whether FoldedRhdMaxBytes decides size class `k` of `c`.
  bool Folded(Collective c, int k) const {
    return c == Collective::kAllReduce && k > 0 && ClassBytes(k) < rhd_below_;
  }
  static int Index(Collective c, batonDataType_t datatype, int size_class) {
    const int dt = static_cast<int>(datatype);
    return (static_cast<int>(c) * batonNumTypes + (dt >= 0 && dt < batonNumTypes ? dt : 0)) *
               kSizeClasses +
           size_class;
  }

  std::vector<Choice> table_ =
      std::vector<Choice>(static_cast<size_t>(kNumCollectives) * batonNumTypes * kSizeClasses);
  std::string nothing_allowed_[kNumCollectives];
  size_t fixed_chunk_ = 0;
  uint64_t rhd_below_ = 0;
};

}  // namespace baton
