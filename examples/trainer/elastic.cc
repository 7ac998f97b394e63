#include "elastic.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>

#include "util.h"

namespace trainer {
namespace {

// BATON_ELASTIC_DIR, set by batonrun --elastic ("" without).
std::string ElasticDir() {
  const char* v = std::getenv("BATON_ELASTIC_DIR");
  return v != nullptr ? v : "";
}

}  // namespace

EpochPlan FirstPlan(int epoch, std::vector<uint32_t> order, int parts, int batch, long max_steps) {
  EpochPlan plan;
  plan.epoch = epoch;
  plan.pending = std::move(order);
  plan.parts = parts;
  plan.steps = StepsPerEpoch(plan.pending.size(), parts, batch, max_steps);
  return plan;
}

long StepsPerEpoch(size_t samples, int parts, int batch, long max_steps) {
  long steps = static_cast<long>(samples / static_cast<size_t>(parts) / static_cast<size_t>(batch));
  return max_steps > 0 ? std::min(steps, max_steps) : steps;
}

EpochPlan Replan(const EpochPlan& plan, int parts, int batch, long max_steps) {
  EpochPlan next;
  next.epoch = plan.epoch;
  next.parts = parts;
  next.finished = plan.finished;
  next.steps_before = plan.steps_before + plan.step;
  next.samples_before = plan.SamplesDone(batch);
  // A complete plan leaves only the remainders it dropped: nothing more to train this epoch.
  if (plan.step < plan.steps) {
    const size_t per = plan.per();
    for (int p = 0; p < plan.parts; ++p) {
      const size_t begin = per * static_cast<size_t>(p) +
                           static_cast<size_t>(plan.step) * static_cast<size_t>(batch);
      const size_t end = per * static_cast<size_t>(p + 1);
      next.pending.insert(next.pending.end(), plan.pending.begin() + static_cast<long>(begin),
                          plan.pending.begin() + static_cast<long>(end));
    }
  }
  next.steps = StepsPerEpoch(next.pending.size(), parts, batch, 0);
  if (max_steps > 0) next.steps = std::max(0L, std::min(next.steps, max_steps - next.steps_before));
  return next;
}

long TotalSteps(const RunContext& run, const EpochPlan& plan, long global_step, int parts) {
  const long per_epoch =
      StepsPerEpoch(run.data.train.count, parts, StepBatch(run.opt), run.opt.max_steps);
  return global_step + (plan.steps - plan.step) +
         static_cast<long>(run.opt.epochs - plan.epoch - 1) * per_epoch;
}

std::string RanksWords(const std::vector<int>& ranks) {
  std::string words = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) words += (i > 0 ? ", " : "") + std::to_string(ranks[i]);
  return words;
}

Elastic::Elastic(RunContext& run)
    : run_(run), enabled_(run.opt.elastic), desk_(run.opt.elastic ? ElasticDir() : "") {}

void Elastic::Adopt(batonComm_t comm) {
  run_.comm = comm;
  CheckBaton(batonCommUserRank(comm, &run_.rank), comm, "batonCommUserRank");
  CheckBaton(batonCommCount(comm, &run_.world), comm, "batonCommCount");
  run_.MembershipChanged();
}

std::vector<int> Elastic::Shrink(const TrainError& error, int* world_before,
                                 const std::function<void(int lost)>& refuse) {
  // `throw;` rethrows what was caught as it was (a UsageError stays one).
  if (!enabled_) throw;
  batonResult_t state = batonSuccess;
  // Only a communicator that failed has lost someone; a rank's own error (data, a usage error)
  // ends the job as without --elastic.
  if (batonCommGetAsyncError(run_.comm, &state) != batonSuccess || state == batonSuccess ||
      state == batonInvalidUsage || state == batonInvalidArgument) {
    throw;
  }
  // The ranks Baton knows to be gone (docs/reliability.md, "Which ranks failed"): the same list
  // on every survivor once the lost processes are gone, which batonCommShrink needs. Processes
  // killed together finish exiting some milliseconds apart, and the list grows as they do: read
  // it until it has not grown for kSettleS (at most kSettleMaxS), so that every survivor reads
  // the whole of it.
  constexpr double kSettleS = 0.1, kSettleMaxS = 2.0;
  std::vector<int> lost;
  const double asked = NowSeconds();
  double grew = asked;
  for (;;) {
    int count = 0;
    std::vector<int> now(static_cast<size_t>(run_.world));
    CheckBaton(batonCommGetFailedRanks(run_.comm, now.data(), run_.world, &count), run_.comm,
               "batonCommGetFailedRanks");
    now.resize(static_cast<size_t>(std::min(count, run_.world)));
    if (now.size() > lost.size()) {
      lost = std::move(now);
      grew = NowSeconds();
    }
    const double t = NowSeconds();
    if (t - grew >= kSettleS || t - asked >= kSettleMaxS) break;
    usleep(20000);
  }
  if (lost.empty()) {
    throw TrainError(std::string(error.what()) +
                     " (--elastic: no rank of the communicator failed, so there is none to leave "
                     "out, and the job stops)");
  }
  if (refuse)
    for (int r : lost) refuse(r);
  *world_before = run_.world;
  batonComm_t shrunk = nullptr;
  const double t0 = NowSeconds();
  const batonResult_t r = batonCommShrink(run_.comm, lost.data(), static_cast<int>(lost.size()),
                                          &shrunk, nullptr, BATON_SHRINK_ABORT);
  change_s_ = NowSeconds() - t0;
  if (r != batonSuccess) {
    throw TrainError("--elastic: lost " + RanksWords(lost) + " (" + error.what() +
                     "), and batonCommShrink failed: " + batonGetErrorString(r) + ": " +
                     batonGetLastError(run_.comm));
  }
  // Its queued work (a host stream's) failed already; abort ends it at once.
  batonCommAbort(run_.comm);
  Adopt(shrunk);
  return lost;
}

int Elastic::MaybeGrow() {
  if (!enabled_ || !desk_.open()) return 0;
  std::vector<pid_t> asking;
  if (run_.rank == 0) asking = desk_.Requests();
  int joining = static_cast<int>(asking.size());
  CheckBaton(batonBroadcast(&joining, &joining, 1, batonInt32, 0, run_.comm, nullptr), run_.comm,
             "join check broadcast");
  if (joining == 0) return 0;
  const int nranks = run_.world + joining;
  const double t0 = NowSeconds();
  batonUniqueId id;
  if (run_.rank == 0) {
    CheckBaton(batonCommGetUniqueId(run_.comm, &id), run_.comm, "batonCommGetUniqueId");
    desk_.Grant(asking, id, nranks, run_.world);
  }
  batonComm_t grown = nullptr;
  const batonResult_t r =
      batonCommGrow(run_.comm, nranks, run_.rank == 0 ? &id : nullptr, -1, &grown, nullptr);
  change_s_ = NowSeconds() - t0;
  if (r == batonTimeout) {
    // A replacement that asked and then never came: the communicator is as it was.
    if (run_.rank == 0) {
      std::printf("elastic: %d replacement(s) did not join (%s); going on with %d ranks\n", joining,
                  batonGetLastError(run_.comm), run_.world);
      std::fflush(stdout);
    }
    return 0;
  }
  CheckBaton(r, run_.comm, "batonCommGrow");
  batonCommDestroy(run_.comm);
  Adopt(grown);
  return joining;
}

void Elastic::CloseDesk() {
  if (enabled_ && run_.rank == 0) desk_.CloseDesk();
}

int Elastic::AgreeOnRoot(long step, long epoch_key, bool take_max, long* agreed_step) {
  int64_t v[2] = {take_max ? step : -step, -epoch_key};
  CheckBaton(batonAllReduce(v, v, 2, batonInt64, batonMax, run_.comm, nullptr), run_.comm,
             "progress allreduce");
  *agreed_step = take_max ? v[0] : -v[0];
  const int64_t key = -v[1];
  int64_t candidate = step == *agreed_step && epoch_key == key ? run_.rank : INT64_MAX;
  CheckBaton(batonAllReduce(&candidate, &candidate, 1, batonInt64, batonMin, run_.comm, nullptr),
             run_.comm, "progress allreduce");
  if (candidate == INT64_MAX) throw TrainError("--elastic: the ranks' progress does not agree");
  return static_cast<int>(candidate);
}

void SharePlan(RunContext& run, int root, EpochPlan* plan) {
  int64_t header[8] = {plan->epoch,
                       plan->parts,
                       plan->step,
                       plan->steps,
                       plan->steps_before,
                       plan->samples_before,
                       plan->finished ? 1 : 0,
                       static_cast<int64_t>(plan->pending.size())};
  CheckBaton(batonBroadcast(header, header, 8, batonInt64, root, run.comm, nullptr), run.comm,
             "plan broadcast");
  int64_t step = run.global_step;
  CheckBaton(batonBroadcast(&step, &step, 1, batonInt64, root, run.comm, nullptr), run.comm,
             "step broadcast");
  run.global_step = step;
  plan->epoch = static_cast<int>(header[0]);
  plan->parts = static_cast<int>(header[1]);
  plan->step = header[2];
  plan->steps = header[3];
  plan->steps_before = header[4];
  plan->samples_before = header[5];
  plan->finished = header[6] != 0;
  plan->pending.resize(static_cast<size_t>(header[7]));
  CheckBaton(batonBroadcast(plan->pending.data(), plan->pending.data(), plan->pending.size(),
                            batonUint32, root, run.comm, nullptr),
             run.comm, "plan broadcast");
}

batonComm_t JoinRunningJob() {
  const std::string dir = ElasticDir();
  if (dir.empty()) {
    throw TrainError(
        "BATON_ELASTIC_JOIN is set but BATON_ELASTIC_DIR is not: a replacement is started by "
        "batonrun --elastic --replace");
  }
  const JoinGrant grant = AskToJoin(dir, BatonTimeoutSeconds());
  if (grant.finished) return nullptr;
  batonComm_t comm = nullptr;
  CheckBaton(batonCommGrow(nullptr, grant.nranks, &grant.id, grant.rank, &comm, nullptr), nullptr,
             "batonCommGrow (joining as rank " + std::to_string(grant.rank) + " of " +
                 std::to_string(grant.nranks) + ")");
  return comm;
}

}  // namespace trainer
