#include "tuning/select.h"

#include <cstdint>
#include <cstdio>

#include "algorithms/chain.h"
#include "algorithms/gather_scatter.h"
#include "algorithms/hierarchical.h"
#include "algorithms/pairwise.h"
#include "algorithms/rhd.h"
#include "algorithms/ring.h"
#include "algorithms/tree.h"
#include "base/datatype.h"

namespace baton {
namespace {

// Static tables, so that nothing here allocates per call.
constexpr AlgorithmImpl kAllReduce[] = {
    {Algorithm::kRing, BuildRingAllReduce},
    {Algorithm::kRecursiveHalvingDoubling, BuildRhdAllReduce},
    {Algorithm::kTree, BuildDoubleBinaryTreeAllReduce},
    {Algorithm::kHierarchical, BuildHierarchicalAllReduce}};
constexpr AlgorithmImpl kBroadcast[] = {{Algorithm::kRing, BuildChainBroadcast},
                                        {Algorithm::kTree, BuildDoubleBinaryTreeBroadcast},
                                        {Algorithm::kBinomial, BuildBinomialBroadcast},
                                        {Algorithm::kHierarchical, BuildHierarchicalBroadcast}};
constexpr AlgorithmImpl kReduce[] = {{Algorithm::kRing, BuildChainReduce},
                                     {Algorithm::kTree, BuildDoubleBinaryTreeReduce},
                                     {Algorithm::kBinomial, BuildBinomialReduce},
                                     {Algorithm::kHierarchical, BuildHierarchicalReduce}};
constexpr AlgorithmImpl kAllGather[] = {
    {Algorithm::kRing, BuildRingAllGather},
    {Algorithm::kRecursiveHalvingDoubling, BuildRecursiveDoublingAllGather},
    {Algorithm::kHierarchical, BuildHierarchicalAllGather}};
constexpr AlgorithmImpl kReduceScatter[] = {
    {Algorithm::kRing, BuildRingReduceScatter},
    {Algorithm::kRecursiveHalvingDoubling, BuildRecursiveHalvingReduceScatter}};
constexpr AlgorithmImpl kAlltoAll[] = {{Algorithm::kPairwise, BuildPairwiseAlltoAll}};
constexpr AlgorithmImpl kGather[] = {{Algorithm::kBinomial, BuildBinomialGather},
                                     {Algorithm::kDirect, BuildDirectGather}};
constexpr AlgorithmImpl kScatter[] = {{Algorithm::kBinomial, BuildBinomialScatter},
                                      {Algorithm::kDirect, BuildDirectScatter}};
constexpr AlgorithmImpl kAllGatherV[] = {
    {Algorithm::kRing, BuildRingAllGatherV},
    {Algorithm::kRecursiveHalvingDoubling, BuildRecursiveDoublingAllGatherV}};
constexpr AlgorithmImpl kReduceScatterV[] = {{Algorithm::kRing, BuildRingReduceScatterV}};
constexpr AlgorithmImpl kAlltoAllV[] = {{Algorithm::kPairwise, BuildPairwiseAlltoAllV}};

std::string HumanBytes(size_t bytes) {
  char buf[32];
  if (bytes >= (size_t{1} << 30) && bytes % (size_t{1} << 30) == 0)
    snprintf(buf, sizeof(buf), "%zuG", bytes >> 30);
  else if (bytes >= (size_t{1} << 20) && bytes % (size_t{1} << 20) == 0)
    snprintf(buf, sizeof(buf), "%zuM", bytes >> 20);
  else if (bytes >= 1024 && bytes % 1024 == 0)
    snprintf(buf, sizeof(buf), "%zuK", bytes >> 10);
  else
    snprintf(buf, sizeof(buf), "%zu", bytes);
  return buf;
}

// "\"name\"", or null for a null name. Built by appending: GCC 12 warns
// falsely (-Wrestrict) on "literal" + std::string.
std::string Quoted(const char* name) {
  if (name == nullptr) return "null";
  std::string out = "\"";
  out += name;
  out += '"';
  return out;
}

// "ring chunk 512K", "hier/rhd", "rhd doubling": the chunk only when the
// message exceeds it; for an rhd allreduce the variant that runs.
std::string ChoiceText(Collective collective, const Choice& c, size_t bytes) {
  std::string s = AlgorithmName(c.algorithm);
  if (c.algorithm == Algorithm::kHierarchical) {
    s += '/';
    s += AlgorithmName(c.inter);
  }
  if (collective == Collective::kAllReduce && c.algorithm == Algorithm::kRecursiveHalvingDoubling)
    s += bytes < c.rhd_switch_bytes ? " doubling" : " rabenseifner";
  if (c.chunk_bytes != 0 && c.chunk_bytes < bytes) {
    s += " chunk ";
    s += HumanBytes(c.chunk_bytes);
  }
  return s;
}

}  // namespace

std::span<const AlgorithmImpl> ImplementationsOf(Collective c) {
  switch (c) {
    case Collective::kAllReduce:
      return kAllReduce;
    case Collective::kBroadcast:
      return kBroadcast;
    case Collective::kReduce:
      return kReduce;
    case Collective::kAllGather:
      return kAllGather;
    case Collective::kReduceScatter:
      return kReduceScatter;
    case Collective::kAlltoAll:
      return kAlltoAll;
    case Collective::kGather:
      return kGather;
    case Collective::kScatter:
      return kScatter;
    case Collective::kAllGatherV:
      return kAllGatherV;
    case Collective::kReduceScatterV:
      return kReduceScatterV;
    case Collective::kAlltoAllV:
      return kAlltoAllV;
  }
  return {};
}

void SelectionTable::Build(const CostModel& model, const AlgorithmFilter& filter,
                           size_t fixed_chunk, uint64_t rhd_below) {
  fixed_chunk_ = fixed_chunk;
  rhd_below_ = filter.Restricts(Collective::kAllReduce) ? 0 : rhd_below;
  for (int ci = 0; ci < kNumCollectives; ++ci) {
    const auto c = static_cast<Collective>(ci);
    const auto impls = ImplementationsOf(c);
    // Why nothing may run, for the error of a call that finds no builder.
    std::string allowed_but_invalid, names;
    for (const AlgorithmImpl& impl : impls) {
      names += std::string(names.empty() ? "" : ", ") + AlgorithmName(impl.algorithm);
      if (filter.Allows(c, impl.algorithm) &&
          !model.Predict(c, impl.algorithm, 0, batonFloat32, fixed_chunk).valid)
        allowed_but_invalid += std::string(allowed_but_invalid.empty() ? "" : ", ") +
                               AlgorithmName(impl.algorithm);
    }
    std::string& why = nothing_allowed_[ci];
    why = std::string("BATON_ALGO=") + filter.spec() + " leaves no algorithm for " +
          CollectiveName(c) + " (available: " + names + ")";
    if (!allowed_but_invalid.empty())
      why += "; " + allowed_but_invalid +
             " needs the same number of ranks on every host, which this communicator does not have";
    for (int dt = 0; dt < batonNumTypes; ++dt) {
      const auto datatype = static_cast<batonDataType_t>(dt);
      // Datatypes differ only in the cost of reducing.
      if (dt > 0 && !Reduces(c)) {
        for (int k = 0; k < kSizeClasses; ++k)
          table_[Index(c, datatype, k)] = table_[Index(c, batonInt8, k)];
        continue;
      }
      for (int k = 0; k < kSizeClasses; ++k) {
        Choice best;
        const bool folded = Folded(c, k);
        for (const AlgorithmImpl& impl : impls) {
          if (!filter.Allows(c, impl.algorithm)) continue;
          if (folded && impl.algorithm != Algorithm::kRecursiveHalvingDoubling) continue;
          const Prediction p =
              model.Predict(c, impl.algorithm, ClassBytes(k), datatype, fixed_chunk);
          if (!p.valid) continue;
          // Ties go to the earlier entry (the simpler algorithm).
          if (best.build == nullptr || p.us < best.predicted_us * (1 - 1e-6)) {
            best.build = impl.build;
            best.algorithm = impl.algorithm;
            best.inter = p.inter;
            best.chunk_bytes = static_cast<uint32_t>(p.chunk_bytes);
            best.predicted_us = static_cast<float>(p.us);
            best.rhd_switch_bytes = p.rhd_switch_bytes;
          }
        }
        table_[Index(c, datatype, k)] = best;
      }
    }
  }
}

Status SelectionTable::NothingAllowed(Collective c) const {
  return InvalidUsage(nothing_allowed_[static_cast<int>(c)]);
}

std::vector<std::string> SelectionTable::Describe(const CostModel& model) const {
  std::vector<std::string> lines;
  char buf[160];
  for (int ci = 0; ci < kNumCollectives; ++ci) {
    const auto c = static_cast<Collective>(ci);
    for (int k = SizeClass(8); k <= SizeClass(size_t{1} << 30); ++k) {
      const size_t bytes = ClassBytes(k);
      const Choice& choice = table_[Index(c, batonFloat32, k)];
      std::string line = std::string(CollectiveName(c)) + " " + std::to_string(bytes) + " B:";
      bool first = true;
      for (const AlgorithmImpl& impl : ImplementationsOf(c)) {
        const Prediction p = model.Predict(c, impl.algorithm, bytes, batonFloat32, fixed_chunk_);
        if (!p.valid) continue;
        snprintf(buf, sizeof(buf), "%s %s %.4g us", first ? "" : ",", AlgorithmName(impl.algorithm),
                 p.us);
        line += buf;
        first = false;
      }
      line +=
          " -> " + (choice.build ? ChoiceText(c, choice, bytes) : std::string("none (BATON_ALGO)"));
      if (Folded(c, k)) line += " (folded to a rank per core)";
      for (int dt = 0; dt < batonNumTypes && Reduces(c); ++dt) {
        const Choice& other = table_[Index(c, static_cast<batonDataType_t>(dt), k)];
        if (other.build != choice.build || other.chunk_bytes != choice.chunk_bytes ||
            other.inter != choice.inter)
          line += std::string("; ") + DatatypeName(static_cast<batonDataType_t>(dt)) + ": " +
                  ChoiceText(c, other, bytes);
      }
      lines.push_back(line);
    }
  }
  return lines;
}

std::string SelectionTable::Json(const CostModel& model) const {
  std::string out = "[";
  char buf[96];
  for (int ci = 0; ci < kNumCollectives; ++ci) {
    const auto c = static_cast<Collective>(ci);
    for (int k = SizeClass(8); k <= SizeClass(size_t{1} << 30); ++k) {
      const size_t bytes = ClassBytes(k);
      const Choice& choice = table_[Index(c, batonFloat32, k)];
      if (out.size() > 1) out += ",";
      out += "\n  {\"collective\": \"" + std::string(CollectiveName(c)) +
             "\", \"datatype\": \"float32\", \"bytes\": " + std::to_string(bytes) +
             ", \"algorithm\": ";
      out += Quoted(choice.build ? AlgorithmName(choice.algorithm) : nullptr);
      out += ", \"chunk\": " + std::to_string(choice.chunk_bytes);
      out += ", \"inter\": ";
      out += Quoted(choice.build && choice.algorithm == Algorithm::kHierarchical
                        ? AlgorithmName(choice.inter)
                        : nullptr);
      // An rhd allreduce's switch to Rabenseifner (hier: among the hosts).
      const bool rhd = choice.build && c == Collective::kAllReduce &&
                       (choice.algorithm == Algorithm::kRecursiveHalvingDoubling ||
                        (choice.algorithm == Algorithm::kHierarchical &&
                         choice.inter == Algorithm::kRecursiveHalvingDoubling));
      out += ", \"rhd_switch\": ";
      out += rhd && choice.rhd_switch_bytes != SIZE_MAX ? std::to_string(choice.rhd_switch_bytes)
                                                        : std::string("null");
      snprintf(buf, sizeof(buf), ", \"predicted_us\": %.6g, \"candidates\": {",
               static_cast<double>(choice.predicted_us));
      out += buf;
      bool first = true;
      for (const AlgorithmImpl& impl : ImplementationsOf(c)) {
        const Prediction p = model.Predict(c, impl.algorithm, bytes, batonFloat32, fixed_chunk_);
        if (!p.valid) continue;
        snprintf(buf, sizeof(buf), "%s\"%s\": %.6g", first ? "" : ", ",
                 AlgorithmName(impl.algorithm), p.us);
        out += buf;
        first = false;
      }
      out += "}}";
    }
  }
  return out + "\n]";
}

}  // namespace baton
