// The C API of the variable-count collectives: batonAllGatherV,
// batonReduceScatterV and batonAlltoAllV. Their arrays are checked here
// (NULL, blocks past the address space, receive blocks that overlap, a
// rank's own count that disagrees with itself), then the call goes to
// launch/ like any other collective.
#include <baton.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "api/checks.h"
#include "api/handles.h"
#include "base/datatype.h"
#include "launch/call.h"

#pragma GCC visibility push(default)

using namespace baton;  // NOLINT: the C API below is a thin layer over it

namespace {

const uint8_t* Bytes(const void* p) {
  return static_cast<const uint8_t*>(p);
}

// `own` elements of this rank's block (`own_name`, indexed by `rank` when
// `own_indexed`) must equal `other_name`[rank]. The message is built only
// on failure: this check is on every call.
Status CheckOwnCount(size_t own, const char* own_name, bool own_indexed, size_t other,
                     const char* other_name, int rank) {
  if (own == other) [[likely]]
    return Status::Ok();
  char own_index[16] = "";
  if (own_indexed) snprintf(own_index, sizeof(own_index), "[%d]", rank);
  char message[192];
  snprintf(message, sizeof(message),
           "%s%s and %s[%d] differ: %zu and %zu elements (this rank's own block)", own_name,
           own_index, other_name, rank, own, other);
  return InvalidArgument(message);
}

}  // namespace

extern "C" {

batonResult_t batonAllGatherV(const void* sendbuff, size_t sendcount, void* recvbuff,
                              const size_t* recvcounts, const size_t* displs,
                              batonDataType_t datatype, batonComm_t comm, batonStream_t stream) {
  const char* fn = "batonAllGatherV";
  CallSite site;
  BATON_API_CHECK(fn, BeginCall(comm, stream, &site), site.comm.get());
  Communicator* c = site.comm.get();
  const int rank = c->rank();
  BATON_API_CHECK(fn, CheckDatatype(datatype), c);
  size_t extent = 0;
  BATON_API_CHECK(
      fn,
      CheckBlocks(recvcounts, "recvcounts", displs, "displs", c->nranks(), datatype, true, &extent),
      c);
  BATON_API_CHECK(
      fn, CheckOwnCount(sendcount, "sendcount", false, recvcounts[rank], "recvcounts", rank), c);
  BATON_API_CHECK(fn, CheckBuffer(sendbuff, sendcount, "sendbuff"), c);
  BATON_API_CHECK(fn, CheckBuffer(recvbuff, extent, "recvbuff"), c);
  const size_t es = DatatypeSize(datatype);
  BATON_API_CHECK(fn,
                  CheckOverlap(recvbuff, extent, "recvbuff", sendbuff, sendcount * es, "sendbuff",
                               Bytes(recvbuff) + displs[rank] * es),
                  c);
  CollectiveCall call;
  call.collective = Collective::kAllGatherV;
  call.send = sendbuff;
  call.recv = recvbuff;
  call.count = sendcount;
  call.datatype = datatype;
  call.counts = recvcounts;
  call.displs = displs;
  BATON_API_CHECK(fn, LaunchCollective(site, call), c);
  return batonSuccess;
}

batonResult_t batonReduceScatterV(const void* sendbuff, void* recvbuff, const size_t* recvcounts,
                                  batonDataType_t datatype, batonRedOp_t op, batonComm_t comm,
                                  batonStream_t stream) {
  const char* fn = "batonReduceScatterV";
  CallSite site;
  BATON_API_CHECK(fn, BeginCall(comm, stream, &site), site.comm.get());
  Communicator* c = site.comm.get();
  const int rank = c->rank();
  BATON_API_CHECK(fn, CheckDatatype(datatype), c);
  BATON_API_CHECK(fn, CheckOp(op), c);
  size_t total = 0;
  BATON_API_CHECK(fn, CheckPackedBlocks(recvcounts, "recvcounts", c->nranks(), datatype, &total),
                  c);
  const size_t es = DatatypeSize(datatype);
  BATON_API_CHECK(fn, CheckBuffer(sendbuff, total, "sendbuff"), c);
  BATON_API_CHECK(fn, CheckBuffer(recvbuff, recvcounts[rank], "recvbuff"), c);
  size_t before = 0;  // elements of the lower ranks' blocks
  for (int r = 0; r < rank; ++r) before += recvcounts[r];
  BATON_API_CHECK(fn,
                  CheckOverlap(sendbuff, total, "sendbuff", recvbuff, recvcounts[rank] * es,
                               "recvbuff", Bytes(sendbuff) + before * es),
                  c);
  CollectiveCall call;
  call.collective = Collective::kReduceScatterV;
  call.send = sendbuff;
  call.recv = recvbuff;
  call.count = recvcounts[rank];
  call.datatype = datatype;
  call.op = op;
  call.counts = recvcounts;
  BATON_API_CHECK(fn, LaunchCollective(site, call), c);
  return batonSuccess;
}

batonResult_t batonAlltoAllV(const void* sendbuff, const size_t* sendcounts, const size_t* sdispls,
                             void* recvbuff, const size_t* recvcounts, const size_t* rdispls,
                             batonDataType_t datatype, batonComm_t comm, batonStream_t stream) {
  const char* fn = "batonAlltoAllV";
  CallSite site;
  BATON_API_CHECK(fn, BeginCall(comm, stream, &site), site.comm.get());
  Communicator* c = site.comm.get();
  const int rank = c->rank();
  BATON_API_CHECK(fn, CheckDatatype(datatype), c);
  size_t send_extent = 0, recv_extent = 0;
  // Send blocks are only read, so they may overlap; receive blocks may not.
  BATON_API_CHECK(fn,
                  CheckBlocks(sendcounts, "sendcounts", sdispls, "sdispls", c->nranks(), datatype,
                              false, &send_extent),
                  c);
  BATON_API_CHECK(fn,
                  CheckBlocks(recvcounts, "recvcounts", rdispls, "rdispls", c->nranks(), datatype,
                              true, &recv_extent),
                  c);
  BATON_API_CHECK(
      fn, CheckOwnCount(sendcounts[rank], "sendcounts", true, recvcounts[rank], "recvcounts", rank),
      c);
  BATON_API_CHECK(fn, CheckBuffer(sendbuff, send_extent, "sendbuff"), c);
  BATON_API_CHECK(fn, CheckBuffer(recvbuff, recv_extent, "recvbuff"), c);
  // In place only as one buffer for both (the outgoing blocks are saved).
  BATON_API_CHECK(
      fn,
      CheckOverlap(recvbuff, recv_extent, "recvbuff", sendbuff, send_extent, "sendbuff", recvbuff),
      c);
  CollectiveCall call;
  call.collective = Collective::kAlltoAllV;
  call.send = sendbuff;
  call.recv = recvbuff;
  call.count = recvcounts[rank];
  call.datatype = datatype;
  call.counts = recvcounts;
  call.displs = rdispls;
  call.send_counts = sendcounts;
  call.send_displs = sdispls;
  BATON_API_CHECK(fn, LaunchCollective(site, call), c);
  return batonSuccess;
}

}  // extern "C"

#pragma GCC visibility pop
