// Collectives on registered host buffers (batonCommRegister) between the
// ranks of one host: every rank reads its peers' buffers in place, mapped
// from their batonMemAlloc memfds, and runs the call's IpcPlan
// (algorithms/ipc_plan.h) with the CPU reduce-copy kernels. One pass
// through memory, no staging copy, no ring slots.
//
// Per call, on every rank of a communicator whose peers all share memory:
//   1. each rank publishes in its shm mailbox (transport/shm.h) either an
//      IpcRecord of its registered buffers (memfd identity and offsets,
//      and the call, so disagreeing ranks get an error, not garbage), or,
//      on the ordinary path, just the call number (one store);
//   2. a rank with a record waits for every peer's word on the same call
//      (deadline BATON_TIMEOUT, a peer's death an error): any peer without
//      a record sends everybody the ordinary way, which that peer took
//      without waiting;
//   3. otherwise it maps the peers' allocations (cached per peer process
//      and allocation) and runs the plan. The first such call also settles
//      whether every rank can map its peers' memory at all: each rank
//      tries, says so on its progress word, and if any could not, this
//      call and every later one take the ordinary path on every rank. Allreduce is pipelined: rank
//      r reduces chunk j of part r of all inputs into its output, announces it on its progress word
//      (shm.h), and copies chunk j of every other part from its owner's output as soon as the owner
//      announced it, so that copy reads the shared cache rather than memory. The other collectives
//      run the IPC plan's phases. Every call ends with a barrier on the progress words, so no rank
//      returns while a peer may still read its buffers. Every wait has the BATON_TIMEOUT deadline
//      and fails at once when the awaited peer's sockets close; failures abort the communicator, so
//      the peers fail at once too.
// The state lives with the communicator (Communicator::RunRegisteredLocked).
#pragma once

#include <cstdint>
#include <list>
#include <utility>
#include <vector>

#include "algorithms/ipc_plan.h"
#include "algorithms/ipc_record.h"
#include "algorithms/schedule.h"
#include "base/shared_alloc.h"
#include "transport/channel_set.h"

namespace baton {

// The memfd of a registered buffer, as an IpcRecord carries it (in the
// CUDA handle's bytes).
static_assert(sizeof(SharedAllocInfo) <= sizeof(IpcRecord::send_handle),
              "an IpcRecord holds a SharedAllocInfo");
static_assert(sizeof(IpcRecord) <= 8 * 56, "an IpcRecord fits an shm mailbox");

// The communicator's stage for the copy-in path (comm/copy_in.cc): shared
// memory of this rank's that its peers map like a registered buffer.
// Grows by reallocation; peers map the new allocation by its serial.
class CopyInStage {
 public:
  CopyInStage() = default;
  CopyInStage(const CopyInStage&) = delete;
  CopyInStage& operator=(const CopyInStage&) = delete;
  ~CopyInStage();
  // At least `bytes` (> 0) of stage.
  Status Reserve(size_t bytes);
  uint8_t* data() const { return static_cast<uint8_t*>(ptr_); }
  const SharedAllocInfo& info() const { return info_; }

 private:
  void* ptr_ = nullptr;
  SharedAllocInfo info_;
};

struct HostIpcState {
  // Mapped peer allocations by (pid, allocation serial), most recent first.
  std::list<std::pair<std::pair<int32_t, uint64_t>, PeerMapping>> mappings;
  std::vector<IpcRecord> records;
  IpcPlan plan;
  std::vector<uint8_t> scratch;  // the allreduce's cache-sized piece (host_ipc.cc)
  uint64_t progress = 0;         // this rank's progress word (the same on every rank between calls)
  bool noted = false;            // the first registered call was logged
  bool copy_in_noted = false;    // the first copy-in call was logged
  CopyInStage stage;             // ordinary buffers' inputs, copied in (copy_in.cc)
  uint32_t cma_noted = 0;        // per Collective (bit): its first single-copy call was logged
  // Whether every rank can map every peer's allocations, settled by the
  // first call that has records from everybody (RunRegisteredLocked): a
  // rank that cannot (another user, another pid namespace, no /proc)
  // sends every later call the ordinary way, on every rank.
  enum class Reach { kUnknown, kYes, kNo } reach = Reach::kUnknown;
  // Whether every rank can read every peer's memory with process_vm_readv
  // (comm/host_cma.cc), settled the same way by the first call that offers
  // the single-copy path from every rank.
  Reach cma_reach = Reach::kUnknown;
  // Returns the mapping of `info`, opening it if needed.
  Status Map(const SharedAllocInfo& info, const uint8_t** base);
};

// Record flags of host calls: the buffers are ordinary (reached through
// cross-memory attach, not mapped), and this rank offers the single-copy
// path (BATON_CMA_COLL), which runs only when every rank does.
inline constexpr uint32_t kIpcOrdinary = 1u << 3;
inline constexpr uint32_t kIpcCma = 1u << 4;
// The rank's buffers are its copy-in stage (copy_in.cc), which holds one
// segment of the call.
inline constexpr uint32_t kIpcCopyIn = 1u << 5;

// This rank's record for `rc` (its buffers' addresses always included).
IpcRecord MakeHostIpcRecord(const RegisteredCall& rc, bool offer_cma);

// Helpers the mapped and the single-copy executors share (host_ipc.cc).
// Every peer's progress word at `target` or past it: a barrier through
// shared memory (deadline, abort, a peer's death).
Status WaitAllProgress(ChannelSet& ch, int me, int n, uint64_t target, double timeout_s,
                       const char* what);
// dst = the inputs reduced in the order given, in passes of at most kMaxReduceSrcs.
void ReduceInputs(const std::vector<const uint8_t*>& inputs, uint8_t* dst, size_t count,
                  batonDataType_t datatype, batonRedOp_t op, uint32_t divisor);
// Every rank says whether it can (`able`) and learns whether all can, in
// two rounds on the progress words; *progress moves past both rounds alike
// on every rank. *unable: a rank that cannot (this one first), or -1.
Status AgreeOnProgressWords(ChannelSet& ch, int me, int n, double timeout_s, bool able,
                            uint64_t* progress, int* unable);

// The call on ordinary (or mixed) buffers through process_vm_readv /
// process_vm_writev (host_cma.cc): `records` give every rank's pid and
// buffer addresses; allreduce writes everywhere, the others run the IPC
// plan. Ends with a barrier.
Status RunCmaCall(ChannelSet& ch, const IpcCall& c, const void* send, void* recv,
                  const std::vector<IpcRecord>& records, double timeout_s, HostIpcState* st);
// Allreduce that writes everywhere (host_ipc.cc): rank r reduces part r of
// every rank's input at `send_base` and writes it into every rank's output
// at `recv_base` (in place allowed); ends with a barrier.
Status RunWriteAllAllReduce(ChannelSet& ch, const IpcCall& c,
                            const std::vector<const uint8_t*>& send_base,
                            const std::vector<const uint8_t*>& recv_base, double timeout_s,
                            HostIpcState* st);

// The copy-in path (copy_in.cc), for allreduce. CopyIn copies the first
// segment of this rank's input of `rc` into the stage (kCopyInSegmentBytes
// at most; the stage holds one segment) and describes in *staged the same
// call in place on the stage, whose record the ranks then exchange; false
// when the stage cannot grow (this rank then takes the ordinary path, and
// so do its peers). RunCopyInAllReduce then runs the call segment by
// segment on the peers' buffers (`send_base`, `recv_base`: stages, or a
// registered rank's buffers when the call fits one segment), copying each
// segment's result into the caller's output and the next segment in, with
// a barrier before each later segment.
inline constexpr size_t kCopyInSegmentBytes = 1 << 20;
bool CopyIn(const RegisteredCall& rc, CopyInStage* stage, RegisteredCall* staged);
Status RunCopyInAllReduce(ChannelSet& ch, const RegisteredCall& rc,
                          const std::vector<const uint8_t*>& send_base,
                          const std::vector<const uint8_t*>& recv_base, double timeout_s,
                          HostIpcState* st);
// Whether the call `c` fits one copy-in segment.
bool FitsOneCopyInSegment(const IpcCall& c);

// The memfd identity a record carries for a buffer.
SharedAllocInfo RecordAlloc(const IpcRecord& r, bool send);

}  // namespace baton
