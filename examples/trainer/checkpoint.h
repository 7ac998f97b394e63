// The training state on disk: enough to continue a run exactly where it stopped.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trainer {

// Everything a resumed run needs to reproduce the uninterrupted one bit for bit: the data order
// is a function of (seed, epoch) and the learning rate of the global step, so with parameters,
// momentum and the EMA restored, the next epoch computes exactly what it would have.
struct Checkpoint {
  std::string mode;  // "sync", "ps", "ps-async", "local"; "/adam" etc. after it for --optimizer
  std::vector<int> sizes;  // layer sizes, e.g. 784,512,256,10
  uint64_t seed = 0;
  int64_t epochs_done = 0;
  int64_t global_step = 0;
  std::vector<float> params;
  std::vector<float> momentum;  // the optimizer's state (adam, lamb: m then v)
  std::vector<float> ema;       // empty without --ema
  // The model's state beside its parameters (batch norm's running statistics); written only
  // when not empty, so an MLP's file is as before.
  std::vector<float> model_state;
};

// Writes FILE.tmp, then renames it over FILE (a crash never leaves half a checkpoint).
void WriteCheckpoint(const std::string& path, const Checkpoint& c);
// Throws TrainError for a missing, foreign, truncated or inconsistent file.
Checkpoint ReadCheckpoint(const std::string& path);

}  // namespace trainer
