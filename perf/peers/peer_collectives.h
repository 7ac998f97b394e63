// The Baton perf sweep, measuring another library (Open MPI, Gloo) instead of Baton.
//
// perf_common's driver does the sweep, timing, checking and printing through a Backend; a peer
// library implements that Backend plus the four collectives below, and its main() calls
// PeerMain. The collectives' sizes, counts, test data and bus bandwidth factors are those of
// Baton's all_reduce_perf, broadcast_perf, all_gather_perf and reduce_scatter_perf (and thus of
// nccl-tests), so that rows of the tables compare one to one.
//
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

#include <cstddef>
#include <string>

#include "../perf_common.h"

namespace baton_perf {

// What a peer library's call gets: the driver's RunArgs, with the in-place case spelled out.
struct PeerCall {
  const void* send;
  void* recv;
  size_t count;  // the count argument of the NCCL-style call (per-rank share when gathering)
  batonDataType_t type;
  batonRedOp_t op;
  int root;
  bool in_place;  // the input lies inside the output, as nccl-tests lays it out for each call
};

// A library measured against Baton: the driver's Backend plus the collectives it implements.
// Each call returns batonSuccess, or an error (batonSystemError, batonInternalError, ...) with
// ErrorDetail() saying what went wrong.
class PeerLibrary : public Backend {
 public:
  // In place: send == recv.
  virtual batonResult_t AllReduce(const PeerCall& call) = 0;
  // In place: send == recv (only the root's send is read).
  virtual batonResult_t Broadcast(const PeerCall& call) = 0;
  // recv holds nranks * count elements; in place: send == recv + rank * count.
  virtual batonResult_t AllGather(const PeerCall& call) = 0;
  // send holds nranks * count elements; in place: recv == send + rank * count.
  virtual batonResult_t ReduceScatter(const PeerCall& call) = 0;
};

// Where a peer without its own launcher (Gloo, oneCCL) finds its job: rank and size from the
// first launcher variables set (batonrun, Open MPI, PMI, Slurm, torchrun), and a directory every
// rank sees for the rendezvous: `store_var` when set, else one named after batonrun's job id
// under /tmp (owns_store: rank 0 removes it at the end), created here.
struct PeerJob {
  int rank = 0;
  int size = 0;
  std::string rank_var;  // the variable the rank came from (for error messages)
  std::string store_path;
  bool owns_store = false;
};

// Fills *job, or returns batonInvalidUsage with *detail saying what to set; `store_use`
// names what the directory is for in that message, `prefix` the /tmp name's start.
batonResult_t PeerJobFromEnv(const char* store_var, const char* prefix, const char* store_use,
                             PeerJob* job, std::string* detail);

// Runs `collective` ("all_reduce", "broadcast", "all_gather" or "reduce_scatter") with the
// nccl-tests flags in argv on `library`. Returns the process exit status, as PerfMain.
int PeerMain(int argc, char** argv, const char* collective, PeerLibrary& library);

}  // namespace baton_perf
