// The C API of shareable host memory (base/shared_alloc.h) and of buffer
// registration (comm/registrations.h).
#include <baton.h>

#include <memory>

#include "api/checks.h"
#include "api/handles.h"
#include "base/shared_alloc.h"

#pragma GCC visibility push(default)

using namespace baton;  // NOLINT: the C API below is a thin layer over it

extern "C" {

batonResult_t batonMemAlloc(void** ptr, size_t size) {
  BATON_API_CHECK("batonMemAlloc", SharedAlloc(size, ptr), nullptr);
  return batonSuccess;
}

batonResult_t batonMemFree(void* ptr) {
  BATON_API_CHECK("batonMemFree", SharedFree(ptr), nullptr);
  return batonSuccess;
}

batonResult_t batonCommRegister(batonComm_t comm, void* buff, size_t size, void** handle) {
  const char* fn = "batonCommRegister";
  if (comm == nullptr) return Fail(fn, InvalidArgument("comm is NULL"));
  std::shared_ptr<Communicator> c = LookupComm(comm);
  if (!c) return Fail(fn, InvalidArgument("comm is not a live communicator"));
  BATON_API_CHECK(fn, c->registrations().Register(buff, size, handle), c.get());
  return batonSuccess;
}

batonResult_t batonCommDeregister(batonComm_t comm, void* handle) {
  const char* fn = "batonCommDeregister";
  if (comm == nullptr) return Fail(fn, InvalidArgument("comm is NULL"));
  std::shared_ptr<Communicator> c = LookupComm(comm);
  if (!c) return Fail(fn, InvalidArgument("comm is not a live communicator"));
  BATON_API_CHECK(fn, c->registrations().Deregister(handle), c.get());
  return batonSuccess;
}

}  // extern "C"

#pragma GCC visibility pop
