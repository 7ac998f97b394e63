// The C API's handles and errors: which batonComm_t and batonStream_t are
// live (a destroyed or foreign pointer is batonInvalidArgument, never a
// crash), and where batonGetLastError finds the message of a failure.
#pragma once

#include <baton.h>

#include <memory>
#include <string>

#include "base/status.h"
#include "comm/comm.h"
#include "comm/stream.h"

namespace baton {

// The communicator behind `handle`, or null when it is not live.
std::shared_ptr<Communicator> LookupComm(batonComm_t handle);
// A handle for a new communicator.
batonComm_t RegisterComm(std::shared_ptr<Communicator> comm);
// Forgets `handle`, handing back its communicator (null when not live).
std::shared_ptr<Communicator> UnregisterComm(batonComm_t handle);

bool StreamIsLive(batonStream_t handle);
batonStream_t RegisterStream();
// Forgets `handle`; the returned stream drains its queue when destroyed.
std::unique_ptr<batonStream> UnregisterStream(batonStream_t handle);

// Records a failure of entry point `fn` where batonGetLastError finds it
// (this thread's last error, and `comm`'s when given) and returns its code.
// Usage errors are logged at INFO, everything else at WARN.
batonResult_t Fail(const char* fn, const Status& st, Communicator* comm = nullptr);

// batonGetLastError's text: comm's last error if it is live, else this
// thread's. Valid until the thread's next call of it.
const char* LastErrorText(batonComm_t comm);

}  // namespace baton

// Returns Fail(fn, expr, comm) from the enclosing entry point when `expr`
// yields a failed Status.
#define BATON_API_CHECK(fn, expr, comm)                 \
  do {                                                  \
    ::baton::Status _st = (expr);                       \
    if (!_st.ok()) return ::baton::Fail(fn, _st, comm); \
  } while (0)
