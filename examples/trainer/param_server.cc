// --mode ps: a parameter server built from batonSend/batonRecv, sharded over --ps-shards server
// ranks (ps_layout.h); the other ranks are workers that compute gradients on disjoint shards of
// the data. This file: the layout's helpers and the synchronous server; --async is in
// param_server_async.cc.
//
// Synchronous: every step, each server receives its range of every worker's gradient (one group
// of receives), averages them in worker order, updates its range and sends it back to every
// worker (one group of sends); a worker sends each server its range (one group) and receives the
// ranges back (one group). The per-element arithmetic is the unsharded server's, so any K gives
// the same parameters as K = 1 (tests/scripts/trainer_test.sh checks it bit for bit).
//
// --elastic (elastic.h): a lost worker is left out (batonCommShrink); servers that already
// applied the step it broke roll their range back to the snapshot taken before it (a step is
// complete only once every server has applied it), the workers' plan is re-cut over the workers
// left, and a replacement joins as a worker. A lost server takes its range of the parameters
// with it: the job stops, saying so.
//
// Device backends: the server's groups and the worker's calls take the device buffers directly
// (Baton stages a group of device calls together, docs/cuda.md).
#include <baton.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "elastic.h"
#include "ps_layout.h"
#include "util.h"

namespace trainer {

PsLayout MakePsLayout(const TrainingRun& run) {
  PsLayout ps;
  ps.servers = run.opt.ps_shards;
  ps.workers = run.world - ps.servers;
  ps.params = run.model.parameter_count();
  if (ps.workers < 1) {
    throw UsageError("--mode ps with " + std::to_string(ps.servers) + " server(s) needs at least " +
                     std::to_string(ps.servers + 1) + " ranks (ranks 0.." +
                     std::to_string(ps.servers - 1) + " serve, the others work); this job has " +
                     std::to_string(run.world));
  }
  return ps;
}

void ShareShards(TrainingRun& run, const PsLayout& ps, float* buf, const char* what) {
  run.backend.Synchronize();
  for (int s = 0; s < ps.servers; ++s) {
    CheckBaton(batonBroadcast(buf + ps.begin(s), buf + ps.begin(s), ps.size(s), batonFloat, s,
                              run.comm, nullptr),
               run.comm, what);
  }
}

WorkerComms SplitPerWorker(TrainingRun& run, const PsLayout& ps) {
  WorkerComms comms;
  const bool server_rank = ps.is_server(run.rank);
  for (int w = 0; w < ps.workers; ++w) {
    const bool member = server_rank || run.rank == ps.worker_rank(w);
    batonComm_t c = nullptr;
    CheckBaton(batonCommSplit(run.comm, member ? 0 : BATON_SPLIT_NOCOLOR, run.rank, &c, nullptr),
               run.comm, "batonCommSplit for worker rank " + std::to_string(ps.worker_rank(w)));
    if (server_rank) {
      comms.per_worker.emplace_back(c);
    } else if (member) {
      comms.mine = OwnedComm(c);
    }
  }
  return comms;
}

EpochExtras PsTraffic(TrainingRun& run, double bytes_sent, long steps) {
  double sent[2] = {steps > 0 ? bytes_sent / static_cast<double>(steps) : 0, 0};
  sent[1] = sent[0];
  CheckBaton(batonAllReduce(&sent[0], &sent[0], 1, batonDouble, batonSum, run.comm, nullptr),
             run.comm, "traffic allreduce");
  CheckBaton(batonAllReduce(&sent[1], &sent[1], 1, batonDouble, batonMax, run.comm, nullptr),
             run.comm, "traffic allreduce");
  EpochExtras e;
  e.traffic = true;
  e.sent_per_step = sent[0] / run.world;
  e.sent_per_step_max = sent[1];
  return e;
}

namespace {

class SyncServer {
 public:
  explicit SyncServer(TrainingRun& run) : run_(run), elastic_(run), ps_(MakePsLayout(run)) {}

  void Train();

 private:
  bool server() const { return ps_.is_server(run_.rank); }
  // This server's range.
  size_t b() const { return ps_.begin(run_.rank); }
  size_t e() const { return ps_.end(run_.rank); }
  void SizeInbox();
  bool NextEpoch();
  void ServerStep();
  void WorkerStep();
  void FinishEpoch();
  void Resync(int root);
  void AfterLoss(const TrainError& error);
  void AfterGrow(int joined);
  void PrintLayout();

  TrainingRun& run_;
  Elastic elastic_;
  PsLayout ps_;
  std::vector<Buffer> inbox_;  // a server's: each worker's gradient range
  // --elastic, a server's: its range before the step being applied (see Resync).
  Buffer snapshot_params_, snapshot_momentum_, snapshot_ema_;
  EpochPlan plan_;
  EpochStats stats_;
  double epoch_start_ = 0;
  double bytes_sent_ = 0;  // this epoch
  long steps_this_epoch_ = 0;
  float lr_ = 0;
};

void SyncServer::SizeInbox() {
  if (!server()) return;
  inbox_.clear();
  for (int w = 0; w < ps_.workers; ++w) inbox_.push_back(run_.backend.Allocate(e() - b()));
  if (run_.opt.elastic && snapshot_params_.size() == 0) {
    snapshot_params_ = run_.backend.Allocate(e() - b());
    snapshot_momentum_ = run_.backend.Allocate(e() - b());
    if (run_.ema) snapshot_ema_ = run_.backend.Allocate(e() - b());
  }
}

bool SyncServer::NextEpoch() {
  const int epoch = plan_.epoch + 1;
  if (epoch >= run_.LastEpoch()) return false;
  plan_ = FirstPlan(epoch, run_.EpochOrder(epoch), ps_.workers, StepBatch(run_.opt),
                    run_.opt.max_steps);
  if (plan_.steps == 0) throw TrainError("too few samples for this many workers and --batch");
  stats_ = EpochStats{};
  epoch_start_ = NowSeconds();
  bytes_sent_ = 0;
  steps_this_epoch_ = 0;
  return true;
}

void SyncServer::ServerStep() {
  const size_t n = e() - b();
  batonComm_t comm = run_.comm;
  batonGroupStart();
  for (int w = 0; w < ps_.workers; ++w) {
    CheckBaton(batonRecv(inbox_[w].data(), n, batonFloat, ps_.worker_rank(w), comm, nullptr), comm,
               "gradient receive");
  }
  GroupEnd(comm, "gradient receive from the workers");
  if (run_.opt.elastic) {
    run_.backend.Copy(snapshot_params_.data(), run_.model.params() + b(), n);
    run_.backend.Copy(snapshot_momentum_.data(), run_.optimizer.state() + b(), n);
    if (run_.ema) run_.backend.Copy(snapshot_ema_.data(), run_.ema->data() + b(), n);
  }
  float* g = run_.model.grads() + b();
  run_.backend.Copy(g, inbox_[0].data(), n);
  for (int w = 1; w < ps_.workers; ++w) run_.backend.Add(g, inbox_[w].data(), n);
  run_.backend.Scale(g, n, 1.0f / static_cast<float>(ps_.workers));
  lr_ = run_.LearningRate(run_.global_step, ps_.workers);
  run_.optimizer.StepRange(run_.model.params(), run_.model.grads(), lr_, b(), e());
  if (run_.ema) run_.ema->UpdateRange(run_.model.params(), b(), e());
  // Applied: the step counts as this server's even if a send below fails (see Resync).
  ++run_.global_step;
  ++plan_.step;
  run_.backend.Synchronize();
  batonGroupStart();
  for (int w = 0; w < ps_.workers; ++w) {
    CheckBaton(
        batonSend(run_.model.params() + b(), n, batonFloat, ps_.worker_rank(w), comm, nullptr),
        comm, "parameter send");
  }
  GroupEnd(comm, "parameter send to the workers");
  bytes_sent_ += static_cast<double>(ps_.workers) * static_cast<double>(n) * sizeof(float);
}

void SyncServer::WorkerStep() {
  batonComm_t comm = run_.comm;
  double t0 = NowSeconds();
  BatchStats batch = run_.ComputeGradient(
      plan_.pending, plan_.PartShard(ps_.worker_index(run_.rank)), plan_.step, nullptr);
  run_.backend.Synchronize();
  double c0 = NowSeconds();
  batonGroupStart();
  for (int s = 0; s < ps_.servers; ++s) {
    CheckBaton(
        batonSend(run_.model.grads() + ps_.begin(s), ps_.size(s), batonFloat, s, comm, nullptr),
        comm, "gradient send to the server");
  }
  GroupEnd(comm, "gradient push to the servers");
  batonGroupStart();
  for (int s = 0; s < ps_.servers; ++s) {
    CheckBaton(
        batonRecv(run_.model.params() + ps_.begin(s), ps_.size(s), batonFloat, s, comm, nullptr),
        comm, "parameter receive from the server");
  }
  GroupEnd(comm, "parameter pull from the servers");
  double t1 = NowSeconds();
  bytes_sent_ += static_cast<double>(ps_.params) * sizeof(float);
  stats_.comm_wait_s += t1 - c0;
  stats_.step_s += t1 - t0;
  stats_.loss_sum += batch.loss_sum;
  stats_.correct += batch.correct;
  stats_.samples += batch.samples;
  lr_ = run_.LearningRate(run_.global_step, ps_.workers);
  ++run_.global_step;
  ++plan_.step;
}

void SyncServer::FinishEpoch() {
  double wall = NowSeconds() - epoch_start_;
  // A server holds its own range only; everyone takes everyone's for evaluation (with one
  // server, rank 0 has all of it, and the workers have the parameters they pulled last).
  if (ps_.servers > 1) ShareShards(run_, ps_, run_.model.params(), "parameter broadcast");
  if (run_.ema) ShareShards(run_, ps_, run_.ema->data(), "EMA broadcast");
  if (ps_.servers > 1 && !run_.opt.checkpoint.empty())
    for (int p = 0; p < run_.optimizer.parts(); ++p) {
      ShareShards(run_, ps_, run_.optimizer.state() + p * ps_.params, "optimizer broadcast");
    }
  if (run_.opt.check_replicas && ps_.servers > 1) run_.CheckReplicas("at the end of the epoch");
  const EpochExtras traffic = PsTraffic(run_, bytes_sent_, steps_this_epoch_);
  run_.FinishEpoch(plan_.epoch, stats_, wall, lr_, plan_.SamplesDone(StepBatch(run_.opt)), traffic);
}

// Everyone takes root's plan and step; the servers' ranges are what they hold (rolled back when
// ahead), shared so that every worker has the parameters of that step.
void SyncServer::Resync(int root) {
  const long mine = run_.global_step;
  SharePlan(run_, root, &plan_);
  if (server() && mine > run_.global_step) {
    if (!run_.opt.elastic || mine != run_.global_step + 1) {
      throw TrainError("internal: server " + std::to_string(run_.rank) + " is " +
                       std::to_string(mine - run_.global_step) + " steps ahead");
    }
    const size_t n = e() - b();
    run_.backend.Copy(run_.model.params() + b(), snapshot_params_.data(), n);
    run_.backend.Copy(run_.optimizer.state() + b(), snapshot_momentum_.data(), n);
    if (run_.ema) run_.backend.Copy(run_.ema->data() + b(), snapshot_ema_.data(), n);
  }
  ShareShards(run_, ps_, run_.model.params(), "parameter broadcast");
  if (run_.world <= ps_.servers) throw TrainError("--elastic: no worker is left");
  ps_ = MakePsLayout(run_);
  plan_ = Replan(plan_, ps_.workers, StepBatch(run_.opt), run_.opt.max_steps);
  run_.total_steps = TotalSteps(run_, plan_, run_.global_step, ps_.workers);
  SizeInbox();
}

void SyncServer::AfterLoss(const TrainError& error) {
  const double t0 = NowSeconds();
  int world_before = 0;
  const int servers = ps_.servers;
  const std::vector<int> lost = elastic_.Shrink(error, &world_before, [&](int rank) {
    if (rank < servers) {
      throw TrainError(std::string(error.what()) + " (--elastic: lost rank " +
                       std::to_string(rank) +
                       ", a parameter server, and its range of the "
                       "parameters with it; elastic training survives lost workers only)");
    }
  });
  const long during = run_.global_step + 1;
  long agreed = 0;
  // A step is complete once every server has applied it: the least advanced rank leads.
  const int root = elastic_.AgreeOnRoot(
      run_.global_step, 2L * plan_.epoch + (plan_.finished ? 1 : 0), false, &agreed);
  Resync(root);
  if (run_.rank == 0) {
    std::printf(
        "elastic: lost worker %s of %d during step %ld (epoch %d): %s\n"
        "elastic: %d workers go on after step %ld: %ld steps left in epoch %d, lr %.4g for a "
        "global batch of %d; recovered in %.1f ms (shrink %.1f ms)\n",
        RanksWords(lost).c_str(), world_before, during, plan_.epoch + 1, error.what(), ps_.workers,
        run_.global_step, plan_.steps, plan_.epoch + 1,
        run_.LearningRate(run_.global_step, ps_.workers), ps_.workers * StepBatch(run_.opt),
        1e3 * (NowSeconds() - t0), 1e3 * elastic_.change_s());
    std::fflush(stdout);
  }
}

void SyncServer::AfterGrow(int joined) {
  const double t0 = NowSeconds();
  Resync(0);
  if (run_.rank == 0) {
    std::printf(
        "elastic: %d worker(s) joined after step %ld (epoch %d): %d workers, lr %.4g; grow %.1f "
        "ms, state %.1f ms\n",
        joined, run_.global_step, plan_.epoch + 1, ps_.workers,
        run_.LearningRate(run_.global_step, ps_.workers), 1e3 * elastic_.change_s(),
        1e3 * (NowSeconds() - t0));
    std::fflush(stdout);
  }
}

void SyncServer::PrintLayout() {
  if (run_.rank != 0 || run_.joined) return;
  const double n_mb = static_cast<double>(ps_.params) * sizeof(float) / 1e6;
  std::printf(
      "parameter server: %d server(s), ranks 0-%d, each owning %zu of the %zu parameters; %d "
      "worker(s); a step sends %.3f MB per worker and %.3f MB per server\n",
      ps_.servers, ps_.servers - 1, ps_.size(0), ps_.params, ps_.workers, n_mb,
      n_mb * ps_.workers * static_cast<double>(ps_.size(0)) / static_cast<double>(ps_.params));
  std::fflush(stdout);
}

void SyncServer::Train() {
  SizeInbox();
  PrintLayout();
  run_.total_steps =
      StepsPerEpoch(run_.data.train.count, ps_.workers, StepBatch(run_.opt), run_.opt.max_steps) *
      run_.opt.epochs;
  plan_.epoch = run_.start_epoch - 1;
  plan_.finished = true;
  if (run_.joined) {
    epoch_start_ = NowSeconds();
    Resync(0);
  }
  for (;;) {
    try {
      if (plan_.finished && !NextEpoch()) break;
      while (plan_.step < plan_.steps) {
        if (const int joined = elastic_.MaybeGrow(); joined > 0) {
          AfterGrow(joined);
          continue;
        }
        if (server()) {
          ServerStep();
        } else {
          WorkerStep();
        }
        ++steps_this_epoch_;
        if (run_.opt.check_replicas && ps_.servers == 1) {
          run_.CheckReplicas(("after step " + std::to_string(run_.global_step)).c_str());
        }
        run_.Progress(plan_.epoch, plan_.steps_before + plan_.step - 1,
                      plan_.steps_before + plan_.steps, stats_);
      }
      FinishEpoch();
      plan_.finished = true;
    } catch (const TrainError& e) {
      AfterLoss(e);
    }
  }
  elastic_.CloseDesk();
}

}  // namespace

void TrainSyncPs(TrainingRun& run) {
  SyncServer(run).Train();
}

void TrainParameterServer(TrainingRun& run) {
  if (run.world < 2) {
    throw TrainError("--mode ps needs at least 2 ranks (rank 0 is the server, the others work)");
  }
  if (run.opt.async) {
    TrainAsyncPs(run);
  } else if (run.opt.backup_workers > 0) {
    TrainBackupPs(run);
  } else {
    TrainSyncPs(run);
  }
}

}  // namespace trainer
