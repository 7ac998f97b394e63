// How communicators come to be at the C API: batonConfig_t read and
// checked, and the creation run now (blocking) or on a background thread
// whose handle the caller polls (NCCL's nonblocking mode).
#pragma once

#include <baton.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "base/settings.h"
#include "base/status.h"
#include "comm/comm.h"

namespace baton {

// A batonConfig_t, resolved: what the caller set, the rest unset.
struct CreationOptions {
  bool blocking = true;
  std::optional<std::string> name;
  std::optional<int> timeout_s;
};

// Reads `config` (NULL: every field unset). batonInvalidArgument for a
// config not made from BATON_CONFIG_INITIALIZER or a field out of range.
Status ReadConfig(const batonConfig_t* config, CreationOptions* out);

// The settings a new communicator runs with: BATON_* as read now, with the
// options' timeout, else `inherited_timeout_s` (a parent's; < 0: none).
Settings CreationSettings(const CreationOptions& options, double inherited_timeout_s = -1);

using MakeComm = std::function<Status(std::shared_ptr<Communicator>*)>;

// Makes a communicator as `rank` of `nranks` with `make` and hands its
// handle out in *comm: at once when blocking (batonSuccess or the error),
// else from a background thread, returning batonInProgress with a handle
// that batonCommGetAsyncError reports on. `make` must hold what it needs
// by value.
batonResult_t CreateComm(const char* fn, const CreationOptions& options, int rank, int nranks,
                         MakeComm make, batonComm_t* comm, Communicator* parent = nullptr);

}  // namespace baton
