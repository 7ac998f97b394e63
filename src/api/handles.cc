#include "api/handles.h"

#include <atomic>
#include <deque>
#include <map>
#include <mutex>

#include "base/log.h"

// The opaque handle given to users: a stable address per live communicator.
struct batonComm {
  std::shared_ptr<baton::Communicator> impl;
  std::shared_ptr<baton::Creation> creation;  // until a background creation is collected
  int rank = -1, nranks = 0;
};

// An event handle: the mark of its latest record (a done one before any).
struct batonEvent {
  std::shared_ptr<baton::StreamMark> mark = baton::StreamMark::Done();
};

namespace baton {
namespace {

// Live handles. Looking a handle up here is what turns a destroyed or
// foreign pointer into batonInvalidArgument instead of a crash.
std::mutex g_registry_mu;
std::map<batonComm*, std::unique_ptr<batonComm>> g_comms;
std::map<batonStream*, std::unique_ptr<batonStream>> g_streams;
std::map<batonEvent*, std::unique_ptr<batonEvent>> g_events;

// Bumped under g_registry_mu whenever g_streams changes: a thread's last
// live stream (StreamIsLive) holds while it is unchanged.
std::atomic<uint64_t> g_streams_generation{1};

// A new object owned by `registry`; its address is the handle. `generation`
// (if any) counts the change.
template <typename T>
T* Register(std::map<T*, std::unique_ptr<T>>& registry,
            std::atomic<uint64_t>* generation = nullptr) {
  auto owned = std::make_unique<T>();
  T* raw = owned.get();
  std::lock_guard<std::mutex> lock(g_registry_mu);
  registry.emplace(raw, std::move(owned));
  if (generation != nullptr) generation->fetch_add(1, std::memory_order_release);
  return raw;
}

// Removes handle from `registry` and hands its object over (nullptr when
// unknown), to be freed by the caller outside the lock; `generation` (if
// any) counts the change before the object can go.
template <typename T>
std::unique_ptr<T> Take(std::map<T*, std::unique_ptr<T>>& registry, T* handle,
                        std::atomic<uint64_t>* generation = nullptr) {
  std::lock_guard<std::mutex> lock(g_registry_mu);
  auto it = registry.find(handle);
  if (it == registry.end()) return nullptr;
  std::unique_ptr<T> owned = std::move(it->second);
  registry.erase(it);
  if (generation != nullptr) generation->fetch_add(1, std::memory_order_release);
  return owned;
}

// Bumped under g_registry_mu whenever g_comms or a handle's communicator
// changes: a thread's last lookup (LookupReadyComm) holds while it is
// unchanged, so a call on the communicator it used last takes no lock.
std::atomic<uint64_t> g_comms_generation{1};

// This thread's last ready lookup. The communicator is held weakly: a
// destroyed one is torn down when its last call ends, not when this thread
// next looks something up (only its object's memory waits for that).
struct LastLookup {
  batonComm* handle = nullptr;
  uint64_t generation = 0;
  std::weak_ptr<Communicator> comm;
};
thread_local LastLookup tls_last_lookup;

// This thread's last stream found live.
struct LastStream {
  batonStream* handle = nullptr;
  uint64_t generation = 0;
};
thread_local LastStream tls_last_stream;

void CommsChanged() {
  g_comms_generation.fetch_add(1, std::memory_order_release);
}

thread_local std::string tls_last_error;
// What batonGetLastError returned in this thread, per communicator handle
// (nullptr: the thread's own): a text changes only when its error does, so
// the pointers of two calls stay valid side by side (printf of both).
struct ReturnedError {
  const void* handle;
  std::string text;
};
thread_local std::deque<ReturnedError> tls_returned_errors;
constexpr size_t kReturnedErrorHandles = 64;

const char* Returned(const void* handle, const std::string& text) {
  for (ReturnedError& r : tls_returned_errors) {
    if (r.handle != handle) continue;
    if (r.text != text) r.text = text;
    return r.text.c_str();
  }
  // A thread that asks about more communicators than this drops the oldest.
  if (tls_returned_errors.size() == kReturnedErrorHandles) tls_returned_errors.pop_front();
  tls_returned_errors.push_back(ReturnedError{handle, text});
  return tls_returned_errors.back().text.c_str();
}

}  // namespace

CommLookup LookupCommState(batonComm_t handle) {
  CommLookup out;
  std::lock_guard<std::mutex> lock(g_registry_mu);
  auto it = g_comms.find(handle);
  if (it == g_comms.end()) return out;
  batonComm& h = *it->second;
  out.rank = h.rank;
  out.nranks = h.nranks;
  if (h.creation) {
    std::lock_guard<std::mutex> creation_lock(h.creation->mu);
    if (!h.creation->done) {
      out.state = CommState::kCreating;
      return out;
    }
    if (!h.creation->status.ok()) {
      out.state = CommState::kCreationFailed;
      out.creation_status = h.creation->status;
      return out;
    }
    h.impl = std::move(h.creation->result);
    h.creation.reset();
    CommsChanged();
    // A split or shrink learns its rank only now.
    h.rank = h.impl->rank();
    h.nranks = h.impl->nranks();
  }
  out.state = CommState::kLive;
  out.comm = h.impl;
  out.rank = h.rank;
  out.nranks = h.nranks;
  return out;
}

bool LookupReadyComm(batonComm_t handle, std::shared_ptr<Communicator>* out) {
  LastLookup& last = tls_last_lookup;
  if (last.handle == handle &&
      last.generation == g_comms_generation.load(std::memory_order_acquire)) {
    // (Empty only where a destroy raced this call.)
    *out = last.comm.lock();
    if (*out) return true;
  }
  std::lock_guard<std::mutex> lock(g_registry_mu);
  auto it = g_comms.find(handle);
  if (it == g_comms.end() || it->second->creation) return false;
  *out = it->second->impl;
  last.handle = handle;
  last.generation = g_comms_generation.load(std::memory_order_relaxed);
  last.comm = *out;
  return true;
}

std::shared_ptr<Communicator> LookupComm(batonComm_t handle) {
  return LookupCommState(handle).comm;
}

Status NotLiveError(const CommLookup& lookup) {
  switch (lookup.state) {
    case CommState::kCreating:
      return InvalidUsage(
          "comm is still being created (nonblocking): poll batonCommGetAsyncError until it is "
          "no longer batonInProgress");
    case CommState::kCreationFailed:
      return Status(lookup.creation_status.code(),
                    "comm's creation failed: " + lookup.creation_status.message());
    case CommState::kLive:
      return Status::Ok();
    case CommState::kNotLive:
      break;
  }
  return InvalidArgument("comm is NULL or not a live communicator (destroyed, or never created)");
}

batonComm_t RegisterComm(std::shared_ptr<Communicator> comm) {
  auto handle = std::make_unique<batonComm>();
  handle->rank = comm->rank();
  handle->nranks = comm->nranks();
  handle->impl = std::move(comm);
  batonComm* raw = handle.get();
  std::lock_guard<std::mutex> lock(g_registry_mu);
  g_comms.emplace(raw, std::move(handle));
  CommsChanged();
  return raw;
}

batonComm_t RegisterCreation(std::shared_ptr<Creation> creation, int rank, int nranks) {
  auto handle = std::make_unique<batonComm>();
  handle->creation = std::move(creation);
  handle->rank = rank;
  handle->nranks = nranks;
  batonComm* raw = handle.get();
  std::lock_guard<std::mutex> lock(g_registry_mu);
  g_comms.emplace(raw, std::move(handle));
  CommsChanged();
  return raw;
}

std::shared_ptr<Communicator> UnregisterComm(batonComm_t handle,
                                             std::shared_ptr<Creation>* creation) {
  std::unique_ptr<batonComm> owned;
  {
    std::lock_guard<std::mutex> lock(g_registry_mu);
    auto it = g_comms.find(handle);
    if (it == g_comms.end()) return nullptr;
    owned = std::move(it->second);
    g_comms.erase(it);
    CommsChanged();
  }
  if (creation != nullptr) *creation = std::move(owned->creation);
  return std::move(owned->impl);
}

bool StreamIsLive(batonStream_t handle) {
  LastStream& last = tls_last_stream;
  if (handle != nullptr && last.handle == handle &&
      last.generation == g_streams_generation.load(std::memory_order_acquire))
    return true;
  std::lock_guard<std::mutex> lock(g_registry_mu);
  if (g_streams.count(handle) == 0) return false;
  last.handle = handle;
  last.generation = g_streams_generation.load(std::memory_order_relaxed);
  return true;
}

batonStream_t RegisterStream() {
  return Register(g_streams, &g_streams_generation);
}

std::unique_ptr<batonStream> UnregisterStream(batonStream_t handle) {
  return Take(g_streams, handle, &g_streams_generation);
}

batonEvent_t RegisterEvent() {
  return Register(g_events);
}

bool UnregisterEvent(batonEvent_t handle) {
  return Take(g_events, handle) != nullptr;  // freed after the lock is released
}

bool LookupEventMark(batonEvent_t handle, std::shared_ptr<StreamMark>* mark) {
  std::lock_guard<std::mutex> lock(g_registry_mu);
  auto it = g_events.find(handle);
  if (it == g_events.end()) return false;
  *mark = it->second->mark;
  return true;
}

bool SetEventMark(batonEvent_t handle, std::shared_ptr<StreamMark> mark) {
  std::lock_guard<std::mutex> lock(g_registry_mu);
  auto it = g_events.find(handle);
  if (it == g_events.end()) return false;
  it->second->mark = std::move(mark);
  return true;
}

batonResult_t Fail(const char* fn, const Status& st, Communicator* comm) {
  std::string message = std::string(fn) + ": " + st.message();
  tls_last_error = message;
  if (comm) comm->set_last_error(message);
  if (st.code() != batonInvalidArgument && st.code() != batonInvalidUsage) {
    BATON_WARN(kLogColl, "%s", message.c_str());
  } else {
    BATON_INFO(kLogColl, "%s", message.c_str());
  }
  return st.code();
}

const char* LastErrorText(batonComm_t comm) {
  if (comm != nullptr) {
    const CommLookup lookup = LookupCommState(comm);
    if (lookup.comm) return Returned(comm, lookup.comm->last_error());
    if (lookup.state == CommState::kCreationFailed)
      return Returned(comm, lookup.creation_status.message());
  }
  return Returned(nullptr, tls_last_error);
}

}  // namespace baton
