// The copy-in path: an allreduce on ordinary buffers of one host copies its
// input, a segment of at most kCopyInSegmentBytes at a time, into a stage of
// shared memory that the peers map, and the registered path's
// write-everywhere allreduce (host_ipc.cc) runs in place on the stages: rank
// r reduces part r of every stage and writes the result into every stage,
// then each rank copies its stage out. Two copies more than registered
// buffers, but of a segment that stays in the cache, so each input byte is
// still read from memory once and each output byte written once; and the
// ranks meet twice per segment instead of at every piece of a ring: what
// counts where ranks outnumber cores and every meeting costs a context
// switch (docs/performance.md, "Copy-in allreduce").
#include <algorithm>
#include <bit>
#include <cstring>

#include "base/cpu.h"
#include "base/datatype.h"
#include "comm/host_ipc.h"
#include "kernels/cpu_reduce.h"

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

namespace {

// Elements of one segment: the stage's size, the same on every rank.
size_t SegmentCount(const IpcCall& c) {
  return std::max<size_t>(1, kCopyInSegmentBytes / DatatypeSize(c.datatype));
}

}  // namespace

bool CopyIn(const RegisteredCall& rc, CopyInStage* stage, RegisteredCall* staged) {
  const size_t es = DatatypeSize(rc.call.datatype);
  const size_t bytes = std::min<size_t>(rc.call.count, SegmentCount(rc.call)) * es;
  if (!stage->Reserve(bytes == 0 ? 1 : bytes).ok()) return false;
  if (bytes != 0) std::memcpy(stage->data(), rc.send, bytes);
  *staged = rc;
  staged->send = staged->recv = stage->data();
  staged->send_alloc = staged->recv_alloc = stage->info();
  return true;
}

bool FitsOneCopyInSegment(const IpcCall& c) {
  return c.count <= SegmentCount(c);
}

Status RunCopyInAllReduce(ChannelSet& ch, const RegisteredCall& rc,
                          const std::vector<const uint8_t*>& send_base,
                          const std::vector<const uint8_t*>& recv_base, double timeout_s,
                          HostIpcState* st) {
  const IpcCall& c = rc.call;
  const size_t es = DatatypeSize(c.datatype), seg = SegmentCount(c);
  const auto* send = static_cast<const uint8_t*>(rc.send);
  auto* recv = static_cast<uint8_t*>(rc.recv);
  // Results nobody reads again within the call go to memory with streaming
  // stores once the call's buffers overflow the cache, as the slots' last
  // steps do; the stage itself stays in the cache.
  const bool streaming = StreamsOutputs(c.nranks, c.count * es);
  uint8_t* stage = st->stage.data();
  for (size_t b = 0; b < c.count; b += seg) {
    const size_t count = std::min(seg, c.count - b), bytes = count * es;
    if (b > 0) {
      // Every peer passed the last segment's closing barrier, so none reads
      // or writes this stage until it sees this rank's progress.
      std::memcpy(stage, send + b * es, bytes);
      ch.PublishProgress(++st->progress);
      BATON_RETURN_IF_ERROR(
          WaitAllProgress(ch, c.rank, c.nranks, st->progress, timeout_s, "a copy-in segment"));
    }
    IpcCall part = c;
    part.count = count;
    BATON_RETURN_IF_ERROR(RunWriteAllAllReduce(ch, part, send_base, recv_base, timeout_s, st));
    CopyOut(recv + b * es, stage, bytes, streaming);
  }
  return Status::Ok();
}

}  // namespace baton
