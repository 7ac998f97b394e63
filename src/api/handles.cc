#include "api/handles.h"

#include <map>
#include <mutex>

#include "base/log.h"

// The opaque handle given to users: a stable address per live communicator.
struct batonComm {
  std::shared_ptr<baton::Communicator> impl;
};

namespace baton {
namespace {

// Live handles. Looking a handle up here is what turns a destroyed or
// foreign pointer into batonInvalidArgument instead of a crash.
std::mutex g_registry_mu;
std::map<batonComm*, std::unique_ptr<batonComm>> g_comms;
std::map<batonStream*, std::unique_ptr<batonStream>> g_streams;

thread_local std::string tls_last_error;
thread_local std::string tls_last_error_copy;

}  // namespace

std::shared_ptr<Communicator> LookupComm(batonComm_t handle) {
  std::lock_guard<std::mutex> lock(g_registry_mu);
  auto it = g_comms.find(handle);
  return it == g_comms.end() ? nullptr : it->second->impl;
}

batonComm_t RegisterComm(std::shared_ptr<Communicator> comm) {
  auto handle = std::make_unique<batonComm>();
  handle->impl = std::move(comm);
  batonComm* raw = handle.get();
  std::lock_guard<std::mutex> lock(g_registry_mu);
  g_comms.emplace(raw, std::move(handle));
  return raw;
}

std::shared_ptr<Communicator> UnregisterComm(batonComm_t handle) {
  std::unique_ptr<batonComm> owned;
  {
    std::lock_guard<std::mutex> lock(g_registry_mu);
    auto it = g_comms.find(handle);
    if (it == g_comms.end()) return nullptr;
    owned = std::move(it->second);
    g_comms.erase(it);
  }
  return std::move(owned->impl);
}

bool StreamIsLive(batonStream_t handle) {
  std::lock_guard<std::mutex> lock(g_registry_mu);
  return g_streams.count(handle) != 0;
}

batonStream_t RegisterStream() {
  auto s = std::make_unique<batonStream>();
  batonStream* raw = s.get();
  std::lock_guard<std::mutex> lock(g_registry_mu);
  g_streams.emplace(raw, std::move(s));
  return raw;
}

std::unique_ptr<batonStream> UnregisterStream(batonStream_t handle) {
  std::lock_guard<std::mutex> lock(g_registry_mu);
  auto it = g_streams.find(handle);
  if (it == g_streams.end()) return nullptr;
  std::unique_ptr<batonStream> s = std::move(it->second);
  g_streams.erase(it);
  return s;
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
    if (auto c = LookupComm(comm)) {
      tls_last_error_copy = c->last_error();
      return tls_last_error_copy.c_str();
    }
  }
  tls_last_error_copy = tls_last_error;
  return tls_last_error_copy.c_str();
}

}  // namespace baton
