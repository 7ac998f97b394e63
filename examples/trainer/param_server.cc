// --mode ps: a parameter server on rank 0 built from batonSend/batonRecv; ranks 1..n-1 are
// workers that compute gradients on disjoint shards.
//
// Synchronous: every step, rank 0 receives all workers' gradients (one group of receives),
// averages them in worker order, updates and sends the parameters back (one group of sends).
// All traffic crosses rank 0's links, the bottleneck a ring allreduce avoids.
//
// Asynchronous: Baton's send/recv block and a communicator runs its calls in order, so a single
// communicator cannot "receive from whichever worker is ready". Rank 0 therefore splits one
// two-rank communicator {0, w} per worker (batonCommSplit) and serves each on its own thread;
// a mutex makes each update atomic. A worker pushes (gradient, the parameter version it was
// computed from) and pulls (parameters, new version) without waiting for the other workers;
// staleness = updates applied between its pull and its push.
//
// Device backends: the synchronous server's groups and the synchronous worker's calls take the
// device buffers directly (Baton stages a group of device calls together, docs/cuda.md). The
// asynchronous exchanges put a host header (the parameter version) and the device parameters in
// one group, which Baton refuses (a group mixes host and device buffers); there the parameters
// go through host copies (download / upload).
#include <baton.h>

#include <mutex>
#include <string>
#include <thread>

#include "trainer.h"
#include "util.h"

namespace trainer {
namespace {

void GroupEnd(batonComm_t comm, const std::string& what) {
  CheckBaton(batonGroupEnd(), comm, what);
}

void ShareEma(TrainingRun& run) {
  if (!run.ema) return;
  CheckBaton(batonBroadcast(run.ema->data(), run.ema->data(), run.model.parameter_count(),
                            batonFloat, 0, run.comm, nullptr),
             run.comm, "EMA broadcast");
}

void TrainSyncPs(TrainingRun& run) {
  const int workers = run.world - 1;
  const size_t n = run.model.parameter_count();
  batonComm_t comm = run.comm;
  std::vector<Buffer> inbox;
  if (run.rank == 0) {
    for (int w = 0; w < workers; ++w) inbox.push_back(run.backend.Allocate(n));
  }
  float lr = 0;
  run.total_steps = run.ShardOf(0, workers).steps * run.opt.epochs;
  for (int epoch = run.start_epoch; epoch < run.LastEpoch(); ++epoch) {
    std::vector<uint32_t> order = run.EpochOrder(epoch);
    Shard part = run.ShardOf(run.rank == 0 ? 0 : run.rank - 1, workers);
    if (part.steps == 0) throw TrainError("too few samples for this many workers and --batch");
    EpochStats stats;
    double epoch_start = NowSeconds();
    for (long step = 0; step < part.steps; ++step) {
      if (run.rank == 0) {
        batonGroupStart();
        for (int w = 0; w < workers; ++w) {
          CheckBaton(batonRecv(inbox[w].data(), n, batonFloat, w + 1, comm, nullptr), comm,
                     "gradient receive");
        }
        GroupEnd(comm, "gradient receive from the workers");
        float* g = run.model.grads();
        run.backend.Copy(g, inbox[0].data(), n);
        for (int w = 1; w < workers; ++w) run.backend.Add(g, inbox[w].data(), n);
        run.backend.Scale(g, n, 1.0f / static_cast<float>(workers));
        lr = run.LearningRate(run.global_step, workers);
        run.optimizer.Step(run.model.params(), g, lr);
        if (run.ema) run.ema->Update(run.model.params());
        run.backend.Synchronize();
        batonGroupStart();
        for (int w = 0; w < workers; ++w) {
          CheckBaton(batonSend(run.model.params(), n, batonFloat, w + 1, comm, nullptr), comm,
                     "parameter send");
        }
        GroupEnd(comm, "parameter send to the workers");
      } else {
        double t0 = NowSeconds();
        BatchStats b = run.ForwardBatch(order, part, step, true);
        run.model.Backward(nullptr);
        run.backend.Synchronize();
        double c0 = NowSeconds();
        CheckBaton(batonSend(run.model.grads(), n, batonFloat, 0, comm, nullptr), comm,
                   "gradient send to the server");
        CheckBaton(batonRecv(run.model.params(), n, batonFloat, 0, comm, nullptr), comm,
                   "parameter receive from the server");
        double t1 = NowSeconds();
        stats.comm_wait_s += t1 - c0;
        stats.step_s += t1 - t0;
        stats.loss_sum += b.loss_sum;
        stats.correct += b.correct;
        stats.samples += b.samples;
        lr = run.LearningRate(run.global_step, workers);
      }
      ++run.global_step;
      if (run.opt.check_replicas) {
        run.CheckReplicas(("after step " + std::to_string(run.global_step)).c_str());
      }
      run.Progress(epoch, step, part.steps, stats);
    }
    double wall = NowSeconds() - epoch_start;
    ShareEma(run);
    run.FinishEpoch(epoch, stats, wall, lr, part.steps * run.opt.batch * workers);
  }
}

// Rank 0's side of the asynchronous server: the shared state the per-worker threads update.
struct AsyncServer {
  std::mutex mu;
  int64_t version = 0;  // updates applied so far (= global step)
  EpochStats stats;     // staleness
  std::string error;    // first failure of any thread
};

void ServeWorker(TrainingRun& run, AsyncServer& server, batonComm_t pair, int worker, long steps) {
  const size_t n = run.model.parameter_count();
  const bool staged = run.backend.device_memory();
  const std::string who = "worker " + std::to_string(worker);
  try {
    Buffer grad = run.backend.Allocate(n);
    std::vector<float> host_grad(staged ? n : 0);  // staged: the group receives into it
    float* incoming = staged ? host_grad.data() : grad.data();
    // A snapshot of the parameters taken under the lock, sent after it (both kinds of backend).
    std::vector<float> outgoing(n);
    for (long step = 0; step < steps; ++step) {
      int64_t in_header[1] = {0};
      batonGroupStart();
      CheckBaton(batonRecv(in_header, 1, batonInt64, 1, pair, nullptr), pair, "header receive");
      CheckBaton(batonRecv(incoming, n, batonFloat, 1, pair, nullptr), pair, "gradient receive");
      GroupEnd(pair, "gradient receive from " + who);
      int64_t out_header[1];
      {
        std::lock_guard<std::mutex> lock(server.mu);
        double staleness = static_cast<double>(server.version - in_header[0]);
        server.stats.staleness_sum += staleness;
        server.stats.staleness_count += 1;
        server.stats.staleness_max = std::max(server.stats.staleness_max, staleness);
        // Every push is one update of one worker's batch: no linear scaling.
        float lr = run.LearningRate(server.version, 1);
        if (staged) run.backend.Upload(grad.data(), host_grad.data(), n);
        run.optimizer.Step(run.model.params(), grad.data(), lr);
        if (run.ema) run.ema->Update(run.model.params());
        ++server.version;
        run.backend.Download(outgoing.data(), run.model.params(), n);
        out_header[0] = server.version;
      }
      batonGroupStart();
      CheckBaton(batonSend(out_header, 1, batonInt64, 1, pair, nullptr), pair, "header send");
      CheckBaton(batonSend(outgoing.data(), n, batonFloat, 1, pair, nullptr), pair,
                 "parameter send");
      GroupEnd(pair, "parameter send to " + who);
    }
  } catch (const TrainError& e) {
    std::lock_guard<std::mutex> lock(server.mu);
    if (server.error.empty()) server.error = who + ": " + e.what();
  }
}

void TrainAsyncPs(TrainingRun& run) {
  const int workers = run.world - 1;
  const size_t n = run.model.parameter_count();
  // One two-rank communicator {0, w} per worker; rank 0 keeps them all, worker w its own.
  std::vector<OwnedComm> pairs;
  OwnedComm mine;
  for (int w = 1; w <= workers; ++w) {
    bool member = run.rank == 0 || run.rank == w;
    batonComm_t c = nullptr;
    CheckBaton(batonCommSplit(run.comm, member ? 0 : BATON_SPLIT_NOCOLOR, run.rank, &c, nullptr),
               run.comm, "batonCommSplit for worker " + std::to_string(w));
    if (run.rank == 0)
      pairs.emplace_back(c);
    else if (run.rank == w)
      mine = OwnedComm(c);
  }
  AsyncServer server;
  server.version = run.global_step;
  float lr = 0;
  // Every push is one update: the server's step counts all workers' steps.
  run.total_steps = run.ShardOf(0, workers).steps * workers * run.opt.epochs;
  for (int epoch = run.start_epoch; epoch < run.LastEpoch(); ++epoch) {
    std::vector<uint32_t> order = run.EpochOrder(epoch);
    Shard part = run.ShardOf(run.rank == 0 ? 0 : run.rank - 1, workers);
    if (part.steps == 0) throw TrainError("too few samples for this many workers and --batch");
    EpochStats stats;
    double epoch_start = NowSeconds();
    if (run.rank == 0) {
      server.stats = EpochStats{};
      std::vector<std::thread> threads;
      for (int w = 0; w < workers; ++w) {
        threads.emplace_back(ServeWorker, std::ref(run), std::ref(server), pairs[w].get(), w + 1,
                             part.steps);
      }
      for (std::thread& t : threads) t.join();
      if (!server.error.empty()) throw TrainError("parameter server: " + server.error);
      stats = server.stats;
      run.global_step = server.version;
      lr = run.LearningRate(run.global_step, 1);
    } else {
      batonComm_t pair = mine.get();
      int64_t version = run.global_step;
      const bool staged = run.backend.device_memory();
      std::vector<float> host_buffer(staged ? n : 0);  // staged: gradient out, parameters in
      const float* grad_out = staged ? host_buffer.data() : run.model.grads();
      float* params_in = staged ? host_buffer.data() : run.model.params();
      for (long step = 0; step < part.steps; ++step) {
        double t0 = NowSeconds();
        BatchStats b = run.ForwardBatch(order, part, step, true);
        run.model.Backward(nullptr);
        run.backend.Synchronize();
        double c0 = NowSeconds();
        if (staged) run.backend.Download(host_buffer.data(), run.model.grads(), n);
        int64_t header[1] = {version};
        batonGroupStart();
        CheckBaton(batonSend(header, 1, batonInt64, 0, pair, nullptr), pair, "header send");
        CheckBaton(batonSend(grad_out, n, batonFloat, 0, pair, nullptr), pair, "gradient send");
        GroupEnd(pair, "gradient push to the server");
        batonGroupStart();
        CheckBaton(batonRecv(header, 1, batonInt64, 0, pair, nullptr), pair, "header receive");
        CheckBaton(batonRecv(params_in, n, batonFloat, 0, pair, nullptr), pair,
                   "parameter receive");
        GroupEnd(pair, "parameter pull from the server");
        if (staged) run.backend.Upload(run.model.params(), host_buffer.data(), n);
        version = header[0];
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
    // Epoch boundary: everyone takes the server's latest parameters (and step) for evaluation.
    run.BroadcastParameters();
    int64_t step_now = run.global_step;
    CheckBaton(batonBroadcast(&step_now, &step_now, 1, batonInt64, 0, run.comm, nullptr), run.comm,
               "step broadcast");
    run.global_step = step_now;
    ShareEma(run);
    if (run.opt.check_replicas) run.CheckReplicas("at the end of the epoch");
    run.FinishEpoch(epoch, stats, wall, lr, part.steps * run.opt.batch * workers);
  }
}

}  // namespace

void TrainParameterServer(TrainingRun& run) {
  if (run.world < 2) {
    throw TrainError("--mode ps needs at least 2 ranks (rank 0 is the server, the others work)");
  }
  if (run.opt.async) {
    TrainAsyncPs(run);
  } else {
    TrainSyncPs(run);
  }
}

}  // namespace trainer
