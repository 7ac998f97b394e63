// The C API's handles and errors: which batonComm_t, batonStream_t and
// batonEvent_t are
// live (a destroyed or foreign pointer is batonInvalidArgument, never a
// crash), and where batonGetLastError finds the message of a failure.
#pragma once

#include <baton.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

#include "base/status.h"
#include "comm/comm.h"
#include "comm/stream.h"

namespace baton {

// A communicator being created on a background thread (batonConfig_t with
// blocking = 0): the thread fills in the outcome; the handle's owner polls
// it, waits for it (destroy) or abandons it (abort: `cancel` ends the
// creation's waits, and the thread aborts what it made).
struct Creation {
  std::atomic<bool> cancel{false};
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;       // guarded by mu, as the rest
  bool abandoned = false;  // nobody will collect the result
  Status status;
  std::shared_ptr<Communicator> result;
};

enum class CommState { kNotLive, kCreating, kCreationFailed, kLive };

struct CommLookup {
  CommState state = CommState::kNotLive;
  std::shared_ptr<Communicator> comm;  // kLive
  Status creation_status;              // kCreationFailed
  int rank = -1, nranks = 0;           // what the creation was asked for
};

// What `handle` is now; a finished background creation's communicator
// becomes the handle's here.
CommLookup LookupCommState(batonComm_t handle);
// The communicator behind `handle`, or null when it is not live (or not
// created yet).
std::shared_ptr<Communicator> LookupComm(batonComm_t handle);
// Every call's lookup: true with *out set when `handle` is a live
// communicator whose creation is over; false sends the caller to
// LookupCommState for the reason.
bool LookupReadyComm(batonComm_t handle, std::shared_ptr<Communicator>* out);
// Why a lookup found no communicator, in words for the caller.
Status NotLiveError(const CommLookup& lookup);
// A handle for a new communicator.
batonComm_t RegisterComm(std::shared_ptr<Communicator> comm);
// A handle for a communicator `creation` is making as `rank` of `nranks`.
batonComm_t RegisterCreation(std::shared_ptr<Creation> creation, int rank, int nranks);
// Forgets `handle`, handing back its communicator (null when not live) and
// its creation when one was still attached.
std::shared_ptr<Communicator> UnregisterComm(batonComm_t handle,
                                             std::shared_ptr<Creation>* creation = nullptr);

bool StreamIsLive(batonStream_t handle);
batonStream_t RegisterStream();
// Forgets `handle`; the returned stream drains its queue when destroyed.
std::unique_ptr<batonStream> UnregisterStream(batonStream_t handle);

// Host-stream events: a handle holds the mark of its latest record.
batonEvent_t RegisterEvent();
bool UnregisterEvent(batonEvent_t handle);
// False when `handle` is not a live event; else *mark is its latest mark.
bool LookupEventMark(batonEvent_t handle, std::shared_ptr<StreamMark>* mark);
bool SetEventMark(batonEvent_t handle, std::shared_ptr<StreamMark> mark);

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
