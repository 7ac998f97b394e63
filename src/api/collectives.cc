// The C API of communication: collectives, send/recv, barrier and groups.
// Each entry point checks its arguments and hands the call to launch/.
#include <baton.h>

#include "api/checks.h"
#include "api/handles.h"
#include "launch/call.h"
#include "launch/group.h"

#pragma GCC visibility push(default)

using namespace baton;  // NOLINT: the C API below is a thin layer over it

namespace {

// What a collective entry point checks.
struct CollectiveSpec {
  const char* fn;
  Collective collective;
  bool has_op;
  bool has_root;
  bool send_only_at_root;
  bool recv_only_at_root;
};

constexpr CollectiveSpec kAllReduce{
    "batonAllReduce", Collective::kAllReduce, true, false, false, false};
constexpr CollectiveSpec kBroadcast{
    "batonBroadcast", Collective::kBroadcast, false, true, true, false};
constexpr CollectiveSpec kReduce{"batonReduce", Collective::kReduce, true, true, false, true};
constexpr CollectiveSpec kAllGather{
    "batonAllGather", Collective::kAllGather, false, false, false, false};
constexpr CollectiveSpec kReduceScatter{
    "batonReduceScatter", Collective::kReduceScatter, true, false, false, false};
constexpr CollectiveSpec kAlltoAll{
    "batonAlltoAll", Collective::kAlltoAll, false, false, false, false};
constexpr CollectiveSpec kGather{"batonGather", Collective::kGather, false, true, false, true};
constexpr CollectiveSpec kScatter{"batonScatter", Collective::kScatter, false, true, true, false};

batonResult_t RunCollective(const CollectiveSpec& spec, const void* sendbuff, void* recvbuff,
                            size_t count, batonDataType_t datatype, batonRedOp_t op, int root,
                            batonComm_t comm, batonStream_t stream) {
  const char* fn = spec.fn;
  CallSite site;
  BATON_API_CHECK(fn, BeginCall(comm, stream, &site), site.comm.get());
  Communicator* c = site.comm.get();
  BATON_API_CHECK(fn, CheckDatatype(datatype), c);
  CollectiveCall call;
  if (spec.has_op) BATON_API_CHECK(fn, ResolveOp(*c, op, datatype, &call.premul, &call.scalar), c);
  BATON_API_CHECK(
      fn, CheckCount(count, datatype, CountIsPerRank(spec.collective) ? c->nranks() : 1), c);
  if (spec.has_root) BATON_API_CHECK(fn, CheckRank(root, c->nranks(), "root"), c);
  const bool is_root = c->rank() == root;
  if (!spec.send_only_at_root || is_root)
    BATON_API_CHECK(fn, CheckBuffer(sendbuff, count, "sendbuff"), c);
  if (!spec.recv_only_at_root || is_root)
    BATON_API_CHECK(fn, CheckBuffer(recvbuff, count, "recvbuff"), c);
  call.collective = spec.collective;
  call.send = sendbuff;
  call.recv = recvbuff;
  call.count = count;
  call.datatype = datatype;
  call.op = spec.has_op ? op : batonSum;
  call.root = spec.has_root ? root : 0;
  BATON_API_CHECK(fn, LaunchCollective(site, call), c);
  return batonSuccess;
}

batonResult_t PointToPoint(const char* fn, bool is_send, const void* sendbuff, void* recvbuff,
                           size_t count, batonDataType_t datatype, int peer, batonComm_t comm,
                           batonStream_t stream) {
  CallSite site;
  BATON_API_CHECK(fn, BeginCall(comm, stream, &site), site.comm.get());
  Communicator* c = site.comm.get();
  BATON_API_CHECK(fn, CheckDatatype(datatype), c);
  BATON_API_CHECK(fn, CheckCount(count, datatype), c);
  BATON_API_CHECK(fn, CheckRank(peer, c->nranks(), "peer"), c);
  BATON_API_CHECK(
      fn, CheckBuffer(is_send ? sendbuff : recvbuff, count, is_send ? "sendbuff" : "recvbuff"), c);
  BATON_API_CHECK(fn, LaunchPointToPoint(site, is_send, sendbuff, recvbuff, count, datatype, peer),
                  c);
  return batonSuccess;
}

}  // namespace

extern "C" {

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

batonResult_t batonGather(const void* sendbuff, void* recvbuff, size_t count,
                          batonDataType_t datatype, int root, batonComm_t comm,
                          batonStream_t stream) {
  return RunCollective(kGather, sendbuff, recvbuff, count, datatype, batonSum, root, comm, stream);
}

batonResult_t batonScatter(const void* sendbuff, void* recvbuff, size_t count,
                           batonDataType_t datatype, int root, batonComm_t comm,
                           batonStream_t stream) {
  return RunCollective(kScatter, sendbuff, recvbuff, count, datatype, batonSum, root, comm, stream);
}

batonResult_t batonSend(const void* sendbuff, size_t count, batonDataType_t datatype, int peer,
                        batonComm_t comm, batonStream_t stream) {
  return PointToPoint("batonSend", true, sendbuff, nullptr, count, datatype, peer, comm, stream);
}

batonResult_t batonRecv(void* recvbuff, size_t count, batonDataType_t datatype, int peer,
                        batonComm_t comm, batonStream_t stream) {
  return PointToPoint("batonRecv", false, nullptr, recvbuff, count, datatype, peer, comm, stream);
}

batonResult_t batonRecvAny(void* recvbuff, size_t count, batonDataType_t datatype, int* source,
                           batonComm_t comm, batonStream_t stream) {
  const char* fn = "batonRecvAny";
  CallSite site;
  BATON_API_CHECK(fn, BeginCall(comm, stream, &site), site.comm.get());
  Communicator* c = site.comm.get();
  BATON_API_CHECK(fn, CheckDatatype(datatype), c);
  BATON_API_CHECK(fn, CheckCount(count, datatype), c);
  if (source == nullptr) BATON_API_CHECK(fn, InvalidArgument("source is NULL"), c);
  // A send of no elements puts nothing on the wire (batonSend/batonRecv of
  // 0 complete alone), so nothing could say where it came from.
  if (count == 0)
    BATON_API_CHECK(fn,
                    InvalidArgument("count is 0: an empty send carries no message, so an "
                                    "any-source receive could not learn its source; receive "
                                    "empty messages with batonRecv and the peer"),
                    c);
  BATON_API_CHECK(fn, CheckBuffer(recvbuff, count, "recvbuff"), c);
  if (c->nranks() == 1)
    BATON_API_CHECK(fn, InvalidUsage("a communicator of one rank has no peer to receive from"), c);
  BATON_API_CHECK(fn, LaunchRecvAny(site, recvbuff, count, datatype, source), c);
  return batonSuccess;
}

batonResult_t batonBarrier(batonComm_t comm, batonStream_t stream) {
  const char* fn = "batonBarrier";
  CallSite site;
  BATON_API_CHECK(fn, BeginCall(comm, stream, &site), site.comm.get());
  BATON_API_CHECK(fn, LaunchBarrier(site), site.comm.get());
  return batonSuccess;
}

batonResult_t batonGroupStart(void) {
  GroupStart();
  return batonSuccess;
}

batonResult_t batonGroupEnd(void) {
  BATON_API_CHECK("batonGroupEnd", GroupEnd(), nullptr);
  return batonSuccess;
}

}  // extern "C"

#pragma GCC visibility pop
