// The copy-in path: an allreduce on ordinary buffers of one host copies its
// input into a stage of shared memory that the peers map, and the
// registered path's write-everywhere allreduce (host_ipc.cc) runs in place
// on the stages: rank r reduces part r of every stage and writes the result
// into every stage, then each rank copies its stage out. Two copies more
// than registered buffers, but the ranks meet twice per call (the records,
// the end) instead of at every piece of a ring: what counts where ranks
// outnumber cores and every meeting costs a context switch
// (docs/performance.md, "Copy-in allreduce").
#include <algorithm>
#include <bit>
#include <cstring>

#include "base/datatype.h"
#include "comm/host_ipc.h"

namespace baton {

CopyInStage::~CopyInStage() {
  if (ptr_ != nullptr) (void)SharedFree(ptr_);
}

Status CopyInStage::Reserve(size_t bytes) {
  if (ptr_ != nullptr && info_.size >= bytes) return Status::Ok();
  void* fresh = nullptr;
  // A power of two, so a program whose sizes creep up does not reallocate
  // (and make every peer map anew) at every call.
  BATON_RETURN_IF_ERROR(SharedAlloc(std::bit_ceil(std::max<size_t>(bytes, 4096)), &fresh));
  if (ptr_ != nullptr) (void)SharedFree(ptr_);
  ptr_ = fresh;
  // Found: the registry holds every SharedAlloc until SharedFree.
  FindSharedAlloc(ptr_, 0, &info_);
  return Status::Ok();
}

bool CopyIn(const RegisteredCall& rc, CopyInStage* stage, RegisteredCall* staged) {
  const size_t bytes = rc.call.count * DatatypeSize(rc.call.datatype);
  if (!stage->Reserve(bytes == 0 ? 1 : bytes).ok()) return false;
  if (bytes != 0 && rc.send != stage->data()) std::memcpy(stage->data(), rc.send, bytes);
  *staged = rc;
  staged->send = staged->recv = stage->data();
  staged->send_alloc = staged->recv_alloc = stage->info();
  return true;
}

void CopyOut(const RegisteredCall& rc, const CopyInStage& stage) {
  const size_t bytes = rc.call.count * DatatypeSize(rc.call.datatype);
  if (bytes != 0) std::memcpy(rc.recv, stage.data(), bytes);
}

}  // namespace baton
