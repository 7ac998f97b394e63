// --straggle RANK:FACTOR[,...] and --straggle-random P:FACTOR: a rank takes FACTOR times as long
// per step, by sleeping (FACTOR - 1) times its own compute time of the step before, so a
// straggler costs no CPU and the experiment works on 2 cores. The random kind picks each
// (rank, step) with probability P from a generator seeded by --seed, the same on every run.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace trainer {

struct Options;

// "1:4,3:2" -> {{1, 4.0}, {3, 2.0}}; throws TrainError naming the flag.
std::vector<std::pair<int, double>> ParseStraggle(const std::string& flag, const std::string& v);
// "0.1:5" -> {0.1, 5.0}.
std::pair<double, double> ParseStraggleRandom(const std::string& flag, const std::string& v);

class Straggler {
 public:
  Straggler(const Options& options, int rank);
  // Around one step's computation: Before sleeps when this step straggles (from the compute
  // time measured last), After measures it.
  void Before();
  void After();
  bool active() const { return fixed_ > 1 || random_p_ > 0; }
  double slept_s() const { return slept_s_; }
  long straggled_steps() const { return straggled_; }

 private:
  double fixed_ = 1;
  double random_p_ = 0, random_factor_ = 1;
  uint64_t seed_;
  int rank_;
  long step_ = 0;
  double compute_s_ = 0;  // the last step's, without the sleep
  double started_ = 0;
  double slept_s_ = 0;
  long straggled_ = 0;
};

}  // namespace trainer
