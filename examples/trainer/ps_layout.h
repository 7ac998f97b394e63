// The parameter server's layout (--mode ps --ps-shards K): ranks 0..K-1 are servers, server s
// owning the parameters [begin(s), end(s)) of the flat vector (W1 b1 W2 b2 ..., cut in K equal
// ranges whatever the layers), and ranks K..n-1 are workers with shards of the data. A worker
// pushes each server its range of the gradient and pulls its range of the parameters, so each
// server's link carries 1/K of the traffic one server would (Li et al. 2014, "Scaling
// distributed machine learning with the parameter server"). Every rank keeps whole-model
// buffers; a server keeps its own range of the parameters, momentum and EMA current, and the
// ranges are shared at the end of each epoch for evaluation and checkpoints. With K = 1 this is
// the unsharded server on rank 0.
#pragma once

#include <cstddef>
#include <vector>

#include "trainer.h"
#include "util.h"

namespace trainer {

struct PsLayout {
  int servers = 1;
  int workers = 1;
  size_t params = 0;

  size_t begin(int s) const {
    return params * static_cast<size_t>(s) / static_cast<size_t>(servers);
  }
  size_t end(int s) const { return begin(s + 1); }
  size_t size(int s) const { return end(s) - begin(s); }
  bool is_server(int rank) const { return rank < servers; }
  int worker_index(int rank) const { return rank - servers; }
  int worker_rank(int w) const { return servers + w; }
};

// The layout for the run's ranks now (--ps-shards servers, the rest workers); a UsageError when
// there would be no worker.
PsLayout MakePsLayout(const TrainingRun& run);

// Every server broadcasts its range of buf (whole-model size): then every rank holds all of it.
void ShareShards(TrainingRun& run, const PsLayout& ps, float* buf, const char* what);

// One communicator {servers, w} per worker w (batonCommSplit of run.comm, so every rank calls
// it): a server holds them all in per_worker, worker w its own in mine.
struct WorkerComms {
  std::vector<OwnedComm> per_worker;
  OwnedComm mine;
};
WorkerComms SplitPerWorker(TrainingRun& run, const PsLayout& ps);

// The report's traffic: this rank's bytes sent over `steps` steps, the mean over the ranks and
// the busiest rank's (two allreduces).
EpochExtras PsTraffic(TrainingRun& run, double bytes_sent, long steps);

// The two kinds of server, one file each: param_server.cc (synchronous, --elastic too) and
// param_server_async.cc (--async).
void TrainSyncPs(TrainingRun& run);
void TrainAsyncPs(TrainingRun& run);
// --backup-workers: param_server_backup.cc.
void TrainBackupPs(TrainingRun& run);

}  // namespace trainer
