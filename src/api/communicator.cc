// The C API of communicators (creation, queries, destruction, split) and of
// errors. Argument checks here; the work in comm/ and bootstrap/.
#include <baton.h>

#include <string>
#include <vector>

#include "api/checks.h"
#include "api/handles.h"
#include "base/log.h"
#include "base/settings.h"
#include "bootstrap/launcher_env.h"
#include "bootstrap/rendezvous.h"
#include "comm/shrink.h"
#include "comm/split.h"
#include "launch/group.h"
#include "topology/binding.h"

#pragma GCC visibility push(default)

using namespace baton;  // NOLINT: the C API below is a thin layer over it

namespace {

// Creates a communicator and its handle; failures name the rank.
batonResult_t InitRank(const char* fn, const Settings& settings, batonComm_t* comm, int nranks,
                       const UniqueIdData& data, int rank) {
  std::shared_ptr<Communicator> impl;
  Status st = Communicator::Create(settings, data, nranks, rank, &impl);
  if (!st.ok())
    return Fail(fn,
                st.WithContext("rank " + std::to_string(rank) + " of " + std::to_string(nranks)));
  *comm = RegisterComm(std::move(impl));
  return batonSuccess;
}

batonResult_t DestroyComm(const char* fn, batonComm_t comm, bool abort) {
  std::shared_ptr<Communicator> impl = UnregisterComm(comm);
  if (!impl) return Fail(fn, InvalidArgument("comm is NULL or not live (destroyed twice?)"));
  if (abort) impl->Abort();
  // Queued stream work holds its own reference; wait for it so the
  // connections close only after the last collective.
  impl->WaitPending();
  return batonSuccess;
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
  return InitRank(fn, ReadSettings(), comm, nranks, data, rank);
}

batonResult_t batonCommInitFromEnv(batonComm_t* comm) {
  const char* fn = "batonCommInitFromEnv";
  if (comm == nullptr) return Fail(fn, InvalidArgument("comm is NULL"));
  *comm = nullptr;
  const Settings settings = ReadSettings();
  LauncherJob job;
  BATON_API_CHECK(fn, JobFromEnvironment(settings, &job), nullptr);
  // Before the rendezvous, so that the place this rank reports is where it
  // will run.
  bool bound = false;
  BATON_API_CHECK(
      fn, BindThisRank(settings.bind, settings.topo_file, job.local_rank, job.local_size, &bound),
      nullptr);
  if (bound)
    BATON_INFO(kLogInit, "bound as local rank %d of %d (BATON_BIND=%s)", job.local_rank,
               job.local_size, settings.bind.c_str());
  return InitRank(fn, settings, comm, job.size, job.id, job.rank);
}

batonResult_t batonCommCount(const batonComm_t comm, int* count) {
  auto c = LookupComm(comm);
  if (!c) return Fail("batonCommCount", InvalidArgument("comm is NULL or not live"));
  if (count == nullptr) return Fail("batonCommCount", InvalidArgument("count is NULL"), c.get());
  *count = c->nranks();
  return batonSuccess;
}

batonResult_t batonCommUserRank(const batonComm_t comm, int* rank) {
  auto c = LookupComm(comm);
  if (!c) return Fail("batonCommUserRank", InvalidArgument("comm is NULL or not live"));
  if (rank == nullptr) return Fail("batonCommUserRank", InvalidArgument("rank is NULL"), c.get());
  *rank = c->rank();
  return batonSuccess;
}

batonResult_t batonCommGetAsyncError(batonComm_t comm, batonResult_t* async_error) {
  auto c = LookupComm(comm);
  if (!c) return Fail("batonCommGetAsyncError", InvalidArgument("comm is NULL or not live"));
  if (async_error == nullptr)
    return Fail("batonCommGetAsyncError", InvalidArgument("async_error is NULL"), c.get());
  *async_error = c->async_error();
  return batonSuccess;
}

batonResult_t batonCommDestroy(batonComm_t comm) {
  return DestroyComm("batonCommDestroy", comm, false);
}

batonResult_t batonCommAbort(batonComm_t comm) {
  return DestroyComm("batonCommAbort", comm, true);
}

batonResult_t batonCommSplit(batonComm_t comm, int color, int key, batonComm_t* newcomm) {
  const char* fn = "batonCommSplit";
  CallSite site;
  BATON_API_CHECK(fn, BeginCall(comm, nullptr, &site), site.comm.get());
  Communicator* c = site.comm.get();
  if (newcomm == nullptr) return Fail(fn, InvalidArgument("newcomm is NULL"), c);
  if (color < 0 && color != BATON_SPLIT_NOCOLOR)
    return Fail(fn, InvalidArgument("color must be >= 0 or BATON_SPLIT_NOCOLOR"), c);
  if (InGroup()) return Fail(fn, InvalidUsage("batonCommSplit inside a group"), c);
  *newcomm = nullptr;
  std::shared_ptr<Communicator> child;
  BATON_API_CHECK(fn, SplitCommunicator(*c, ReadSettings(), color, key, &child), c);
  if (child) *newcomm = RegisterComm(std::move(child));
  return batonSuccess;
}

batonResult_t batonCommShrink(batonComm_t comm, int* excludeRanksList, int excludeRanksCount,
                              batonComm_t* newcomm, batonConfig_t* config, int shrinkFlags) {
  const char* fn = "batonCommShrink";
  // A failed communicator is what a shrink is for: look it up without
  // failing on its sticky error.
  std::shared_ptr<Communicator> c = LookupComm(comm);
  if (!c) return Fail(fn, InvalidArgument("comm is NULL or not live"));
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
  if (config != nullptr)
    return Fail(fn, InvalidArgument("config must be NULL (no configuration fields yet)"), c.get());
  if (shrinkFlags != BATON_SHRINK_DEFAULT && shrinkFlags != BATON_SHRINK_ABORT)
    return Fail(fn,
                InvalidArgument("shrinkFlags " + std::to_string(shrinkFlags) +
                                ": expected BATON_SHRINK_DEFAULT or BATON_SHRINK_ABORT"),
                c.get());
  if (InGroup()) return Fail(fn, InvalidUsage("batonCommShrink inside a group"), c.get());
  const std::vector<int> excluded(excludeRanksList, excludeRanksList + excludeRanksCount);
  std::shared_ptr<Communicator> child;
  BATON_API_CHECK(
      fn,
      ShrinkCommunicator(*c, ReadSettings(), excluded, shrinkFlags == BATON_SHRINK_ABORT, &child),
      c.get());
  *newcomm = RegisterComm(std::move(child));
  return batonSuccess;
}

}  // extern "C"

#pragma GCC visibility pop
