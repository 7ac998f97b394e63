#include "tuning/algorithm.h"

#include <strings.h>

namespace baton {
namespace {

constexpr struct {
  const char* name;
  Collective value;
} kCollectives[] = {{"allreduce", Collective::kAllReduce},
                    {"broadcast", Collective::kBroadcast},
                    {"reduce", Collective::kReduce},
                    {"allgather", Collective::kAllGather},
                    {"reducescatter", Collective::kReduceScatter},
                    {"alltoall", Collective::kAlltoAll}};

constexpr struct {
  const char* name;
  Algorithm value;
} kAlgorithms[] = {{"ring", Algorithm::kRing},
                   {"rhd", Algorithm::kRecursiveHalvingDoubling},
                   {"tree", Algorithm::kTree},
                   {"binomial", Algorithm::kBinomial},
                   {"pairwise", Algorithm::kPairwise}};

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t end = s.find(sep, pos);
    if (end == std::string::npos) end = s.size();
    std::string tok = s.substr(pos, end - pos);
    while (!tok.empty() && tok.front() == ' ') tok.erase(0, 1);
    while (!tok.empty() && tok.back() == ' ') tok.pop_back();
    if (!tok.empty()) out.push_back(tok);
    pos = end + 1;
  }
  return out;
}

}  // namespace

const char* CollectiveName(Collective c) {
  for (const auto& e : kCollectives)
    if (e.value == c) return e.name;
  return "?";
}

const char* AlgorithmName(Algorithm a) {
  for (const auto& e : kAlgorithms)
    if (e.value == a) return e.name;
  return "?";
}

Status AlgorithmFilter::Parse(const std::string& spec, AlgorithmFilter* out) {
  AlgorithmFilter f;
  f.spec_ = spec;
  for (const std::string& clause : Split(spec, ';')) {
    Rule rule;
    std::string list = clause;
    size_t colon = clause.find(':');
    if (colon != std::string::npos) {
      std::string coll = clause.substr(0, colon);
      bool found = false;
      for (const auto& e : kCollectives)
        if (strcasecmp(coll.c_str(), e.name) == 0) rule.collective = e.value, found = true;
      if (!found)
        return InvalidUsage("BATON_ALGO=" + spec + ": unknown collective '" + coll +
                            "' (allreduce, broadcast, reduce, allgather, reducescatter, alltoall)");
      rule.scoped = true;
      list = clause.substr(colon + 1);
    }
    if (!list.empty() && list[0] == '^') rule.exclude = true, list.erase(0, 1);
    for (const std::string& name : Split(list, ',')) {
      bool found = false;
      for (const auto& e : kAlgorithms)
        if (strcasecmp(name.c_str(), e.name) == 0) rule.algorithms.push_back(e.value), found = true;
      if (!found)
        return InvalidUsage("BATON_ALGO=" + spec + ": unknown algorithm '" + name +
                            "' (ring, rhd, tree, binomial, pairwise)");
    }
    f.rules_.push_back(rule);
  }
  *out = std::move(f);
  return Status::Ok();
}

bool AlgorithmFilter::allows(Collective c, Algorithm a) const {
  // A scoped rule for this collective wins over unscoped ones.
  const Rule* rule = nullptr;
  for (const Rule& r : rules_)
    if (r.scoped && r.collective == c) rule = &r;
  if (!rule)
    for (const Rule& r : rules_)
      if (!r.scoped) rule = &r;
  if (!rule) return true;
  bool listed = false;
  for (Algorithm x : rule->algorithms) listed |= x == a;
  return rule->exclude ? !listed : listed;
}

Status AlgorithmFilter::choose(Collective c, const std::vector<Algorithm>& available,
                               Algorithm* out) const {
  for (Algorithm a : available) {
    if (allows(c, a)) {
      *out = a;
      return Status::Ok();
    }
  }
  std::string names;
  for (Algorithm a : available) names += std::string(names.empty() ? "" : ", ") + AlgorithmName(a);
  return InvalidUsage(std::string("BATON_ALGO=") + spec_ + " leaves no algorithm for " +
                      CollectiveName(c) + " (available: " + names + ")");
}

}  // namespace baton
