#include "layout.h"

#include "data.h"

#include <algorithm>
#include <limits>

namespace trainer {
namespace {

std::string Grid(int dp, int tp, int pp) {
  return "dp " + std::to_string(dp) + " x tp " + std::to_string(tp) + " x pp " + std::to_string(pp);
}

// The dimension a mode grows when the job has more ranks: the others default to 1.
int* FreeDimension(Mode mode, int* dp, int* tp, int* pp) {
  switch (mode) {
    case Mode::kTensor:
      return tp;
    case Mode::kPipeline:
      return pp;
    default:
      return dp;
  }
}

}  // namespace

const char* TpSplitName(TpSplit s) {
  switch (s) {
    case TpSplit::kNone:
      return "whole";
    case TpSplit::kColumn:
      return "column";
    case TpSplit::kRow:
      return "row";
    case TpSplit::kGatheredColumn:
      return "gathered column";
  }
  return "?";
}

TpSplit Layout::SplitOf(int layer) const {
  if (tp == 1) return TpSplit::kNone;
  // Megatron's pairs: a column-parallel layer, then a row-parallel one, so the activation between
  // them stays split and needs no communication. An odd last layer has no row layer after it.
  if (layer % 2 == 1) return TpSplit::kRow;
  return layer == layers - 1 ? TpSplit::kGatheredColumn : TpSplit::kColumn;
}

std::string Layout::Describe() const {
  return Grid(dp, tp, pp);
}

Layout MakeLayout(const Options& o, int world, int rank) {
  Layout l;
  l.layers = static_cast<int>(o.hidden.size()) + 1;
  int dp = o.dp;
  int tp = o.tp;
  int pp = o.pp;
  if (o.simulate) {
    if (world != 1) {
      throw UsageError("--simulate runs every stage in one process: launch one rank, not " +
                       std::to_string(world));
    }
    if (pp == 0) throw UsageError("--simulate needs --stages S");
    dp = tp = 1;
  } else {
    int* free = FreeDimension(o.mode, &dp, &tp, &pp);
    for (int* d : {&dp, &tp, &pp}) {
      if (d != free && *d == 0) *d = 1;
    }
    if (*free == 0) {
      *free = 1;
      const int others = dp * tp * pp;
      if (world % others != 0) {
        *free = 0;
        throw UsageError("the " + std::to_string(world) + " ranks of this job do not divide into " +
                         std::to_string(others) + "-rank parts (" + Grid(dp, tp, pp) +
                         ", the 0 to be filled in): give --dp, --tp and --pp whose product is " +
                         std::to_string(world));
      }
      *free = world / others;
    }
    if (dp * tp * pp != world) {
      throw UsageError("the layout " + Grid(dp, tp, pp) + " needs " + std::to_string(dp * tp * pp) +
                       " ranks; this job has " + std::to_string(world));
    }
  }
  l.dp = dp;
  l.tp = tp;
  l.pp = pp;
  l.tensor = rank % tp;
  l.replica = (rank / tp) % dp;
  l.stage = o.simulate ? 0 : rank / (tp * dp);
  // A schedule orders the forwards and backwards of several stages; one stage has nothing to
  // order, and pipedream's per-micro-batch updates there would quietly replace the gradient
  // accumulation that --micro-batches means with one stage.
  if (o.schedule_set && pp == 1) {
    throw UsageError(std::string("--schedule ") + ScheduleName(o.schedule) +
                     " orders the stages of a pipeline, but the layout " + Grid(dp, tp, pp) +
                     " has one stage: there --micro-batches M accumulates the gradients of M "
                     "micro-batches into one update (drop --schedule); for a pipeline give --pp S "
                     "> 1 (--stages S, or --mode pipeline on S ranks)");
  }
  if (pp > l.layers) {
    throw UsageError(std::to_string(pp) + " pipeline stages but the model has " +
                     std::to_string(l.layers) +
                     " layers: every stage needs at least one (give more --hidden sizes)");
  }
  if (!o.split.empty()) {
    int sum = 0;
    for (int n : o.split) sum += n;
    if (static_cast<int>(o.split.size()) != pp || sum != l.layers) {
      throw UsageError("--split gives " + std::to_string(o.split.size()) + " stage(s) holding " +
                       std::to_string(sum) + " layer(s); this layout has " + std::to_string(pp) +
                       " stage(s) and the model " + std::to_string(l.layers) + " layers");
    }
    l.stage_begin = {0};
    for (int n : o.split) l.stage_begin.push_back(l.stage_begin.back() + n);
  }
  if (l.SplitOf(l.layers - 1) == TpSplit::kGatheredColumn && tp > kClasses) {
    throw UsageError("--tp " + std::to_string(tp) + " is larger than the " +
                     std::to_string(kClasses) + " classes the output layer is split by");
  }
  for (int layer = 0; layer + 1 < l.layers; ++layer) {
    int hidden = o.hidden[static_cast<size_t>(layer)];
    if (l.SplitOf(layer) == TpSplit::kColumn && hidden % tp != 0) {
      throw UsageError("--hidden: " + std::to_string(hidden) +
                       " is not divisible by the tensor group size " + std::to_string(tp) +
                       " (layer " + std::to_string(layer + 1) +
                       "'s outputs are split by columns over the group)");
    }
  }
  return l;
}

void AssignStages(Layout* l, const std::vector<int>& sizes) {
  const int layers = static_cast<int>(sizes.size()) - 1;
  if (l->SplitOf(layers - 1) == TpSplit::kGatheredColumn && l->tp > sizes.back()) {
    throw UsageError("--tp " + std::to_string(l->tp) + " is larger than the " +
                     std::to_string(sizes.back()) + " classes the output layer is split by");
  }
  if (!l->stage_begin.empty()) return;
  // best[s][i]: the smallest largest stage when the first i layers form s stages; cut[s][i] the
  // first layer of the last of them. Ties go to the earliest cut, the same on every rank.
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> cost(static_cast<size_t>(layers) + 1, 0);
  for (int i = 0; i < layers; ++i) {
    cost[i + 1] = cost[i] + static_cast<double>(sizes[i]) * sizes[i + 1];
  }
  const int stages = l->pp;
  std::vector<std::vector<double>> best(stages + 1, std::vector<double>(layers + 1, inf));
  std::vector<std::vector<int>> cut(stages + 1, std::vector<int>(layers + 1, 0));
  best[0][0] = 0;
  for (int s = 1; s <= stages; ++s) {
    for (int i = s; i <= layers; ++i) {
      for (int j = s - 1; j < i; ++j) {
        double v = std::max(best[s - 1][j], cost[i] - cost[j]);
        if (v < best[s][i]) {
          best[s][i] = v;
          cut[s][i] = j;
        }
      }
    }
  }
  l->stage_begin.assign(static_cast<size_t>(stages) + 1, 0);
  int end = layers;
  for (int s = stages; s >= 1; --s) {
    l->stage_begin[s] = end;
    end = cut[s][end];
  }
  l->stage_begin[0] = 0;
}

Groups MakeGroups(batonComm_t world, const Layout& l) {
  Groups g;
  // Every rank makes the same calls in the same order (each split is collective over world).
  auto split = [&](int size, int color, int key, const char* what) {
    if (size == 1) return OwnedComm();
    batonComm_t c = nullptr;
    CheckBaton(batonCommSplit(world, color, key, &c, nullptr), world,
               std::string("batonCommSplit (") + what + " groups)");
    return OwnedComm(c);
  };
  g.tensor = split(l.tp, l.stage * l.dp + l.replica, l.tensor, "tensor");
  g.pipeline = split(l.pp, l.replica * l.tp + l.tensor, l.stage, "pipeline");
  g.data = split(l.dp, l.stage * l.tp + l.tensor, l.replica, "data-parallel");
  return g;
}

}  // namespace trainer
