#include "straggle.h"

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <thread>

#include "options.h"
#include "util.h"

namespace trainer {
namespace {

double Number(const std::string& flag, const std::string& whole, const std::string& v, double lo,
              double hi) {
  char* end = nullptr;
  errno = 0;
  double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || errno != 0 || !std::isfinite(x) || x < lo || x > hi) {
    throw TrainError(flag + ": '" + whole + "': '" + v + "' is not a number in [" +
                     std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return x;
}

std::pair<std::string, std::string> Halves(const std::string& flag, const std::string& v,
                                           const char* form) {
  size_t colon = v.find(':');
  if (colon == std::string::npos) throw TrainError(flag + ": '" + v + "' is not " + form);
  return {v.substr(0, colon), v.substr(colon + 1)};
}

}  // namespace

std::vector<std::pair<int, double>> ParseStraggle(const std::string& flag, const std::string& v) {
  std::vector<std::pair<int, double>> out;
  size_t start = 0;
  while (start <= v.size()) {
    size_t comma = v.find(',', start);
    std::string part =
        v.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    auto [rank, factor] = Halves(flag, part, "RANK:FACTOR[,RANK:FACTOR...] (e.g. 1:4)");
    const int r = static_cast<int>(Number(flag, v, rank, 0, 1 << 20));
    if (std::to_string(r) != rank) throw TrainError(flag + ": '" + rank + "' is not a rank");
    for (const auto& [seen, f] : out) {
      if (seen == r) throw TrainError(flag + ": rank " + rank + " is given twice");
    }
    out.emplace_back(r, Number(flag, v, factor, 1, 1000));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::pair<double, double> ParseStraggleRandom(const std::string& flag, const std::string& v) {
  auto [p, factor] = Halves(flag, v, "P:FACTOR (e.g. 0.1:5)");
  return {Number(flag, v, p, 0, 1), Number(flag, v, factor, 1, 1000)};
}

Straggler::Straggler(const Options& o, int rank)
    : random_p_(o.straggle_random_p),
      random_factor_(o.straggle_random_factor),
      seed_(o.seed),
      rank_(rank) {
  for (const auto& [r, f] : o.straggle) {
    if (r == rank) fixed_ = f;
  }
}

void Straggler::Before() {
  started_ = NowSeconds();
  double factor = fixed_;
  if (random_p_ > 0) {
    // One draw per (seed, rank, step): the same steps straggle on every run.
    Rng rng(MixSeed(seed_, static_cast<uint64_t>(rank_),
                    0x57a9'0000'0000ULL + static_cast<uint64_t>(step_)));
    if (rng.Uniform() < random_p_) factor = std::max(factor, random_factor_);
  }
  ++step_;
  if (factor <= 1) return;
  ++straggled_;
  // A rank's first step has no measurement yet and sleeps nothing; it still counts, so the
  // steps counted are exactly those chosen.
  const double sleep = (factor - 1) * compute_s_;
  if (sleep > 0) {
    std::this_thread::sleep_for(std::chrono::duration<double>(sleep));
    slept_s_ += sleep;
  }
  started_ = NowSeconds();
}

void Straggler::After() {
  compute_s_ = NowSeconds() - started_;
}

}  // namespace trainer
