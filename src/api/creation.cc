#include "api/creation.h"

#include <cstring>
#include <thread>
#include <utility>

#include "api/handles.h"
#include "base/log.h"

namespace baton {
namespace {

// The fields of batonConfig_t that a caller's struct holds, by its size:
// an older caller's smaller struct ends before the newer fields.
template <typename Field>
bool Has(const batonConfig_t* config, const Field batonConfig_t::*field) {
  const size_t end = reinterpret_cast<size_t>(&(config->*field)) -
                     reinterpret_cast<size_t>(config) + sizeof(Field);
  return config->size >= end;
}

constexpr size_t kMaxNameBytes = 63;  // what the flight recorder keeps

}  // namespace

Status ReadConfig(const batonConfig_t* config, CreationOptions* out) {
  *out = CreationOptions{};
  if (config == nullptr) return Status::Ok();
  if (config->magic != BATON_CONFIG_MAGIC)
    return InvalidArgument(
        "config was not initialized with BATON_CONFIG_INITIALIZER (wrong magic)");
  if (config->size < offsetof(batonConfig_t, blocking) || config->size > (1u << 16))
    return InvalidArgument("config->size " + std::to_string(config->size) +
                           " is not the size of a batonConfig_t");
  if (Has(config, &batonConfig_t::blocking) && config->blocking != BATON_CONFIG_UNDEF_INT) {
    if (config->blocking != 0 && config->blocking != 1)
      return InvalidArgument("config->blocking " + std::to_string(config->blocking) +
                             ": expected 0 or 1");
    out->blocking = config->blocking == 1;
  }
  if (Has(config, &batonConfig_t::commName) && config->commName != nullptr) {
    const size_t len = strnlen(config->commName, kMaxNameBytes + 1);
    if (len > kMaxNameBytes)
      return InvalidArgument("config->commName is longer than " + std::to_string(kMaxNameBytes) +
                             " bytes");
    out->name = std::string(config->commName, len);
  }
  if (Has(config, &batonConfig_t::timeout) && config->timeout != BATON_CONFIG_UNDEF_INT) {
    if (config->timeout < 0)
      return InvalidArgument("config->timeout " + std::to_string(config->timeout) +
                             ": expected seconds >= 0 (0: wait forever)");
    out->timeout_s = config->timeout;
  }
  if (Has(config, &batonConfig_t::splitShare) && config->splitShare != BATON_CONFIG_UNDEF_INT &&
      config->splitShare != 0 && config->splitShare != 1)
    return InvalidArgument("config->splitShare " + std::to_string(config->splitShare) +
                           ": expected 0 or 1");
  return Status::Ok();
}

Settings CreationSettings(const CreationOptions& options, double inherited_timeout_s) {
  Settings settings = ReadSettings();
  if (options.timeout_s) {
    settings.timeout = *options.timeout_s;
  } else if (inherited_timeout_s >= 0) {
    // A parent's timeout of "forever" is kForeverSeconds: 0 says the same.
    settings.timeout = inherited_timeout_s >= kForeverSeconds
                           ? 0
                           : static_cast<int64_t>(inherited_timeout_s + 0.5);
  }
  return settings;
}

batonResult_t CreateComm(const char* fn, const CreationOptions& options, int rank, int nranks,
                         MakeComm make, batonComm_t* comm, Communicator* parent) {
  if (options.blocking) {
    std::shared_ptr<Communicator> made;
    const Status st = make(&made);
    if (!st.ok()) return Fail(fn, st, parent);
    *comm = made ? RegisterComm(std::move(made)) : nullptr;
    return batonSuccess;
  }
  auto creation = std::make_shared<Creation>();
  *comm = RegisterCreation(creation, rank, nranks);
  // Detached: the creation outlives the call; the handle or, once it is
  // abandoned, the thread itself disposes of the result.
  std::thread([creation, make = std::move(make), fn] {
    std::shared_ptr<Communicator> made;
    Status st;
    {
      CancelScope cancel(&creation->cancel);
      st = make(&made);
    }
    if (!st.ok()) BATON_INFO(kLogInit, "%s (nonblocking) failed: %s", fn, st.message().c_str());
    std::unique_lock<std::mutex> lock(creation->mu);
    if (creation->abandoned) {
      lock.unlock();
      if (made) made->Abort();
      return;
    }
    creation->status = st;
    creation->result = std::move(made);
    creation->done = true;
    creation->cv.notify_all();
  }).detach();
  return batonInProgress;
}

}  // namespace baton
