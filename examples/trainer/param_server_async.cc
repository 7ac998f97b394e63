// --mode ps --async: the asynchronous parameter server, sharded over --ps-shards server ranks
// (ps_layout.h).
//
// Baton's send/recv block and a communicator runs its calls in order, so a single communicator
// cannot "receive from whichever worker is ready". Each worker w therefore gets a communicator
// of its own with the servers, {0..K-1, w} (batonCommSplit; the servers keep their ranks, the
// worker is rank K there), and every server serves each worker's communicator on a thread of
// its own; a mutex per server makes each update of its range atomic. A worker pushes every
// server its range of the gradient with the version of that range it was computed from (one
// group), and pulls every range back with its new version (one group), without waiting for the
// other workers; staleness = updates a range received between a worker's pull and its push.
// With K = 1 these are the pairs {0, w} of the unsharded server.
//
// --staleness S (stale synchronous parallel, Ho et al. 2013): each server counts every worker's
// pushes this epoch (its clock) and answers a push only once that worker is at most S pushes
// ahead of the slowest, so no worker starts a step more than S steps ahead of any other (S = 0:
// lockstep, bulk synchronous). The answer carries the newest parameters at that moment, with the
// updates the wait let in.
//
// Device backends: a push or pull groups a host header (the version) with the parameters, and
// Baton refuses a group that mixes host and device buffers, so the parameters go through host
// copies (download / upload).
#include <baton.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
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

// A server's shared state, which its per-worker threads update.
struct AsyncServer {
  std::mutex mu;
  std::condition_variable clock_moved;  // --staleness: a push was applied (or a thread failed)
  std::vector<long> clocks;             // pushes applied this epoch, per worker
  int64_t version = 0;                  // updates applied to this range so far (= global step)
  EpochStats stats;                     // staleness
  double bytes_sent = 0;
  std::string error;  // first failure of any thread
};

// One server thread: `worker`'s pushes on its communicator (the worker is rank `servers` there).
void ServeWorker(TrainingRun& run, const PsLayout& ps, AsyncServer& server, batonComm_t comm,
                 int worker, long steps) {
  const double wait_limit_s = BatonTimeoutSeconds();
  const size_t b = ps.begin(run.rank), n = ps.size(run.rank);
  const bool staged = run.backend.device_memory();
  const std::string who = "worker rank " + std::to_string(ps.worker_rank(worker));
  try {
    Buffer grad = run.backend.Allocate(ps.params);  // whole-model layout: StepRange takes it
    std::vector<float> host_grad(staged ? n : 0);   // staged: the group receives into it
    float* incoming = staged ? host_grad.data() : grad.data() + b;
    // A snapshot of the range taken under the lock, sent after it (both kinds of backend).
    std::vector<float> outgoing(n);
    for (long step = 0; step < steps; ++step) {
      int64_t in_header[1] = {0};
      batonGroupStart();
      CheckBaton(batonRecv(in_header, 1, batonInt64, ps.servers, comm, nullptr), comm,
                 "header receive");
      CheckBaton(batonRecv(incoming, n, batonFloat, ps.servers, comm, nullptr), comm,
                 "gradient receive");
      GroupEnd(comm, "gradient receive from " + who);
      int64_t out_header[1];
      {
        std::lock_guard<std::mutex> lock(server.mu);
        double staleness = static_cast<double>(server.version - in_header[0]);
        server.stats.staleness_sum += staleness;
        server.stats.staleness_count += 1;
        server.stats.staleness_max = std::max(server.stats.staleness_max, staleness);
        // Every push is one update of one worker's batch: no linear scaling.
        float lr = run.LearningRate(server.version, 1);
        if (staged) run.backend.Upload(grad.data() + b, host_grad.data(), n);
        run.optimizer.StepRange(run.model.params(), grad.data(), lr, b, b + n);
        if (run.ema) run.ema->UpdateRange(run.model.params(), b, b + n);
        ++server.version;
        ++server.clocks[static_cast<size_t>(worker)];
      }
      server.clock_moved.notify_all();
      {
        std::unique_lock<std::mutex> lock(server.mu);
        const long mine = server.clocks[static_cast<size_t>(worker)];
        auto gap = [&] {
          return mine - *std::min_element(server.clocks.begin(), server.clocks.end());
        };
        if (run.opt.staleness >= 0) {
          // Every wait has a deadline: BATON_TIMEOUT's worth of the slowest worker not moving.
          const double deadline = NowSeconds() + wait_limit_s;
          while (gap() > run.opt.staleness && server.error.empty()) {
            if (NowSeconds() > deadline) {
              throw TrainError("--staleness: the slowest worker made no push in " +
                               std::to_string(static_cast<int>(wait_limit_s)) + " s");
            }
            server.clock_moved.wait_for(lock, std::chrono::milliseconds(200));
          }
          if (!server.error.empty()) return;
        }
        server.stats.clock_gap_max =
            std::max(server.stats.clock_gap_max, static_cast<double>(gap()));
        run.backend.Download(outgoing.data(), run.model.params() + b, n);
        out_header[0] = server.version;
        server.bytes_sent += static_cast<double>(n) * sizeof(float) + sizeof(int64_t);
      }
      batonGroupStart();
      CheckBaton(batonSend(out_header, 1, batonInt64, ps.servers, comm, nullptr), comm,
                 "header send");
      CheckBaton(batonSend(outgoing.data(), n, batonFloat, ps.servers, comm, nullptr), comm,
                 "parameter send");
      GroupEnd(comm, "parameter send to " + who);
    }
  } catch (const TrainError& e) {
    {
      std::lock_guard<std::mutex> lock(server.mu);
      if (server.error.empty()) server.error = who + ": " + e.what();
    }
    server.clock_moved.notify_all();  // no thread waits for a worker this one no longer serves
  }
}

}  // namespace

void TrainAsyncPs(TrainingRun& run) {
  const PsLayout ps = MakePsLayout(run);
  const size_t n = ps.params;
  const bool server_rank = ps.is_server(run.rank);
  WorkerComms comms = SplitPerWorker(run, ps);
  AsyncServer server;
  server.version = run.global_step;
  float lr = 0;
  // Every push is one update: the servers' step counts all workers' steps.
  run.total_steps = run.ShardOf(0, ps.workers).steps * ps.workers * run.opt.epochs;
  for (int epoch = run.start_epoch; epoch < run.LastEpoch(); ++epoch) {
    std::vector<uint32_t> order = run.EpochOrder(epoch);
    Shard part = run.ShardOf(server_rank ? 0 : ps.worker_index(run.rank), ps.workers);
    if (part.steps == 0) throw TrainError("too few samples for this many workers and --batch");
    EpochStats stats;
    double bytes_sent = 0;
    double epoch_start = NowSeconds();
    if (server_rank) {
      server.stats = EpochStats{};
      server.clocks.assign(static_cast<size_t>(ps.workers), 0);
      server.bytes_sent = 0;
      std::vector<std::thread> threads;
      for (int w = 0; w < ps.workers; ++w) {
        threads.emplace_back(ServeWorker, std::ref(run), std::cref(ps), std::ref(server),
                             comms.per_worker[w].get(), w, part.steps);
      }
      for (std::thread& t : threads) t.join();
      if (!server.error.empty()) throw TrainError("parameter server: " + server.error);
      stats = server.stats;
      bytes_sent = server.bytes_sent;
      run.global_step = server.version;
      lr = run.LearningRate(run.global_step, 1);
    } else {
      batonComm_t comm = comms.mine.get();
      std::vector<int64_t> versions(ps.servers, run.global_step);
      const bool staged = run.backend.device_memory();
      std::vector<float> host_buffer(staged ? n : 0);  // staged: gradient out, parameters in
      const float* grad_out = staged ? host_buffer.data() : run.model.grads();
      float* params_in = staged ? host_buffer.data() : run.model.params();
      for (long step = 0; step < part.steps; ++step) {
        double t0 = NowSeconds();
        BatchStats b = run.ComputeGradient(order, part, step, nullptr);
        run.backend.Synchronize();
        double c0 = NowSeconds();
        if (staged) run.backend.Download(host_buffer.data(), run.model.grads(), n);
        batonGroupStart();
        for (int s = 0; s < ps.servers; ++s) {
          CheckBaton(batonSend(&versions[s], 1, batonInt64, s, comm, nullptr), comm, "header send");
          CheckBaton(batonSend(grad_out + ps.begin(s), ps.size(s), batonFloat, s, comm, nullptr),
                     comm, "gradient send");
        }
        GroupEnd(comm, "gradient push to the servers");
        batonGroupStart();
        for (int s = 0; s < ps.servers; ++s) {
          CheckBaton(batonRecv(&versions[s], 1, batonInt64, s, comm, nullptr), comm,
                     "header receive");
          CheckBaton(batonRecv(params_in + ps.begin(s), ps.size(s), batonFloat, s, comm, nullptr),
                     comm, "parameter receive");
        }
        GroupEnd(comm, "parameter pull from the servers");
        if (staged) run.backend.Upload(run.model.params(), host_buffer.data(), n);
        bytes_sent += static_cast<double>(n) * sizeof(float) + sizeof(int64_t) * ps.servers;
        double t1 = NowSeconds();
        stats.comm_wait_s += t1 - c0;
        stats.step_s += t1 - t0;
        stats.loss_sum += b.loss_sum;
        stats.correct += b.correct;
        stats.samples += b.samples;
        run.Progress(epoch, step, part.steps, stats);
      }
    }
    double wall = NowSeconds() - epoch_start;
    // Epoch boundary: everyone takes the servers' latest ranges (and step) for evaluation.
    ShareShards(run, ps, run.model.params(), "parameter broadcast");
    int64_t step_now = run.global_step;
    CheckBaton(batonBroadcast(&step_now, &step_now, 1, batonInt64, 0, run.comm, nullptr), run.comm,
               "step broadcast");
    run.global_step = step_now;
    if (run.ema) ShareShards(run, ps, run.ema->data(), "EMA broadcast");
    if (ps.servers > 1 && !run.opt.checkpoint.empty())
      for (int p = 0; p < run.optimizer.parts(); ++p) {
        ShareShards(run, ps, run.optimizer.state() + p * n, "optimizer broadcast");
      }
    if (run.opt.check_replicas) run.CheckReplicas("at the end of the epoch");
    const EpochExtras traffic = PsTraffic(run, bytes_sent, part.steps);
    run.FinishEpoch(epoch, stats, wall, lr, part.steps * StepBatch(run.opt) * ps.workers, traffic);
  }
}

}  // namespace trainer
