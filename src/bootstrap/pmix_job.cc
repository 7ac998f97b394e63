#include "bootstrap/pmix_job.h"

#include <cstdlib>

#include "base/log.h"
#include "base/socket.h"

#ifdef BATON_HAVE_PMIX_HEADERS
#include <dlfcn.h>
#include <pmix.h>

#include <cstring>
#include <mutex>
#include <string>

#include "bootstrap/rendezvous.h"
#endif

namespace baton {

bool UnderPmix() {
  return getenv("PMIX_NAMESPACE") != nullptr && getenv("PMIX_RANK") != nullptr;
}

#ifndef BATON_HAVE_PMIX_HEADERS

Status PmixJob(const Settings&, LauncherJob*) {
  return SystemError(
      "started by a PMIx launcher, but this Baton was built without PMIx headers "
      "(libpmix-dev): set BATON_ROOT=host:port instead");
}

#else

namespace {

constexpr const char* kIdKey = "baton.unique_id";

// The few PMIx calls Baton makes, from libpmix opened at run time. The
// library stays loaded: PMIx keeps threads of its own.
struct PmixApi {
  decltype(&PMIx_Init) init = nullptr;
  decltype(&PMIx_Finalize) finalize = nullptr;
  decltype(&PMIx_Get) get = nullptr;
  decltype(&PMIx_Put) put = nullptr;
  decltype(&PMIx_Commit) commit = nullptr;
  decltype(&PMIx_Fence) fence = nullptr;
  decltype(&PMIx_Value_destruct) value_destruct = nullptr;
  decltype(&PMIx_Error_string) error_string = nullptr;
  std::string missing;  // why it could not be loaded ("" when it was)
};

const PmixApi& Api() {
  static PmixApi api;
  static std::once_flag once;
  std::call_once(once, [] {
    void* lib = dlopen("libpmix.so.2", RTLD_NOW | RTLD_GLOBAL);
    if (lib == nullptr) lib = dlopen("libpmix.so", RTLD_NOW | RTLD_GLOBAL);
    if (lib == nullptr) {
      api.missing = std::string("cannot load libpmix: ") + dlerror();
      return;
    }
    auto load = [&](auto* fn, const char* name) {
      *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)> >(dlsym(lib, name));
      if (*fn == nullptr && api.missing.empty()) api.missing = std::string("libpmix lacks ") + name;
    };
    load(&api.init, "PMIx_Init");
    load(&api.finalize, "PMIx_Finalize");
    load(&api.get, "PMIx_Get");
    load(&api.put, "PMIx_Put");
    load(&api.commit, "PMIx_Commit");
    load(&api.fence, "PMIx_Fence");
    load(&api.value_destruct, "PMIx_Value_destruct");
    load(&api.error_string, "PMIx_Error_string");
  });
  return api;
}

Status PmixError(const PmixApi& api, const char* call, pmix_status_t rc) {
  return SystemError(std::string(call) + " failed: " + api.error_string(rc) + " (" +
                     std::to_string(rc) + ")");
}

// One value of `key` about `proc`, as an unsigned integer of any width.
Status GetUnsigned(const PmixApi& api, const pmix_proc_t& proc, const char* key, uint64_t* out) {
  pmix_value_t* value = nullptr;
  const pmix_status_t rc = api.get(&proc, key, nullptr, 0, &value);
  if (rc != PMIX_SUCCESS) return PmixError(api, (std::string("PMIx_Get ") + key).c_str(), rc);
  Status st;
  switch (value->type) {
    case PMIX_UINT32:
      *out = value->data.uint32;
      break;
    case PMIX_UINT16:
      *out = value->data.uint16;
      break;
    case PMIX_PROC_RANK:
      *out = value->data.rank;
      break;
    case PMIX_UINT64:
      *out = value->data.uint64;
      break;
    default:
      st = SystemError(std::string("PMIx_Get ") + key + ": unexpected type " +
                       std::to_string(value->type));
  }
  api.value_destruct(value);
  free(value);
  return st;
}

pmix_info_t Info(const char* key, pmix_data_type_t type) {
  pmix_info_t info;
  memset(&info, 0, sizeof(info));
  snprintf(info.key, sizeof(info.key), "%s", key);
  info.value.type = type;
  return info;
}

}  // namespace

Status PmixJob(const Settings& settings, LauncherJob* job) {
  const PmixApi& api = Api();
  if (!api.missing.empty())
    return SystemError(api.missing + " (started by a PMIx launcher; or set BATON_ROOT=host:port)");
  pmix_proc_t me;
  memset(&me, 0, sizeof(me));
  pmix_status_t rc = api.init(&me, nullptr, 0);
  if (rc != PMIX_SUCCESS) return PmixError(api, "PMIx_Init", rc);
  // PMIx counts its initializations: this one ends here, whatever the
  // application (MPI, say) does with its own.
  struct Finalizer {
    const PmixApi& api;
    ~Finalizer() { api.finalize(nullptr, 0); }
  } finalizer{api};

  pmix_proc_t all = me;
  all.rank = PMIX_RANK_WILDCARD;
  uint64_t size = 0, local_rank = 0, local_size = 0;
  BATON_RETURN_IF_ERROR(GetUnsigned(api, all, PMIX_JOB_SIZE, &size));
  if (size < 1 || size > INT32_MAX || me.rank >= size)
    return SystemError("PMIx says rank " + std::to_string(me.rank) + " of " + std::to_string(size));
  job->rank = static_cast<int>(me.rank);
  job->size = static_cast<int>(size);
  job->source = "PMIx";
  if (GetUnsigned(api, me, PMIX_LOCAL_RANK, &local_rank).ok() &&
      GetUnsigned(api, all, PMIX_LOCAL_SIZE, &local_size).ok() && local_rank < local_size) {
    job->local_rank = static_cast<int>(local_rank);
    job->local_size = static_cast<int>(local_size);
  }

  batonUniqueId id;
  memset(&id, 0, sizeof(id));
  if (job->rank == 0) {
    BATON_RETURN_IF_ERROR(CreateUniqueId(settings.socket_ifname, TimeoutSeconds(settings), &id));
    pmix_value_t value;
    memset(&value, 0, sizeof(value));
    value.type = PMIX_BYTE_OBJECT;
    value.data.bo.bytes = id.internal;
    value.data.bo.size = sizeof(id.internal);
    rc = api.put(PMIX_GLOBAL, kIdKey, &value);
    if (rc != PMIX_SUCCESS) return PmixError(api, "PMIx_Put", rc);
  }
  rc = api.commit();
  if (rc != PMIX_SUCCESS) return PmixError(api, "PMIx_Commit", rc);
  // Everyone's data collected at the fence, which has the settings'
  // deadline like every other wait.
  pmix_info_t fence_info[2] = {Info(PMIX_COLLECT_DATA, PMIX_BOOL), Info(PMIX_TIMEOUT, PMIX_INT)};
  fence_info[0].value.data.flag = true;
  const double timeout_s = TimeoutSeconds(settings);
  fence_info[1].value.data.integer =
      timeout_s <= 0 || timeout_s > INT32_MAX ? 0 : static_cast<int>(timeout_s + 0.5);
  rc = api.fence(&all, 1, fence_info, fence_info[1].value.data.integer > 0 ? 2 : 1);
  if (rc != PMIX_SUCCESS) return PmixError(api, "PMIx_Fence", rc);
  if (job->rank != 0) {
    pmix_proc_t root = me;
    root.rank = 0;
    pmix_value_t* value = nullptr;
    rc = api.get(&root, kIdKey, nullptr, 0, &value);
    if (rc != PMIX_SUCCESS) return PmixError(api, "PMIx_Get of rank 0's unique id", rc);
    const bool good = value->type == PMIX_BYTE_OBJECT && value->data.bo.size == sizeof(id.internal);
    if (good) memcpy(id.internal, value->data.bo.bytes, sizeof(id.internal));
    api.value_destruct(value);
    free(value);
    if (!good) return SystemError("rank 0's unique id from PMIx is malformed");
  }
  BATON_RETURN_IF_ERROR(DecodeUniqueId(id, &job->id));
  BATON_INFO(kLogInit, "rank %d of %d from PMIx (namespace %s)", job->rank, job->size, me.nspace);
  return Status::Ok();
}

#endif  // BATON_HAVE_PMIX_HEADERS

}  // namespace baton
