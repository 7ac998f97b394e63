// The C API: argument checks, handle registries, and the translation of
// Status into batonResult_t plus batonGetLastError's text.
#include <baton.h>

#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "baton_config.h"
#include "bootstrap/bootstrap.h"
#include "bootstrap/host_id.h"
#include "core/comm.h"
#include "core/env.h"
#include "core/group.h"
#include "core/log.h"
#include "core/stream.h"
#if BATON_HAVE_CUDA
#include "core/cuda_device.h"  // CUDA device buffers (docs/cuda.md)
#endif
#include "kernels/cpu_reduce.h"
#include "tuning/select.h"

#pragma GCC visibility push(default)

namespace baton {
namespace {

// Live handles. Looking a handle up here is what turns a destroyed or
// foreign pointer into batonInvalidArgument instead of a crash.
std::mutex g_registry_mu;
std::map<batonComm*, std::unique_ptr<batonComm>> g_comms;
std::map<batonStream*, std::unique_ptr<batonStream>> g_streams;

thread_local std::string tls_last_error;
thread_local std::string tls_last_error_copy;

std::shared_ptr<Communicator> LookupComm(batonComm_t handle) {
  std::lock_guard<std::mutex> lock(g_registry_mu);
  auto it = g_comms.find(handle);
  return it == g_comms.end() ? nullptr : it->second->impl;
}

bool StreamIsLive(batonStream_t handle) {
  std::lock_guard<std::mutex> lock(g_registry_mu);
  return g_streams.count(handle) != 0;
}

// Records a failure where batonGetLastError finds it and returns its code.
batonResult_t Fail(const char* fn, const Status& st, Communicator* comm = nullptr) {
  std::string message = std::string(fn) + ": " + st.message();
  tls_last_error = message;
  if (comm) comm->setLastError(message);
  if (st.code() != batonInvalidArgument && st.code() != batonInvalidUsage) {
    BATON_WARN(kLogColl, "%s", message.c_str());
  } else {
    BATON_INFO(kLogColl, "%s", message.c_str());
  }
  return st.code();
}

Status CheckDatatype(batonDataType_t dt) {
  if (static_cast<int>(dt) < 0 || static_cast<int>(dt) >= batonNumTypes)
    return InvalidArgument("invalid datatype " + std::to_string(static_cast<int>(dt)));
  return Status::Ok();
}

Status CheckOp(batonRedOp_t op) {
  if (static_cast<int>(op) < 0 || static_cast<int>(op) >= batonNumOps)
    return InvalidArgument("invalid reduction op " + std::to_string(static_cast<int>(op)));
  return Status::Ok();
}

// count elements of dt, times `multiplier` (ranks), must fit in memory.
Status CheckCount(size_t count, batonDataType_t dt, size_t multiplier = 1) {
  const size_t limit = static_cast<size_t>(PTRDIFF_MAX);
  size_t es = datatypeSize(dt);
  if (multiplier == 0 || count > limit / es / multiplier)
    return InvalidArgument("count " + std::to_string(count) + " of " + datatypeName(dt) +
                           " overflows the address space");
  return Status::Ok();
}

Status CheckBuffer(const void* p, size_t count, const char* name) {
  if (p == nullptr && count > 0) return InvalidArgument(std::string(name) + " is NULL");
  return Status::Ok();
}

Status CheckRank(int r, int nranks, const char* what) {
  if (r < 0 || r >= nranks)
    return InvalidArgument(std::string(what) + " " + std::to_string(r) + " out of range [0, " +
                           std::to_string(nranks) + ")");
  return Status::Ok();
}

Status CheckStream(batonStream_t stream) {
#if BATON_HAVE_CUDA
  // With a GPU, a foreign handle may be a cudaStream_t: CudaTryLaunch decides.
  if (CudaDeviceAvailable()) return Status::Ok();
#endif
  if (stream != nullptr && !StreamIsLive(stream))
    return InvalidArgument(
        "stream is not a live batonStream_t from batonStreamCreate (CUDA streams need a "
        "CUDA build and device buffers)");
  return Status::Ok();
}

// The common front half of every communication call.
struct CallContext {
  std::shared_ptr<Communicator> comm;
  Status status;
};

CallContext Begin(batonComm_t handle, batonStream_t stream) {
  CallContext ctx;
  if (handle == nullptr) {
    ctx.status = InvalidArgument("comm is NULL");
    return ctx;
  }
  ctx.comm = LookupComm(handle);
  if (!ctx.comm) {
    ctx.status = InvalidArgument("comm is not a live communicator (destroyed, or never created)");
    return ctx;
  }
  ctx.status = CheckStream(stream);
  return ctx;
}

CollArgs MakeArgs(const Communicator& comm, const void* send, void* recv, size_t count,
                  batonDataType_t dt, batonRedOp_t op, int root) {
  CollArgs a;
  a.send = send;
  a.recv = recv;
  a.count = count;
  a.datatype = dt;
  a.op = op;
  a.root = root;
  a.rank = comm.rank();
  a.nranks = comm.nranks();
  a.ring = &comm.ring();
  a.chunk_bytes = comm.config().chunk_bytes;
  return a;
}

batonResult_t LaunchCall(const char* fn, CallContext& ctx, batonStream_t stream,
                         ScheduleBuilder build) {
  baton::Launch l;
  l.comm = ctx.comm;
  l.stream = stream;
  l.build = std::move(build);
  Status st = Submit(std::move(l));
  if (!st.ok()) return Fail(fn, st, ctx.comm.get());
  return batonSuccess;
}

// Queues a call on device buffers inside a group (CudaRoute::kQueue).
batonResult_t LaunchDeviceCall(const char* fn, CallContext& ctx, batonStream_t stream,
                               StagedPart part) {
  baton::Launch l;
  l.comm = ctx.comm;
  l.stream = stream;
  l.on_device = true;
  l.device = std::move(part);
  Status st = Submit(std::move(l));
  if (!st.ok()) return Fail(fn, st, ctx.comm.get());
  return batonSuccess;
}

// Hex decoding of BATON_UNIQUE_ID (as batonrun exports it).
bool DecodeHexId(const std::string& hex, batonUniqueId* id) {
  if (hex.size() != 2 * sizeof(id->internal)) return false;
  for (size_t i = 0; i < sizeof(id->internal); ++i) {
    unsigned v;
    if (sscanf(hex.c_str() + 2 * i, "%2x", &v) != 1) return false;
    id->internal[i] = static_cast<char>(v);
  }
  return true;
}

struct EnvRank {
  int rank = -1, size = -1;
  const char* source = nullptr;
};

EnvRank RankFromEnv() {
  static const char* kPairs[][2] = {
      {"BATON_RANK", "BATON_WORLD_SIZE"}, {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
      {"PMI_RANK", "PMI_SIZE"},           {"PMIX_RANK", "PMIX_SIZE"},
      {"SLURM_PROCID", "SLURM_NTASKS"},   {"RANK", "WORLD_SIZE"}};
  EnvRank r;
  for (auto& pair : kPairs) {
    if (GetEnv(pair[0]) && GetEnv(pair[1])) {
      r.rank = static_cast<int>(GetEnvInt(pair[0], -1));
      r.size = static_cast<int>(GetEnvInt(pair[1], -1));
      r.source = pair[0];
      return r;
    }
  }
  return r;
}

// The unique id of a job launched without one (mpirun, srun, torchrun):
// everyone derives the same id from the root address and job identity;
// rank 0 serves the rendezvous at that address.
Status IdFromRootAddress(const std::string& root, int rank, UniqueIdData* data) {
  SockAddr addr;
  BATON_RETURN_IF_ERROR(ParseHostPort(root, &addr));
  memset(data, 0, sizeof(*data));
  data->magic = kUniqueIdMagic;
  data->version = 1;
  data->root = ToWire(addr);
  std::string seed = "baton:" + root;
  for (const char* v : {"BATON_SECRET", "SLURM_JOB_ID", "OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE",
                        "TORCHELASTIC_RUN_ID"})
    if (auto val = GetEnv(v)) seed += std::string(":") + v + "=" + *val;
  for (int i = 0; i < kSecretBytes / 8; ++i) {
    uint64_t h =
        Fnv1a64(seed.data(), seed.size(), 0xcbf29ce484222325ull + i * 0x9e3779b97f4a7c15ull);
    memcpy(data->secret + 8 * i, &h, 8);
  }
  data->comm_id = Fnv1a64(seed.data(), seed.size(), 0x1234567887654321ull);
  if (rank == 0) {
    Fd listener;
    SockAddr bound;
    Status st = ListenOn(addr, &listener, &bound);
    if (!st.ok()) {
      // The name may resolve to an address this host cannot bind (NAT,
      // /etc/hosts quirks): listen on all interfaces at that port instead.
      SockAddr any;
      any.storage.ss_family = addr.family();
      any.len = addr.len;
      any.setPort(addr.port());
      BATON_RETURN_IF_ERROR(ListenOn(any, &listener, &bound).withContext("BATON_ROOT=" + root));
    }
    BATON_RETURN_IF_ERROR(
        StartRendezvousServer(std::move(listener), *data, (double)GetEnvInt("BATON_TIMEOUT", 300)));
  }
  return Status::Ok();
}

#define BATON_CHECK(fn, expr, comm)            \
  do {                                         \
    ::baton::Status _st = (expr);              \
    if (!_st.ok()) return Fail(fn, _st, comm); \
  } while (0)

// What a collective entry point checks; the algorithm comes from
// SelectAlgorithm.
struct CollectiveSpec {
  const char* fn;
  Collective collective;
  bool has_op;
  bool has_root;
  bool per_rank_blocks;  // count is per rank: buffers hold nranks blocks
  bool send_only_at_root;
  bool recv_only_at_root;
};

batonResult_t RunCollective(const CollectiveSpec& spec, const void* sendbuff, void* recvbuff,
                            size_t count, batonDataType_t datatype, batonRedOp_t op, int root,
                            batonComm_t comm, batonStream_t stream) {
  const char* fn = spec.fn;
  CallContext ctx = Begin(comm, stream);
  BATON_CHECK(fn, ctx.status, ctx.comm.get());
  Communicator* c = ctx.comm.get();
  BATON_CHECK(fn, CheckDatatype(datatype), c);
  if (spec.has_op) BATON_CHECK(fn, CheckOp(op), c);
  BATON_CHECK(fn, CheckCount(count, datatype, spec.per_rank_blocks ? c->nranks() : 1), c);
  if (spec.has_root) BATON_CHECK(fn, CheckRank(root, c->nranks(), "root"), c);
  const bool is_root = c->rank() == root;
  if (!spec.send_only_at_root || is_root)
    BATON_CHECK(fn, CheckBuffer(sendbuff, count, "sendbuff"), c);
  if (!spec.recv_only_at_root || is_root)
    BATON_CHECK(fn, CheckBuffer(recvbuff, count, "recvbuff"), c);
  const size_t bytes = count * datatypeSize(datatype) * (spec.per_rank_blocks ? c->nranks() : 1);
  AlgorithmImpl algo;
  BATON_CHECK(
      fn, SelectAlgorithm(c->config().algorithms, spec.collective, bytes, c->nranks(), &algo), c);
  BATON_TRACE(kLogColl, "%s: %zu bytes with %s", fn, bytes, AlgorithmName(algo.algorithm));
  CollArgs a = MakeArgs(*c, sendbuff, recvbuff, count, datatype, spec.has_op ? op : batonSum,
                        spec.has_root ? root : 0);
  BuildFn build = algo.build;
#if BATON_HAVE_CUDA
  if (CudaDeviceAvailable()) {  // CUDA hook: device buffers or a cudaStream_t
    Status st;
    auto staged = [a, build](const void* send, void* recv, Schedule* s) {
      CollArgs b = a;
      b.send = send;
      b.recv = recv;
      build(b, s);
    };
    const IpcCall ipc{spec.collective,          count,     datatype,   spec.has_op ? op : batonSum,
                      spec.has_root ? root : 0, c->rank(), c->nranks()};
    const CudaCallBuffers io = CudaBuffersFor(spec.collective, sendbuff, recvbuff, count,
                                              datatypeSize(datatype), c->nranks(), c->rank(), root);
    switch (CudaTryLaunch(ctx.comm, stream, stream != nullptr && StreamIsLive(stream), InGroup(),
                          io, staged, &ipc, &st)) {
      case CudaRoute::kDone:
        return st.ok() ? batonSuccess : Fail(fn, st, c);
      case CudaRoute::kQueue:
        return LaunchDeviceCall(fn, ctx, stream, {io, staged});
      case CudaRoute::kHost:
        break;
    }
  }
#endif
  if (stream == nullptr && !InGroup()) {
    // Synchronous: build and run right here. Capturing by reference keeps the
    // builder within std::function's inline storage, so the latency path
    // allocates nothing.
    Status st = c->run([&a, build](Schedule* s) { build(a, s); });
    return st.ok() ? batonSuccess : Fail(fn, st, c);
  }
  return LaunchCall(fn, ctx, stream, [a, build](Schedule* s) { build(a, s); });
}

const CollectiveSpec kAllReduce{
    "batonAllReduce", Collective::kAllReduce, true, false, false, false, false};
const CollectiveSpec kBroadcast{
    "batonBroadcast", Collective::kBroadcast, false, true, false, true, false};
const CollectiveSpec kReduce{"batonReduce", Collective::kReduce, true, true, false, false, true};
const CollectiveSpec kAllGather{
    "batonAllGather", Collective::kAllGather, false, false, true, false, false};
const CollectiveSpec kReduceScatter{
    "batonReduceScatter", Collective::kReduceScatter, true, false, true, false, false};
const CollectiveSpec kAlltoAll{
    "batonAlltoAll", Collective::kAlltoAll, false, false, true, false, false};

}  // namespace
}  // namespace baton

using namespace baton;  // NOLINT: the C API below is a thin layer over it

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
  if (comm != nullptr) {
    if (auto c = LookupComm(comm)) {
      tls_last_error_copy = c->lastError();
      return tls_last_error_copy.c_str();
    }
  }
  tls_last_error_copy = tls_last_error;
  return tls_last_error_copy.c_str();
}

batonResult_t batonGetUniqueId(batonUniqueId* uniqueId) {
  if (uniqueId == nullptr) return Fail("batonGetUniqueId", InvalidArgument("uniqueId is NULL"));
  Status st = CreateUniqueId(uniqueId);
  if (!st.ok()) return Fail("batonGetUniqueId", st);
  return batonSuccess;
}

static batonResult_t InitRank(const char* fn, batonComm_t* comm, int nranks,
                              const UniqueIdData& data, int rank) {
  std::shared_ptr<Communicator> impl;
  Status st = Communicator::Create(data, nranks, rank, &impl);
  if (!st.ok())
    return Fail(fn,
                st.withContext("rank " + std::to_string(rank) + " of " + std::to_string(nranks)));
  auto handle = std::make_unique<batonComm>();
  handle->impl = std::move(impl);
  batonComm* raw = handle.get();
  {
    std::lock_guard<std::mutex> lock(g_registry_mu);
    g_comms.emplace(raw, std::move(handle));
  }
  *comm = raw;
  return batonSuccess;
}

batonResult_t batonCommInitRank(batonComm_t* comm, int nranks, batonUniqueId commId, int rank) {
  const char* fn = "batonCommInitRank";
  if (comm == nullptr) return Fail(fn, InvalidArgument("comm is NULL"));
  *comm = nullptr;
  if (nranks < 1) return Fail(fn, InvalidArgument("nranks " + std::to_string(nranks) + " < 1"));
  if (Status st = CheckRank(rank, nranks, "rank"); !st.ok()) return Fail(fn, st);
  UniqueIdData data;
  if (Status st = DecodeUniqueId(commId, &data); !st.ok()) return Fail(fn, st);
  return InitRank(fn, comm, nranks, data, rank);
}

batonResult_t batonCommInitFromEnv(batonComm_t* comm) {
  const char* fn = "batonCommInitFromEnv";
  if (comm == nullptr) return Fail(fn, InvalidArgument("comm is NULL"));
  *comm = nullptr;
  EnvRank er = RankFromEnv();
  if (er.source == nullptr)
    return Fail(fn, InvalidUsage("no rank in the environment: set BATON_RANK and "
                                 "BATON_WORLD_SIZE, or launch with batonrun, mpirun, srun or "
                                 "torchrun"));
  if (er.size < 1 || er.rank < 0 || er.rank >= er.size)
    return Fail(fn, InvalidArgument(std::string("bad rank/size from ") + er.source + ": rank " +
                                    std::to_string(er.rank) + " of " + std::to_string(er.size)));
  UniqueIdData data;
  if (auto hex = GetEnv("BATON_UNIQUE_ID")) {
    batonUniqueId id;
    if (!DecodeHexId(*hex, &id))
      return Fail(fn, InvalidArgument("BATON_UNIQUE_ID is not 256 hex digits"));
    if (Status st = DecodeUniqueId(id, &data); !st.ok()) return Fail(fn, st);
  } else {
    std::string root;
    if (auto r = GetEnv("BATON_ROOT")) {
      root = *r;
    } else if (auto addr = GetEnv("MASTER_ADDR")) {
      root = *addr + ":" + GetEnv("MASTER_PORT").value_or("29500");
    } else {
      return Fail(fn, InvalidUsage("no rendezvous address: set BATON_ROOT=host:port (or "
                                   "MASTER_ADDR/MASTER_PORT), or launch with batonrun"));
    }
    if (Status st = IdFromRootAddress(root, er.rank, &data); !st.ok()) return Fail(fn, st);
  }
  BATON_INFO(kLogInit, "rank %d of %d from %s", er.rank, er.size, er.source);
  return InitRank(fn, comm, er.size, data, er.rank);
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

batonResult_t batonCommGetAsyncError(batonComm_t comm, batonResult_t* asyncError) {
  auto c = LookupComm(comm);
  if (!c) return Fail("batonCommGetAsyncError", InvalidArgument("comm is NULL or not live"));
  if (asyncError == nullptr)
    return Fail("batonCommGetAsyncError", InvalidArgument("asyncError is NULL"), c.get());
  *asyncError = c->asyncError();
  return batonSuccess;
}

static batonResult_t DestroyComm(const char* fn, batonComm_t comm, bool abort) {
  std::unique_ptr<batonComm> handle;
  {
    std::lock_guard<std::mutex> lock(g_registry_mu);
    auto it = g_comms.find(comm);
    if (it == g_comms.end())
      return Fail(fn, InvalidArgument("comm is NULL or not live (destroyed twice?)"));
    handle = std::move(it->second);
    g_comms.erase(it);
  }
  if (abort) handle->impl->abort();
  // Queued stream work holds its own reference; wait for it so the
  // connections close only after the last collective.
  handle->impl->waitPending();
  return batonSuccess;
}

batonResult_t batonCommDestroy(batonComm_t comm) {
  return DestroyComm("batonCommDestroy", comm, false);
}
batonResult_t batonCommAbort(batonComm_t comm) {
  return DestroyComm("batonCommAbort", comm, true);
}

batonResult_t batonStreamCreate(batonStream_t* stream) {
  if (stream == nullptr) return Fail("batonStreamCreate", InvalidArgument("stream is NULL"));
  auto s = std::make_unique<batonStream>();
  batonStream* raw = s.get();
  std::lock_guard<std::mutex> lock(g_registry_mu);
  g_streams.emplace(raw, std::move(s));
  *stream = raw;
  return batonSuccess;
}

batonResult_t batonStreamSynchronize(batonStream_t stream) {
  if (stream == nullptr || !StreamIsLive(stream))
    return Fail("batonStreamSynchronize", InvalidArgument("stream is NULL or not live"));
  Status st = stream->impl.synchronize();
  if (!st.ok()) return Fail("batonStreamSynchronize", st);
  return batonSuccess;
}

batonResult_t batonStreamQuery(batonStream_t stream) {
  if (stream == nullptr || !StreamIsLive(stream))
    return Fail("batonStreamQuery", InvalidArgument("stream is NULL or not live"));
  return stream->impl.query();
}

batonResult_t batonStreamDestroy(batonStream_t stream) {
  std::unique_ptr<batonStream> s;
  {
    std::lock_guard<std::mutex> lock(g_registry_mu);
    auto it = g_streams.find(stream);
    if (it == g_streams.end())
      return Fail("batonStreamDestroy", InvalidArgument("stream is NULL or not live"));
    s = std::move(it->second);
    g_streams.erase(it);
  }
  return batonSuccess;  // ~HostStream waits for the queue to drain
}

batonResult_t batonAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                             batonDataType_t datatype, batonRedOp_t op, batonComm_t comm,
                             batonStream_t stream) {
  return RunCollective(kAllReduce, sendbuff, recvbuff, count, datatype, op, 0, comm, stream);
}

batonResult_t batonBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                             batonDataType_t datatype, int root, batonComm_t comm,
                             batonStream_t stream) {
  return RunCollective(kBroadcast, sendbuff, recvbuff, count, datatype, batonSum, root, comm,
                       stream);
}

batonResult_t batonReduce(const void* sendbuff, void* recvbuff, size_t count,
                          batonDataType_t datatype, batonRedOp_t op, int root, batonComm_t comm,
                          batonStream_t stream) {
  return RunCollective(kReduce, sendbuff, recvbuff, count, datatype, op, root, comm, stream);
}

batonResult_t batonAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                             batonDataType_t datatype, batonComm_t comm, batonStream_t stream) {
  return RunCollective(kAllGather, sendbuff, recvbuff, sendcount, datatype, batonSum, 0, comm,
                       stream);
}

batonResult_t batonReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                 batonDataType_t datatype, batonRedOp_t op, batonComm_t comm,
                                 batonStream_t stream) {
  return RunCollective(kReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, 0, comm,
                       stream);
}

batonResult_t batonAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                            batonDataType_t datatype, batonComm_t comm, batonStream_t stream) {
  return RunCollective(kAlltoAll, sendbuff, recvbuff, count, datatype, batonSum, 0, comm, stream);
}

static batonResult_t PointToPoint(const char* fn, bool is_send, const void* sendbuff,
                                  void* recvbuff, size_t count, batonDataType_t datatype, int peer,
                                  batonComm_t comm, batonStream_t stream) {
  CallContext ctx = Begin(comm, stream);
  BATON_CHECK(fn, ctx.status, ctx.comm.get());
  Communicator* c = ctx.comm.get();
  BATON_CHECK(fn, CheckDatatype(datatype), c);
  BATON_CHECK(fn, CheckCount(count, datatype), c);
  BATON_CHECK(fn, CheckRank(peer, c->nranks(), "peer"), c);
  BATON_CHECK(
      fn, CheckBuffer(is_send ? sendbuff : recvbuff, count, is_send ? "sendbuff" : "recvbuff"), c);
  CollArgs a = MakeArgs(*c, sendbuff, recvbuff, count, datatype, batonSum, 0);
  bool on_device = false;  // a device call queued in a group (or a self send/recv)
  StagedPart device;
#if BATON_HAVE_CUDA
  if (CudaDeviceAvailable()) {  // CUDA hook: device buffers or a cudaStream_t
    Status st;
    const size_t bytes = count * datatypeSize(datatype);
    CudaCallBuffers io;
    if (is_send) {
      io.send = sendbuff;
      io.send_bytes = bytes;
    } else {
      io.recv = recvbuff;
      io.recv_bytes = bytes;
    }
    auto staged = [a, peer, is_send](const void* send, void* recv, Schedule* s) {
      CollArgs b = a;
      b.send = send;
      b.recv = recv;
      if (is_send) {
        BuildSend(b, peer, s);
      } else {
        BuildRecv(b, peer, s);
      }
    };
    switch (CudaTryLaunch(ctx.comm, stream, stream != nullptr && StreamIsLive(stream),
                          InGroup() || peer == c->rank(), io, staged, nullptr, &st)) {
      case CudaRoute::kDone:
        return st.ok() ? batonSuccess : Fail(fn, st, c);
      case CudaRoute::kQueue:
        on_device = true;
        device = {io, staged};
        break;
      case CudaRoute::kHost:
        break;
    }
  }
#endif
  baton::Launch l;
  l.comm = ctx.comm;
  l.stream = stream;
  l.on_device = on_device;
  l.device = std::move(device);
  if (peer == c->rank()) {
    l.self = is_send ? baton::Launch::Self::kSend : baton::Launch::Self::kRecv;
    l.self_src = sendbuff;
    l.self_dst = recvbuff;
    l.self_bytes = count * datatypeSize(datatype);
  } else if (on_device) {
    // l.device builds the schedule at batonGroupEnd.
  } else if (is_send) {
    l.build = [a, peer](Schedule* s) { BuildSend(a, peer, s); };
  } else {
    l.build = [a, peer](Schedule* s) { BuildRecv(a, peer, s); };
  }
  Status st = Submit(std::move(l));
  if (!st.ok()) return Fail(fn, st, c);
  return batonSuccess;
}

batonResult_t batonSend(const void* sendbuff, size_t count, batonDataType_t datatype, int peer,
                        batonComm_t comm, batonStream_t stream) {
  return PointToPoint("batonSend", true, sendbuff, nullptr, count, datatype, peer, comm, stream);
}

batonResult_t batonRecv(void* recvbuff, size_t count, batonDataType_t datatype, int peer,
                        batonComm_t comm, batonStream_t stream) {
  return PointToPoint("batonRecv", false, nullptr, recvbuff, count, datatype, peer, comm, stream);
}

batonResult_t batonBarrier(batonComm_t comm, batonStream_t stream) {
  const char* fn = "batonBarrier";
  CallContext ctx = Begin(comm, stream);
  BATON_CHECK(fn, ctx.status, ctx.comm.get());
  CollArgs a = MakeArgs(*ctx.comm, nullptr, nullptr, 0, batonUint8, batonSum, 0);
#if BATON_HAVE_CUDA
  if (CudaDeviceAvailable()) {  // CUDA hook: a barrier ordered on a cudaStream_t
    Status st;
    auto staged = [a](const void*, void*, Schedule* s) { BuildDisseminationBarrier(a, s); };
    switch (CudaTryLaunch(ctx.comm, stream, stream != nullptr && StreamIsLive(stream), InGroup(),
                          {}, staged, nullptr, &st)) {
      case CudaRoute::kDone:
        return st.ok() ? batonSuccess : Fail(fn, st, ctx.comm.get());
      case CudaRoute::kQueue:
        return LaunchDeviceCall(fn, ctx, stream, {{}, staged});
      case CudaRoute::kHost:
        break;
    }
  }
#endif
  return LaunchCall(fn, ctx, stream, [a](Schedule* s) { BuildDisseminationBarrier(a, s); });
}

batonResult_t batonGroupStart(void) {
  GroupStart();
  return batonSuccess;
}

batonResult_t batonGroupEnd(void) {
  Status st = GroupEnd();
  if (!st.ok()) return Fail("batonGroupEnd", st);
  return batonSuccess;
}

batonResult_t batonCommSplit(batonComm_t comm, int color, int key, batonComm_t* newcomm) {
  const char* fn = "batonCommSplit";
  CallContext ctx = Begin(comm, nullptr);
  BATON_CHECK(fn, ctx.status, ctx.comm.get());
  Communicator* c = ctx.comm.get();
  if (newcomm == nullptr) return Fail(fn, InvalidArgument("newcomm is NULL"), c);
  if (color < 0 && color != BATON_SPLIT_NOCOLOR)
    return Fail(fn, InvalidArgument("color must be >= 0 or BATON_SPLIT_NOCOLOR"), c);
  if (InGroup()) return Fail(fn, InvalidUsage("batonCommSplit inside a group"), c);
  *newcomm = nullptr;
  const int n = c->nranks(), me = c->rank();

  // 1. Everyone learns everyone's (color, key).
  struct Entry {
    int32_t color, key;
  };
  std::vector<Entry> all(n);
  Entry mine{color, key};
  {
    Schedule s;
    BuildRingAllGather(MakeArgs(*c, &mine, all.data(), sizeof(Entry), batonUint8, batonSum, 0), &s);
    BATON_CHECK(fn, c->run(s), c);
  }
  // 2. The lowest rank of each color makes the new unique id; everyone
  //    gathers all ids and takes its leader's.
  std::vector<int> members;
  for (int r = 0; r < n; ++r)
    if (color != BATON_SPLIT_NOCOLOR && all[r].color == color) members.push_back(r);
  batonUniqueId my_id;
  memset(&my_id, 0, sizeof(my_id));
  if (!members.empty() && members[0] == me) {
    Status st = CreateUniqueId(&my_id);
    if (!st.ok()) return Fail(fn, st, c);
  }
  std::vector<batonUniqueId> ids(n);
  {
    Schedule s;
    BuildRingAllGather(
        MakeArgs(*c, &my_id, ids.data(), sizeof(batonUniqueId), batonUint8, batonSum, 0), &s);
    BATON_CHECK(fn, c->run(s), c);
  }
  if (color == BATON_SPLIT_NOCOLOR) return batonSuccess;
  std::stable_sort(members.begin(), members.end(),
                   [&](int a, int b) { return all[a].key < all[b].key; });
  int new_rank = static_cast<int>(std::find(members.begin(), members.end(), me) - members.begin());
  int leader = *std::min_element(members.begin(), members.end());
  UniqueIdData data;
  BATON_CHECK(fn, DecodeUniqueId(ids[leader], &data), c);
  batonResult_t r = InitRank(fn, newcomm, static_cast<int>(members.size()), data, new_rank);
  if (r != batonSuccess) c->setLastError(tls_last_error);
  return r;
}

}  // extern "C"

#pragma GCC visibility pop
