// The C API of communicators (creation, queries, destruction, split) and of
// errors. Argument checks here; the work in comm/ and bootstrap/.
#include <baton.h>

#include <algorithm>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "api/checks.h"
#include "api/creation.h"
#include "api/handles.h"
#include "base/deadline.h"
#include "base/log.h"
#include "base/settings.h"
#include "bootstrap/launcher_env.h"
#include "bootstrap/rendezvous.h"
#include "comm/shrink.h"
#include "comm/split.h"
#include "cuda/cuda_device.h"
#include "launch/group.h"
#include "topology/binding.h"

#pragma GCC visibility push(default)

using namespace baton;  // NOLINT: the C API below is a thin layer over it

namespace {

// Creates a communicator and its handle; failures name the rank.
batonResult_t InitRank(const char* fn, const Settings& settings, const CreationOptions& options,
                       batonComm_t* comm, int nranks, const UniqueIdData& data, int rank) {
  const std::string name = options.name.value_or("");
  return CreateComm(
      fn, options, rank, nranks,
      [settings, data, nranks, rank, name,
       gpu = CudaCurrentDevicePciBusId()](std::shared_ptr<Communicator>* out) {
        return Communicator::Create(settings, data, nranks, rank, out, name, gpu)
            .WithContext("rank " + std::to_string(rank) + " of " + std::to_string(nranks));
      },
      comm);
}

// A group's calls on `comm` run at batonGroupEnd: destroying or finalizing
// it before would run them on a freed communicator (an abort fails them).
Status NoGroupedCalls(const char* fn, const Communicator& comm) {
  if (!GroupHolds(&comm)) return Status::Ok();
  return InvalidUsage(std::string(fn) +
                      " inside a group that holds calls on this communicator: call "
                      "batonGroupEnd first");
}

batonResult_t DestroyComm(const char* fn, batonComm_t comm, bool abort) {
  if (!abort) {
    const CommLookup c = LookupCommState(comm);
    if (c.comm) {
      const Status grouped = NoGroupedCalls(fn, *c.comm);
      if (!grouped.ok()) return Fail(fn, grouped, c.comm.get());
    }
  }
  std::shared_ptr<Creation> creation;
  std::shared_ptr<Communicator> impl = UnregisterComm(comm, &creation);
  if (creation) {
    std::unique_lock<std::mutex> lock(creation->mu);
    if (abort && !creation->done) {
      // Stop the creation's waits; its thread aborts whatever it made.
      creation->abandoned = true;
      creation->cancel.store(true);
      return batonSuccess;
    }
    creation->cv.wait(lock, [&] { return creation->done; });
    impl = std::move(creation->result);
    if (!impl) return batonSuccess;  // the creation failed: nothing to free
  }
  if (!impl) return Fail(fn, InvalidArgument("comm is NULL or not live (destroyed twice?)"));
  if (abort) impl->Abort();
  // Queued stream work holds its own reference; wait for it so the
  // connections close only after the last collective.
  impl->WaitPending();
  const Status stray = abort ? Status::Ok() : impl->StrayMessages();
  // Freed on purpose: the peers do not count this rank as failed when its
  // sockets close (unless an abort of a healthy communicator said so).
  impl->Leave();
  if (!stray.ok()) return Fail(fn, stray);
  return batonSuccess;
}

// A unique id from the environment (batonrun's BATON_UNIQUE_ID) makes one
// communicator: its server answers one rendezvous, so the same rank asking
// again in this process would only time out, blaming a leader that left.
// (A BATON_ROOT or MASTER_ADDR job may: rank 0 serves each anew.)
Status FirstUseOfEnvironmentId(const Settings& settings, const LauncherJob& job) {
  if (settings.unique_id.empty()) return Status::Ok();
  static std::mutex mu;
  static std::set<std::pair<uint64_t, int>> used;
  std::lock_guard<std::mutex> lock(mu);
  if (used.insert({job.id.comm_id, job.rank}).second) return Status::Ok();
  return InvalidUsage("this process already made its communicator from BATON_UNIQUE_ID (rank " +
                      std::to_string(job.rank) +
                      "), whose rendezvous serves once (batonrun sets it): make more "
                      "communicators with batonCommSplit, or with batonGetUniqueId and "
                      "batonCommInitRank");
}

}  // namespace

extern "C" {

batonResult_t batonGetVersion(int* version) {
  if (version == nullptr) return Fail("batonGetVersion", InvalidArgument("version is NULL"));
  *version = BATON_VERSION_CODE;
  return batonSuccess;
}

const char* batonGetErrorString(batonResult_t result) {
  switch (result) {
    case batonSuccess:
      return "no error";
    case batonUnhandledCudaError:
      return "unhandled cuda error (run with BATON_DEBUG=INFO for details)";
    case batonSystemError:
      return "unhandled system error (run with BATON_DEBUG=INFO for details)";
    case batonInternalError:
      return "internal error - please report this issue to the Baton developers";
    case batonInvalidArgument:
      return "invalid argument (run with BATON_DEBUG=WARN for details)";
    case batonInvalidUsage:
      return "invalid usage (run with BATON_DEBUG=WARN for details)";
    case batonRemoteError:
      return "remote process exited or there was a network error";
    case batonInProgress:
      return "Baton operation in progress";
    case batonTimeout:
      return "timed out (BATON_TIMEOUT)";
    default:
      return "unknown result code";
  }
}

const char* batonGetLastError(batonComm_t comm) {
  return LastErrorText(comm);
}

batonResult_t batonGetUniqueId(batonUniqueId* unique_id) {
  if (unique_id == nullptr) return Fail("batonGetUniqueId", InvalidArgument("uniqueId is NULL"));
  const Settings settings = ReadSettings();
  Status st = CreateUniqueId(settings.socket_ifname, TimeoutSeconds(settings), unique_id);
  if (!st.ok()) return Fail("batonGetUniqueId", st);
  return batonSuccess;
}

batonResult_t batonCommInitRank(batonComm_t* comm, int nranks, batonUniqueId comm_id, int rank) {
  const char* fn = "batonCommInitRank";
  if (comm == nullptr) return Fail(fn, InvalidArgument("comm is NULL"));
  *comm = nullptr;
  if (nranks < 1) return Fail(fn, InvalidArgument("nranks " + std::to_string(nranks) + " < 1"));
  BATON_API_CHECK(fn, CheckRank(rank, nranks, "rank"), nullptr);
  UniqueIdData data;
  BATON_API_CHECK(fn, DecodeUniqueId(comm_id, &data), nullptr);
  return InitRank(fn, ReadSettings(), CreationOptions{}, comm, nranks, data, rank);
}

batonResult_t batonCommInitRankConfig(batonComm_t* comm, int nranks, batonUniqueId comm_id,
                                      int rank, batonConfig_t* config) {
  const char* fn = "batonCommInitRankConfig";
  if (comm == nullptr) return Fail(fn, InvalidArgument("comm is NULL"));
  *comm = nullptr;
  if (nranks < 1) return Fail(fn, InvalidArgument("nranks " + std::to_string(nranks) + " < 1"));
  BATON_API_CHECK(fn, CheckRank(rank, nranks, "rank"), nullptr);
  CreationOptions options;
  BATON_API_CHECK(fn, ReadConfig(config, &options), nullptr);
  UniqueIdData data;
  BATON_API_CHECK(fn, DecodeUniqueId(comm_id, &data), nullptr);
  return InitRank(fn, CreationSettings(options), options, comm, nranks, data, rank);
}

batonResult_t batonCommInitAll(batonComm_t* comms, int ndev, const int* devlist) {
  const char* fn = "batonCommInitAll";
  if (comms == nullptr) return Fail(fn, InvalidArgument("comms is NULL"));
  if (ndev < 1) return Fail(fn, InvalidArgument("ndev " + std::to_string(ndev) + " < 1"));
  for (int i = 0; i < ndev; ++i) comms[i] = nullptr;
  if (devlist != nullptr) {
    for (int i = 0; i < ndev; ++i) {
      if (devlist[i] < 0)
        return Fail(fn, InvalidArgument("devlist[" + std::to_string(i) +
                                        "] = " + std::to_string(devlist[i]) + " is not a device"));
      for (int j = 0; j < i; ++j)
        if (devlist[j] == devlist[i])
          return Fail(
              fn, InvalidArgument("devlist names device " + std::to_string(devlist[i]) + " twice"));
    }
  }
  const Settings settings = ReadSettings();
  batonUniqueId id;
  BATON_API_CHECK(fn, CreateUniqueId(settings.socket_ifname, TimeoutSeconds(settings), &id),
                  nullptr);
  UniqueIdData data;
  BATON_API_CHECK(fn, DecodeUniqueId(id, &data), nullptr);
  // Every rank joins the rendezvous and connects to the others at once, so
  // each needs a thread of its own.
  std::vector<std::shared_ptr<Communicator>> made(ndev);
  std::vector<Status> results(ndev);
  std::vector<std::thread> threads;
  for (int r = 0; r < ndev; ++r)
    threads.emplace_back([&, r] {
      results[r] = Communicator::Create(settings, data, ndev, r, &made[r])
                       .WithContext("rank " + std::to_string(r) + " of " + std::to_string(ndev));
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < ndev; ++r) {
    if (results[r].ok()) continue;
    for (auto& c : made)
      if (c) c->Abort();
    return Fail(fn, results[r]);
  }
  for (int r = 0; r < ndev; ++r) comms[r] = RegisterComm(std::move(made[r]));
  return batonSuccess;
}

batonResult_t batonCommInitFromEnv(batonComm_t* comm) {
  const char* fn = "batonCommInitFromEnv";
  if (comm == nullptr) return Fail(fn, InvalidArgument("comm is NULL"));
  *comm = nullptr;
  const Settings settings = ReadSettings();
  // The job's rendezvous is long over when batonrun starts a replacement:
  // waiting at it would only time out.
  if (settings.elastic_join)
    return Fail(fn, InvalidUsage("this rank replaces a lost one in a running job (batonrun "
                                 "--replace set BATON_ELASTIC_JOIN): it joins with batonCommGrow, "
                                 "with a grow id from an existing rank (docs/reliability.md)"));
  LauncherJob job;
  BATON_API_CHECK(fn, JobFromEnvironment(settings, &job), nullptr);
  BATON_API_CHECK(fn, FirstUseOfEnvironmentId(settings, job), nullptr);
  // Before the rendezvous, so that the place this rank reports is where it
  // will run.
  bool bound = false;
  BATON_API_CHECK(
      fn, BindThisRank(settings.bind, settings.topo_file, job.local_rank, job.local_size, &bound),
      nullptr);
  if (bound)
    BATON_INFO(kLogInit, "bound as local rank %d of %d (BATON_BIND=%s)", job.local_rank,
               job.local_size, settings.bind.c_str());
  return InitRank(fn, settings, CreationOptions{}, comm, job.size, job.id, job.rank);
}

batonResult_t batonCommCount(const batonComm_t comm, int* count) {
  const CommLookup c = LookupCommState(comm);
  if (c.state == CommState::kNotLive || c.nranks <= 0)
    return Fail("batonCommCount", NotLiveError(c));
  if (count == nullptr)
    return Fail("batonCommCount", InvalidArgument("count is NULL"), c.comm.get());
  *count = c.nranks;
  return batonSuccess;
}

batonResult_t batonCommUserRank(const batonComm_t comm, int* rank) {
  const CommLookup c = LookupCommState(comm);
  if (c.state == CommState::kNotLive || c.rank < 0)
    return Fail("batonCommUserRank", NotLiveError(c));
  if (rank == nullptr)
    return Fail("batonCommUserRank", InvalidArgument("rank is NULL"), c.comm.get());
  *rank = c.rank;
  return batonSuccess;
}

batonResult_t batonCommGetAsyncError(batonComm_t comm, batonResult_t* async_error) {
  const CommLookup c = LookupCommState(comm);
  if (c.state == CommState::kNotLive) return Fail("batonCommGetAsyncError", NotLiveError(c));
  if (async_error == nullptr)
    return Fail("batonCommGetAsyncError", InvalidArgument("async_error is NULL"), c.comm.get());
  switch (c.state) {
    case CommState::kCreating:
      *async_error = batonInProgress;
      break;
    case CommState::kCreationFailed:
      *async_error = c.creation_status.code();
      break;
    default:
      *async_error = c.comm->async_error();
  }
  return batonSuccess;
}

batonResult_t batonCommFinalize(batonComm_t comm) {
  const char* fn = "batonCommFinalize";
  const CommLookup c = LookupCommState(comm);
  if (!c.comm) return Fail(fn, NotLiveError(c));
  if (Status grouped = NoGroupedCalls(fn, *c.comm); !grouped.ok())
    return Fail(fn, grouped, c.comm.get());
  // Host-stream work holds the communicator until it has run.
  c.comm->WaitPending();
  c.comm->WriteTrace();
  const batonResult_t error = c.comm->async_error();
  if (error != batonSuccess)
    return Fail(fn, Status(error, "the communicator failed: " + c.comm->last_error()),
                c.comm.get());
  return batonSuccess;
}

batonResult_t batonCommGetFailedRanks(batonComm_t comm, int* ranks, int maxRanks, int* nFailed) {
  const char* fn = "batonCommGetFailedRanks";
  // A failed communicator is when this is asked: no sticky error here.
  const CommLookup c = LookupCommState(comm);
  if (!c.comm) return Fail(fn, NotLiveError(c));
  if (nFailed == nullptr) return Fail(fn, InvalidArgument("nFailed is NULL"), c.comm.get());
  if (maxRanks < 0)
    return Fail(fn, InvalidArgument("maxRanks " + std::to_string(maxRanks) + " < 0"), c.comm.get());
  if (ranks == nullptr && maxRanks > 0)
    return Fail(fn, InvalidArgument("ranks is NULL with maxRanks " + std::to_string(maxRanks)),
                c.comm.get());
  const std::vector<int> failed = c.comm->FailedRanks();
  const size_t n = std::min(failed.size(), static_cast<size_t>(maxRanks));
  std::copy(failed.begin(), failed.begin() + static_cast<std::ptrdiff_t>(n), ranks);
  *nFailed = static_cast<int>(failed.size());
  return batonSuccess;
}

batonResult_t batonCommSetCallTimeout(batonComm_t comm, int timeout) {
  const char* fn = "batonCommSetCallTimeout";
  // Also on a failed communicator: it changes nothing that has run.
  const CommLookup c = LookupCommState(comm);
  if (!c.comm) return Fail(fn, NotLiveError(c));
  if (timeout == BATON_CONFIG_UNDEF_INT) {
    c.comm->set_call_timeout(-1);
    return batonSuccess;
  }
  if (timeout < 0)
    return Fail(fn, InvalidArgument("timeout " + std::to_string(timeout) + " < 0"), c.comm.get());
  c.comm->set_call_timeout(timeout == 0 ? kForeverSeconds : timeout);
  return batonSuccess;
}

batonResult_t batonCommDestroy(batonComm_t comm) {
  return DestroyComm("batonCommDestroy", comm, false);
}

batonResult_t batonCommAbort(batonComm_t comm) {
  return DestroyComm("batonCommAbort", comm, true);
}

batonResult_t batonCommSplit(batonComm_t comm, int color, int key, batonComm_t* newcomm,
                             batonConfig_t* config) {
  const char* fn = "batonCommSplit";
  CallSite site;
  BATON_API_CHECK(fn, BeginCall(comm, nullptr, &site), site.comm.get());
  std::shared_ptr<Communicator> c = site.comm;
  if (newcomm == nullptr) return Fail(fn, InvalidArgument("newcomm is NULL"), c.get());
  if (color < 0 && color != BATON_SPLIT_NOCOLOR)
    return Fail(fn, InvalidArgument("color must be >= 0 or BATON_SPLIT_NOCOLOR"), c.get());
  if (InGroup()) return Fail(fn, InvalidUsage("batonCommSplit inside a group"), c.get());
  *newcomm = nullptr;
  CreationOptions options;
  BATON_API_CHECK(fn, ReadConfig(config, &options), c.get());
  // A rank that joins no new communicator has no handle to poll: it takes
  // part in the exchange synchronously.
  if (color == BATON_SPLIT_NOCOLOR) options.blocking = true;
  const Settings settings = CreationSettings(options, c->config().timeout_s);
  const std::string name = options.name.value_or(c->config().name);
  return CreateComm(
      fn, options, -1, 0,
      [c, settings, color, key, name](std::shared_ptr<Communicator>* out) {
        return SplitCommunicator(*c, settings, color, key, out, name);
      },
      newcomm, c.get());
}

batonResult_t batonCommShrink(batonComm_t comm, int* excludeRanksList, int excludeRanksCount,
                              batonComm_t* newcomm, batonConfig_t* config, int shrinkFlags) {
  const char* fn = "batonCommShrink";
  // A failed communicator is what a shrink is for: look it up without
  // failing on its sticky error.
  const CommLookup lookup = LookupCommState(comm);
  std::shared_ptr<Communicator> c = lookup.comm;
  if (!c) return Fail(fn, NotLiveError(lookup));
  if (newcomm == nullptr) return Fail(fn, InvalidArgument("newcomm is NULL"), c.get());
  *newcomm = nullptr;
  if (excludeRanksCount < 0)
    return Fail(fn,
                InvalidArgument("excludeRanksCount " + std::to_string(excludeRanksCount) + " < 0"),
                c.get());
  if (excludeRanksCount > 0 && excludeRanksList == nullptr)
    return Fail(fn,
                InvalidArgument("excludeRanksList is NULL with excludeRanksCount " +
                                std::to_string(excludeRanksCount)),
                c.get());
  CreationOptions options;
  BATON_API_CHECK(fn, ReadConfig(config, &options), c.get());
  if (shrinkFlags != BATON_SHRINK_DEFAULT && shrinkFlags != BATON_SHRINK_ABORT)
    return Fail(fn,
                InvalidArgument("shrinkFlags " + std::to_string(shrinkFlags) +
                                ": expected BATON_SHRINK_DEFAULT or BATON_SHRINK_ABORT"),
                c.get());
  if (InGroup()) return Fail(fn, InvalidUsage("batonCommShrink inside a group"), c.get());
  const std::vector<int> excluded(excludeRanksList, excludeRanksList + excludeRanksCount);
  const Settings settings = CreationSettings(options, c->config().timeout_s);
  const std::string name = options.name.value_or(c->config().name);
  const bool abort_first = shrinkFlags == BATON_SHRINK_ABORT;
  return CreateComm(
      fn, options, -1, 0,
      [c, settings, excluded, abort_first, name](std::shared_ptr<Communicator>* out) {
        return ShrinkCommunicator(*c, settings, excluded, abort_first, out, name);
      },
      newcomm, c.get());
}

}  // extern "C"

#pragma GCC visibility pop
