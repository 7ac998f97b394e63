// batonRecvAny: find the peer, then receive from it as batonRecv does.
#include <string>

#include "base/datatype.h"
#include "comm/comm.h"

namespace baton {

Status Communicator::RunAnySource(size_t count, batonDataType_t datatype,
                                  const std::function<void(int peer, Schedule*)>& build,
                                  int* source) {
  std::lock_guard<std::mutex> lock(run_mu_);
  if (batonResult_t err = async_error_.load(); err != batonSuccess)
    return Status(err, UnusableMessage());
  if (channels_->aborted()) return RemoteError("communicator was aborted");
  if (nranks_ == 1) return InvalidUsage("an any-source receive needs another rank to send");
  // Any peer may be the one: connections made on first use are made now.
  if (Status st = channels_->ConnectAll(DeadlineIn(config_.timeout_s)); !st.ok())
    return Fail(std::move(st));
  int peer = -1;
  CallDescriptor theirs;
  const int after = any_source_last_ >= 0 ? any_source_last_ : rank_;
  if (Status st = executor_->WaitAnySource(rank_, after, &peer, &theirs); !st.ok())
    return Fail(std::move(st));
  any_source_last_ = peer;
  if (theirs.count != count || theirs.datatype != static_cast<uint8_t>(datatype)) {
    const auto their_type = static_cast<batonDataType_t>(theirs.datatype);
    const size_t their_bytes =
        theirs.datatype < batonNumTypes ? theirs.count * DatatypeSize(their_type) : 0;
    return Fail(InvalidUsage(
        "any-source receive on rank " + std::to_string(rank_) + " of " + std::to_string(count) +
        " x " + DatatypeName(datatype) + " (" + std::to_string(count * DatatypeSize(datatype)) +
        " bytes) matched rank " + std::to_string(peer) + "'s send #" + std::to_string(theirs.seq) +
        " of " + std::to_string(theirs.count) + " x " +
        (theirs.datatype < batonNumTypes ? DatatypeName(their_type) : "?") + " (" +
        std::to_string(their_bytes) + " bytes): counts and datatypes must agree"));
  }
  ClearReusable();
  build(peer, &reusable_);
  BATON_RETURN_IF_ERROR(RunLocked(reusable_));
  *source = peer;
  return Status::Ok();
}

}  // namespace baton
