#include "tuning/algorithm_filter.h"

namespace baton {
namespace {

// The non-empty, space-trimmed pieces of `s` between separators.
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

// "ring, rhd, ...": every algorithm's name.
std::string AllAlgorithmNames() {
  std::string names;
  for (const char* n : kAlgorithmNames) names += std::string(names.empty() ? "" : ", ") + n;
  return names;
}

// "allreduce, broadcast, ...": every collective's name.
std::string AllCollectiveNames() {
  std::string names;
  for (const char* n : kCollectiveNames) names += std::string(names.empty() ? "" : ", ") + n;
  return names;
}

}  // namespace

Status AlgorithmFilter::Parse(const std::string& spec, AlgorithmFilter* out) {
  AlgorithmFilter f;
  f.spec_ = spec;
  for (const std::string& clause : Split(spec, ';')) {
    Rule rule;
    std::string list = clause;
    size_t colon = clause.find(':');
    if (colon != std::string::npos) {
      std::string coll = clause.substr(0, colon);
      if (!CollectiveFromName(coll.c_str(), &rule.collective))
        return InvalidUsage("BATON_ALGO=" + spec + ": unknown collective '" + coll + "' (" +
                            AllCollectiveNames() + ")");
      rule.scoped = true;
      list = clause.substr(colon + 1);
    }
    if (!list.empty() && list[0] == '^') rule.exclude = true, list.erase(0, 1);
    for (const std::string& name : Split(list, ',')) {
      Algorithm algorithm;
      if (!AlgorithmFromName(name.c_str(), &algorithm))
        return InvalidUsage("BATON_ALGO=" + spec + ": unknown algorithm '" + name + "' (" +
                            AllAlgorithmNames() + ")");
      rule.algorithms.push_back(algorithm);
    }
    f.rules_.push_back(rule);
  }
  *out = std::move(f);
  return Status::Ok();
}

bool AlgorithmFilter::Allows(Collective c, Algorithm a) const {
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

bool AlgorithmFilter::Restricts(Collective c) const {
  for (const Rule& r : rules_)
    if (!r.scoped || r.collective == c) return true;
  return false;
}

Status AlgorithmFilter::Choose(Collective c, const std::vector<Algorithm>& available,
                               Algorithm* out) const {
  for (Algorithm a : available) {
    if (Allows(c, a)) {
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
