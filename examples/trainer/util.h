// Small helpers shared by the trainer: errors, a portable random generator, timing, hashing.
#pragma once

#include <baton.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

namespace trainer {

// Any failure the trainer reports and stops on: bad arguments, unreadable data, a failed
// collective. Thrown inside the trainer and caught in main, which prints it once per rank and
// aborts the communicator so every peer stops too; it never escapes main.
class TrainError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A request that cannot work (a layout that does not fit the ranks, sizes that do not divide),
// found by every rank on its own before any training or collective: main exits with status 2,
// as for a bad option.
class UsageError : public TrainError {
 public:
  using TrainError::TrainError;
};

// Owns a communicator made by batonCommSplit (null for a rank outside it): destroyed with it.
class OwnedComm {
 public:
  OwnedComm() = default;
  explicit OwnedComm(batonComm_t c) : comm_(c) {}
  OwnedComm(OwnedComm&& o) noexcept : comm_(o.comm_) { o.comm_ = nullptr; }
  OwnedComm& operator=(OwnedComm&& o) noexcept {
    std::swap(comm_, o.comm_);
    return *this;
  }
  OwnedComm(const OwnedComm&) = delete;
  OwnedComm& operator=(const OwnedComm&) = delete;
  ~OwnedComm() {
    if (comm_ != nullptr) batonCommDestroy(comm_);
  }
  batonComm_t get() const { return comm_; }

 private:
  batonComm_t comm_ = nullptr;
};

// Throws TrainError("WHAT failed: <baton error string>: <last error message>") unless ok.
void CheckBaton(batonResult_t result, batonComm_t comm, const std::string& what);
// batonGroupEnd, checked as CheckBaton does.
inline void GroupEnd(batonComm_t comm, const std::string& what) {
  CheckBaton(batonGroupEnd(), comm, what);
}

// A small, fully specified generator (splitmix64), so the synthetic set, the initial weights and
// the shuffles are the same on every platform and standard library (std::*_distribution are not).
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next();
  // Uniform in [0, 1).
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  // Uniform integer in [0, n).
  uint64_t Below(uint64_t n) { return Next() % n; }
  // Standard normal (Box-Muller).
  double Normal();

 private:
  uint64_t state_;
};

// Mixes several integers into one seed (e.g. seed, epoch, purpose).
uint64_t MixSeed(uint64_t a, uint64_t b, uint64_t c = 0);

// 64-bit FNV-1a over bytes: the replica check compares these across ranks.
uint64_t HashBytes(const void* data, size_t bytes);

// Monotonic seconds.
double NowSeconds();

// Every rank learns the problem of the lowest rank that has one ("" when no rank has one): an
// allreduce finds that rank and a broadcast carries its text, which the others get followed by
// " (reported by rank N)". `what` names the check in a failed call's message.
std::string FirstRankProblem(const std::string& problem, batonComm_t comm, const std::string& what);

// Why `path` cannot be opened for writing (the OS's reason), or "" when it can. Creates nothing
// that stays and truncates nothing: an existing file is opened without truncation, a new one is
// created and removed again.
std::string CannotWrite(const std::string& path);

// BATON_TIMEOUT as the library reads it: 300 s when unset or malformed, 0 = no limit (1e9 here).
// The bound of the trainer's own waits for a peer (a server waiting for a worker, a replacement
// waiting to join), so they end when Baton's collectives would.
double BatonTimeoutSeconds();

}  // namespace trainer
