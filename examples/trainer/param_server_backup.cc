// --mode ps --backup-workers B: synchronous SGD with backup workers (Chen, Pan, Monga, Bengio &
// Jozefowicz 2016, "Revisiting Distributed Synchronous SGD"). Every step the server applies the
// mean of the first W - B gradients computed from the current parameters to arrive, and drops
// the others: a gradient computed from older parameters (its worker was among the last B) is
// dropped on arrival, and that worker is answered at once with the newest parameters, so the
// slowest B workers never hold a step up. Workers push until the server answers "epoch over"
// (after as many updates as synchronous --mode ps makes), taking their shard's batches in turn.
//
// Arrival order needs a receive per worker that can wait on its own, as --async's server does
// (param_server_async.cc): a communicator {server, w} per worker and a server thread for each.
// The accepted gradients are summed in worker order, whatever order they came in. One server
// (--ps-shards 1) and host memory (the CPU backend) only (options_check.cc).
#include <baton.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ps_layout.h"
#include "util.h"

namespace trainer {
namespace {

struct BackupServer {
  std::mutex mu;
  std::condition_variable stepped;  // an update was applied (or a thread failed)
  long updates = 0;                 // this epoch
  long steps = 0;                   // updates an epoch makes
  int needed = 1;                   // W - B
  int accepted = 0;                 // gradients of the current step so far
  std::vector<char> accepted_from;  // per worker, this step
  std::vector<Buffer> inbox;        // per worker
  EpochStats stats;                 // gradients_applied, gradients_dropped
  double bytes_sent = 0;
  float lr = 0;
  std::string error;
};

// The mean of the accepted gradients, in worker order, then one update (under the lock).
void Apply(TrainingRun& run, BackupServer& s, size_t n) {
  float* g = run.model.grads();
  bool first = true;
  for (size_t w = 0; w < s.inbox.size(); ++w) {
    if (!s.accepted_from[w]) continue;
    if (first) {
      run.backend.Copy(g, s.inbox[w].data(), n);
    } else {
      run.backend.Add(g, s.inbox[w].data(), n);
    }
    first = false;
    s.accepted_from[w] = 0;
  }
  run.backend.Scale(g, n, 1.0f / static_cast<float>(s.needed));
  s.lr = run.LearningRate(run.global_step, s.needed);
  run.optimizer.Step(run.model.params(), g, s.lr);
  if (run.ema) run.ema->Update(run.model.params());
  ++run.global_step;
  ++s.updates;
  s.stats.gradients_applied += s.accepted;
  s.accepted = 0;
}

void ServeWorker(TrainingRun& run, BackupServer& s, batonComm_t comm, int worker, size_t n,
                 double wait_limit_s) {
  const std::string who = "worker rank " + std::to_string(worker + 1);
  const size_t w = static_cast<size_t>(worker);
  try {
    std::vector<float> outgoing(n);
    for (;;) {
      int64_t in_header[1] = {0};
      batonGroupStart();
      CheckBaton(batonRecv(in_header, 1, batonInt64, 1, comm, nullptr), comm, "header receive");
      CheckBaton(batonRecv(s.inbox[w].data(), n, batonFloat, 1, comm, nullptr), comm,
                 "gradient receive");
      GroupEnd(comm, "gradient receive from " + who);
      int64_t out_header[1];
      {
        std::unique_lock<std::mutex> lock(s.mu);
        const bool current = in_header[0] == run.global_step && s.updates < s.steps;
        if (current && s.accepted < s.needed) {
          s.accepted_from[w] = 1;
          if (++s.accepted == s.needed) {
            Apply(run, s, n);
            s.stepped.notify_all();
          }
          const double deadline = NowSeconds() + wait_limit_s;
          while (run.global_step <= in_header[0] && s.error.empty()) {
            if (NowSeconds() > deadline) {
              throw TrainError("--backup-workers: no step completed in " +
                               std::to_string(static_cast<int>(wait_limit_s)) + " s");
            }
            s.stepped.wait_for(lock, std::chrono::milliseconds(200));
          }
          if (!s.error.empty()) return;
        } else if (s.updates < s.steps) {
          s.stats.gradients_dropped += 1;  // computed from older parameters, or one too many
        }
        run.backend.Download(outgoing.data(), run.model.params(), n);
        out_header[0] = s.updates >= s.steps ? -1 : run.global_step;
        s.bytes_sent += static_cast<double>(n) * sizeof(float) + sizeof(int64_t);
      }
      batonGroupStart();
      CheckBaton(batonSend(out_header, 1, batonInt64, 1, comm, nullptr), comm, "header send");
      CheckBaton(batonSend(outgoing.data(), n, batonFloat, 1, comm, nullptr), comm,
                 "parameter send");
      GroupEnd(comm, "parameter send to " + who);
      if (out_header[0] < 0) return;
    }
  } catch (const TrainError& e) {
    {
      std::lock_guard<std::mutex> lock(s.mu);
      if (s.error.empty()) s.error = who + ": " + e.what();
    }
    s.stepped.notify_all();
  }
}

}  // namespace

void TrainBackupPs(TrainingRun& run) {
  const PsLayout ps = MakePsLayout(run);
  const size_t n = ps.params;
  const bool server_rank = run.rank == 0;
  if (run.opt.backup_workers >= ps.workers) {
    throw UsageError("--backup-workers " + std::to_string(run.opt.backup_workers) +
                     " leaves no gradient to apply: it must be below the " +
                     std::to_string(ps.workers) + " worker(s)");
  }
  WorkerComms comms = SplitPerWorker(run, ps);
  const double wait_limit_s = BatonTimeoutSeconds();
  BackupServer server;
  server.needed = ps.workers - run.opt.backup_workers;
  server.accepted_from.assign(static_cast<size_t>(ps.workers), 0);
  if (server_rank) {
    for (int w = 0; w < ps.workers; ++w) server.inbox.push_back(run.backend.Allocate(n));
  }
  const long steps = run.ShardOf(0, ps.workers).steps;
  run.total_steps = steps * run.opt.epochs;
  if (run.rank == 0) {
    std::printf("backup workers: each step applies the first %d of %d workers' gradients\n",
                server.needed, ps.workers);
    std::fflush(stdout);
  }
  float lr = 0;
  for (int epoch = run.start_epoch; epoch < run.LastEpoch(); ++epoch) {
    std::vector<uint32_t> order = run.EpochOrder(epoch);
    Shard part = run.ShardOf(server_rank ? 0 : ps.worker_index(run.rank), ps.workers);
    if (part.steps == 0) throw TrainError("too few samples for this many workers and --batch");
    EpochStats stats;
    double bytes_sent = 0;
    const double epoch_start = NowSeconds();
    if (server_rank) {
      server.stats = EpochStats{};
      server.bytes_sent = 0;
      server.updates = 0;
      server.steps = steps;
      std::vector<std::thread> threads;
      for (int w = 0; w < ps.workers; ++w) {
        threads.emplace_back(ServeWorker, std::ref(run), std::ref(server),
                             comms.per_worker[w].get(), w, n, wait_limit_s);
      }
      for (std::thread& t : threads) t.join();
      if (!server.error.empty()) throw TrainError("parameter server: " + server.error);
      stats = server.stats;
      bytes_sent = server.bytes_sent;
      lr = server.lr;
    } else {
      batonComm_t comm = comms.mine.get();
      int64_t version = run.global_step;
      for (long local = 0;; ++local) {
        const double t0 = NowSeconds();
        BatchStats b = run.ComputeGradient(order, part, local % part.steps, nullptr);
        run.backend.Synchronize();
        const double c0 = NowSeconds();
        batonGroupStart();
        CheckBaton(batonSend(&version, 1, batonInt64, 0, comm, nullptr), comm, "header send");
        CheckBaton(batonSend(run.model.grads(), n, batonFloat, 0, comm, nullptr), comm,
                   "gradient send");
        GroupEnd(comm, "gradient push to the server");
        batonGroupStart();
        CheckBaton(batonRecv(&version, 1, batonInt64, 0, comm, nullptr), comm, "header receive");
        CheckBaton(batonRecv(run.model.params(), n, batonFloat, 0, comm, nullptr), comm,
                   "parameter receive");
        GroupEnd(comm, "parameter pull from the server");
        bytes_sent += static_cast<double>(n) * sizeof(float) + sizeof(int64_t);
        const double t1 = NowSeconds();
        stats.comm_wait_s += t1 - c0;
        stats.step_s += t1 - t0;
        stats.loss_sum += b.loss_sum;
        stats.correct += b.correct;
        stats.samples += b.samples;
        run.Progress(epoch, std::min(local, part.steps - 1), part.steps, stats);
        if (version < 0) break;
      }
    }
    const double wall = NowSeconds() - epoch_start;
    ShareShards(run, ps, run.model.params(), "parameter broadcast");
    int64_t step_now = run.global_step;
    CheckBaton(batonBroadcast(&step_now, &step_now, 1, batonInt64, 0, run.comm, nullptr), run.comm,
               "step broadcast");
    run.global_step = step_now;
    if (run.ema) ShareShards(run, ps, run.ema->data(), "EMA broadcast");
    if (run.opt.check_replicas) run.CheckReplicas("at the end of the epoch");
    const EpochExtras traffic = PsTraffic(run, bytes_sent, steps);
    run.FinishEpoch(epoch, stats, wall, lr, steps * StepBatch(run.opt) * server.needed, traffic);
  }
}

}  // namespace trainer
