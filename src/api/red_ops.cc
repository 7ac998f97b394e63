// The C API of user reduction ops (comm/red_ops.h): PreMulSum.
#include <baton.h>

#include <memory>
#include <string>

#include "api/checks.h"
#include "api/handles.h"
#include "base/datatype.h"

#pragma GCC visibility push(default)

using namespace baton;  // NOLINT: the C API below is a thin layer over it

extern "C" {

batonResult_t batonRedOpCreatePreMulSum(batonRedOp_t* op, void* scalar, batonDataType_t datatype,
                                        batonScalarResidence_t residence, batonComm_t comm) {
  const char* fn = "batonRedOpCreatePreMulSum";
  if (comm == nullptr) return Fail(fn, InvalidArgument("comm is NULL"));
  std::shared_ptr<Communicator> c = LookupComm(comm);
  if (!c) return Fail(fn, InvalidArgument("comm is not a live communicator"));
  if (op == nullptr) return Fail(fn, InvalidArgument("op is NULL"), c.get());
  if (scalar == nullptr) return Fail(fn, InvalidArgument("scalar is NULL"), c.get());
  BATON_API_CHECK(fn, CheckDatatype(datatype), c.get());
  if (residence != batonScalarDevice && residence != batonScalarHostImmediate)
    return Fail(
        fn,
        InvalidArgument("invalid scalar residence " + std::to_string(static_cast<int>(residence)) +
                        " (batonScalarDevice or batonScalarHostImmediate)"),
        c.get());
  BATON_API_CHECK(fn, c->red_ops().Create(scalar, datatype, residence, op), c.get());
  return batonSuccess;
}

batonResult_t batonRedOpDestroy(batonRedOp_t op, batonComm_t comm) {
  const char* fn = "batonRedOpDestroy";
  if (comm == nullptr) return Fail(fn, InvalidArgument("comm is NULL"));
  std::shared_ptr<Communicator> c = LookupComm(comm);
  if (!c) return Fail(fn, InvalidArgument("comm is not a live communicator"));
  BATON_API_CHECK(fn, c->red_ops().Destroy(op), c.get());
  return batonSuccess;
}

}  // extern "C"

#pragma GCC visibility pop
