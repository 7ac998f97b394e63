#include "comm/red_ops.h"

#include <atomic>
#include <climits>
#include <cstring>
#include <string>

#include "base/datatype.h"
#include "kernels/cpu_reduce.h"

namespace baton {
namespace {

// The next handle: process-wide, so that handles of different
// communicators never coincide. User ops start at batonNumOps, as in NCCL.
std::atomic<int64_t> g_next_op{batonNumOps};

}  // namespace

void PreMultiply(void* dst, const void* src, size_t count, batonDataType_t dt, const void* scalar) {
  ScaleCopy(dst, src, count, dt, scalar);
}

Status RedOpTable::Create(const void* scalar, batonDataType_t datatype,
                          batonScalarResidence_t residence, batonRedOp_t* op) {
  const int64_t value = g_next_op.fetch_add(1, std::memory_order_relaxed);
  if (value > batonMaxRedOp)
    return InvalidArgument("no reduction op handles left (" + std::to_string(batonMaxRedOp) +
                           " made in this process)");
  PreMulScalar s;
  s.datatype = datatype;
  s.residence = residence;
  if (residence == batonScalarHostImmediate) {
    memcpy(&s.value, scalar, DatatypeSize(datatype));
  } else {
    s.pointer = scalar;
  }
  std::lock_guard<std::mutex> lock(mu_);
  ops_.emplace(static_cast<int>(value), s);
  *op = static_cast<batonRedOp_t>(value);
  return Status::Ok();
}

Status RedOpTable::Destroy(batonRedOp_t op) {
  std::lock_guard<std::mutex> lock(mu_);
  if (ops_.erase(static_cast<int>(op)) == 0)
    return InvalidArgument("reduction op " + std::to_string(static_cast<int>(op)) +
                           " is not a live op of this communicator (built in, destroyed, or "
                           "created on another communicator)");
  return Status::Ok();
}

Status RedOpTable::Find(batonRedOp_t op, PreMulScalar* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = ops_.find(static_cast<int>(op));
  if (it == ops_.end())
    return InvalidArgument("reduction op " + std::to_string(static_cast<int>(op)) +
                           " is not a live op of this communicator (destroyed, or created on "
                           "another communicator)");
  *out = it->second;
  return Status::Ok();
}

}  // namespace baton
