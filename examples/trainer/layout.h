// The layout of the model-parallel modes (--mode tensor|pipeline|hybrid): the job's ranks as a
// dp x tp x pp grid, the layers of each pipeline stage, how each layer is split over a tensor
// group, and the three kinds of group as communicators (batonCommSplit).
//
// Rank order, Megatron-LM's: the tensor index varies fastest, then the replica, then the stage,
// rank = (stage * dp + replica) * tp + tensor index, so a tensor group is consecutive ranks (in
// Megatron, the GPUs of one NVLink domain). Every rank computes the same layout from the options
// and the rank count, so checks fail on every rank alike, before any collective.
#pragma once

#include <baton.h>

#include <string>
#include <vector>

#include "options.h"
#include "util.h"

namespace trainer {

// How a layer's weights are divided over the tensor group (Megatron-LM; W is [out x in], the
// layer computes X W^T + b).
enum class TpSplit {
  kNone,    // the whole layer on every rank (tensor group of one)
  kColumn,  // ColumnParallelLinear: each rank holds out/T outputs (rows of W) and their bias; the
            // input is whole, the output stays split (the next layer is a kRow)
  kRow,     // RowParallelLinear: each rank holds in/T inputs (columns of W), takes the matching
            // part of the input and makes a partial sum of the output, allreduced; the bias is
            // whole on every rank and added after the sum
  kGatheredColumn,  // the model's last layer when it has no kRow after it: a kColumn split by
                    // classes (unequal parts allowed) whose logits are allgathered
};

const char* TpSplitName(TpSplit s);

struct Layout {
  int dp = 1;
  int tp = 1;
  int pp = 1;
  // This rank's coordinates.
  int replica = 0;
  int tensor = 0;
  int stage = 0;
  int layers = 0;                // of the whole model
  std::vector<int> stage_begin;  // pp + 1 entries: stage s holds [stage_begin[s], stage_begin[s+1])

  int RankOf(int replica, int tensor, int stage) const {
    return (stage * dp + replica) * tp + tensor;
  }
  TpSplit SplitOf(int layer) const;
  // "dp 2 x tp 1 x pp 2".
  std::string Describe() const;
};

// The layout for these options on `world` ranks, stages not yet assigned when --split is not
// given (AssignStages does it once the layer sizes are known). Throws UsageError naming the
// problem: a grid that does not fit the ranks, more stages than layers, a --split of the wrong
// length or sum, a hidden size that a column split does not divide.
Layout MakeLayout(const Options& o, int world, int rank);

// Without --split, cuts the layers into pp contiguous stages with the smallest largest stage,
// counting in x out multiply-adds per layer (forward and backward both scale with it). sizes:
// the model's layer sizes (784, hidden..., 10). Throws UsageError when the tensor group is
// larger than the classes a gathered output layer is split by.
void AssignStages(Layout* layout, const std::vector<int>& sizes);

// The communicators of this rank's groups; null where a group would have one rank (no traffic).
struct Groups {
  OwnedComm tensor;    // same replica and stage; rank = tensor index
  OwnedComm pipeline;  // same replica and tensor index; rank = stage
  OwnedComm data;      // same tensor index and stage; rank = replica
};

// Splits `world` into the three groups (collective over world: every rank calls it).
Groups MakeGroups(batonComm_t world, const Layout& layout);

}  // namespace trainer
