// A schedule: what one rank does for one collective, as a list of steps
// (send, receive with optional reduction, local copy) with dependencies.
// Algorithms only build schedules; the Executor runs them over any
// transport, and tests run them over an in-memory one.
#pragma once

#include <baton.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "algorithms/collective.h"
#include "algorithms/ipc_plan.h"
#include "base/call_descriptor.h"
#include "base/shared_alloc.h"
#include "base/status.h"

namespace baton {

// One step of a schedule.
struct Op {
  enum class Kind : uint8_t { kSend, kRecv, kCopy };
  Kind kind = Kind::kCopy;
  int32_t peer = -1;  // kSend/kRecv: communicator rank
  uint64_t bytes = 0;
  const uint8_t* src = nullptr;          // kSend, kCopy
  uint8_t* dst = nullptr;                // kRecv, kCopy
  const uint8_t* reduce_with = nullptr;  // kRecv: dst = reduce_with (op) incoming
  batonDataType_t datatype = batonUint8;
  batonRedOp_t redop = batonSum;
  uint32_t post_divisor = 0;  // kRecv/kCopy: divide the result (avg)
  // kRecv with reduce_with: dst = incoming (op) reduce_with instead. Lets
  // both partners of an exchange put the lower rank's operand first, so
  // order-sensitive corner cases (max of +0/-0, NaN payloads) still give
  // bitwise identical results on every rank.
  bool incoming_first = false;
  // kRecv or kCopy: dst is final (nothing in the schedule reads it again)
  // in a call whose buffers overflow the cache, so it may be written with
  // streaming stores (CollArgs::stream_outputs).
  bool stream_dst = false;
  // kRecv with reduce_with: the result is also written here, with cached
  // stores, for a later send of it (one pass where a reduction into a
  // cached stage and a copy out of it took two). Only dst streams.
  uint8_t* copy_to = nullptr;
  // A PreMulSum call's scalar (one element of datatype), set where the op
  // reads this rank's own input (launch/premul.cc; algorithms leave it
  // null). kRecv: reduce_with is that input, multiplied by the scalar
  // before the reduction; kCopy: dst = src * scalar.
  const uint8_t* scale = nullptr;
  // kSend/kRecv: the call it belongs to (index into Schedule::calls). The
  // first message of each call on a connection carries its descriptor.
  uint16_t call = 0;
  int32_t deps[2] = {-1, -1};  // ops of this schedule to finish first
};

// A collective whose buffers this rank registered inside batonMemAlloc
// memory (batonCommRegister): when every rank's are, the communicator runs
// its IPC plan on the mapped buffers instead of the schedule's ops
// (comm/host_ipc.cc). A buffer the call does not touch here has size 0.
// A call on ordinary buffers large enough for the single-copy path
// (comm/host_cma.cc) travels the same way with `ordinary` set and no
// allocations: the peers reach its buffers through cross-memory attach.
// An allreduce on ordinary buffers of the copy-in path (comm/copy_in.cc)
// has `copy_in` set: its input is copied into the communicator's stage,
// which the peers map, and the call runs there.
struct RegisteredCall {
  bool valid = false;
  bool ordinary = false;
  bool copy_in = false;
  IpcCall call;
  const void* send = nullptr;
  void* recv = nullptr;
  SharedAllocInfo send_alloc, recv_alloc;
};

// An allreduce small enough for the lines (comm/lines.cc, ShmLines in
// transport/shm.h): where every rank shares memory, the communicator runs
// it there, each rank reading its peers' inputs where they wrote them,
// instead of the schedule's ops, which stay for every other case. Set by
// the call's builder.
struct LinesCall {
  bool valid = false;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  batonDataType_t datatype = batonFloat32;
  batonRedOp_t op = batonSum;
};

// The steps of one rank. Sends to a peer happen in the order they appear,
// and so do receives from a peer: that order is the wire protocol, so the
// schedules of two peers must list their messages to each other alike.
struct Schedule {
  std::vector<Op> ops;
  // The calls the ops belong to: one, or several merged by a group. Empty
  // for Baton's internal schedules (the communicator describes those).
  std::vector<CallDescriptor> calls;
  // What went wrong while building (a PreMulSum scalar that could not be
  // read): the schedule must not run, and the call fails with this.
  Status build_error;
  // Set by the call's builder when its buffers are registered; see above.
  RegisteredCall registered;
  // Set by the call's builder where the lines may carry it; see above.
  LinesCall lines;
  // Seconds without progress before the run fails: the shortest of its
  // calls' own timeouts (batonCommSetCallTimeout); < 0: the communicator's.
  double timeout_s = -1;
  // Takes `call_timeout_s` (< 0: none) into timeout_s.
  void LimitTimeout(double call_timeout_s) {
    if (call_timeout_s >= 0 && (timeout_s < 0 || call_timeout_s < timeout_s))
      timeout_s = call_timeout_s;
  }
  // Memory the schedule owns (partial sums, barrier tokens): blocks
  // [0, scratch_used) are live. A list of blocks keeps earlier pointers valid
  // as more is added. Blocks past scratch_used are kept from earlier calls so
  // that a reused schedule (one per communicator) allocates nothing for small
  // messages.
  std::vector<std::vector<uint8_t>> scratch;
  size_t scratch_used = 0;
  // Memory the schedule owns that its builder fills completely before
  // anything reads it (PreMulSum's scaled chunks): not zeroed, and kept
  // for the next call, since a fresh block of tens of MiB costs its page
  // faults again each time (blocks [0, filled_used) are live).
  struct FilledBlock {
    std::unique_ptr<uint8_t[]> data;
    size_t bytes = 0;
  };
  std::vector<FilledBlock> filled;
  size_t filled_used = 0;

  // Largest block clear() keeps for reuse; bigger ones go back to the heap
  // rather than pinning memory between calls.
  static constexpr size_t kRetainedScratchBytes = 1 << 20;

  // `bytes` of zeroed memory that lives until clear().
  uint8_t* AllocScratch(size_t bytes) {
    if (scratch_used == scratch.size()) scratch.emplace_back();
    std::vector<uint8_t>& block = scratch[scratch_used++];
    block.assign(bytes, 0);
    return block.data();
  }
  // Zeroes the live scratch blocks again, as a fresh build would leave
  // them: a schedule run a second time without rebuilding (a repeated call)
  // starts from the same state.
  void ZeroScratch() {
    for (size_t i = 0; i < scratch_used; ++i)
      std::fill(scratch[i].begin(), scratch[i].end(), uint8_t{0});
  }
  // Moves every op's pointer into [send, send + send_bytes) or [recv,
  // recv + recv_bytes) by `delta` bytes (a pointer one past such a range
  // only in an op of 0 bytes, which reads nothing): the schedule a builder
  // makes for buffers `delta` bytes further on, when nothing else differs.
  // Scratch and any other memory stay where they are.
  void Rebase(const void* send, size_t send_bytes, const void* recv, size_t recv_bytes,
              ptrdiff_t delta);
  // `bytes` of memory, uninitialized, that lives until clear().
  uint8_t* AllocFilled(size_t bytes) {
    if (filled_used == filled.size()) filled.emplace_back();
    FilledBlock& block = filled[filled_used++];
    if (block.bytes < bytes) {
      block.data = std::make_unique_for_overwrite<uint8_t[]>(bytes);
      block.bytes = bytes;
    }
    return block.data.get();
  }
  // Appends an op and returns its index (for dependencies).
  int Add(const Op& op) {
    ops.push_back(op);
    return static_cast<int>(ops.size()) - 1;
  }
  // Empties the schedule, keeping the ops' capacity and small scratch
  // blocks for the next call.
  void Clear() {
    ops.clear();
    calls.clear();
    registered.valid = false;
    lines.valid = false;
    timeout_s = -1;
    filled_used = 0;
    if (!build_error.ok()) [[unlikely]]
      build_error = Status::Ok();
    for (auto& block : scratch)
      if (block.capacity() > kRetainedScratchBytes) std::vector<uint8_t>().swap(block);
    scratch_used = 0;
  }
  // Appends all of `other`'s ops after ours (group calls), keeping their
  // dependencies pointing at the same ops and their calls.
  void Append(Schedule&& other);
  // Takes over `other`'s live scratch and filled blocks (its ops point into
  // them), giving it our spare ones in exchange.
  void TakeMemory(Schedule&& other);
};

// Pipelining granularity when neither BATON_CHUNKSIZE nor the cost model
// sets one (Baton's own small collectives).
inline constexpr size_t kDefaultChunkBytes = 512 << 10;

// The recursive halving/doubling allreduce's switch when nothing chose one
// (CollArgs::rhd_switch_bytes): recursive doubling below it, Rabenseifner
// from it. The tuner replaces it with the cost model's crossover of the two
// (docs/tuning.md); 16 KiB sits between the model's crossovers over shared
// memory (2-14 KiB) and between hosts over TCP (tens of KiB and up).
inline constexpr size_t kRhdSmallMessageBytes = 16 << 10;

// The ranks of a communicator grouped by host, the same number on each, for
// the hierarchical algorithms: ranks[h * per_host + i] is local rank i of
// host h (hosts and their ranks in ring order).
struct HostLayout {
  int hosts = 1;
  int per_host = 1;
  std::vector<int> ranks;
  std::vector<int> slot_of;  // rank -> its index into ranks
};

// Inputs of an algorithm: one rank's view of one call.
struct CollArgs {
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;  // elements: per rank for allgather/reducescatter/alltoall
  batonDataType_t datatype = batonFloat32;
  batonRedOp_t op = batonSum;
  int root = 0;
  int rank = 0;
  int nranks = 1;
  // Ring order: ranks in the order data travels (ranks of a host together).
  const std::vector<int>* ring = nullptr;
  size_t chunk_bytes = kDefaultChunkBytes;  // pipelining granularity
  // The call's buffers overflow the last-level cache: builders may mark
  // final copies into the output for streaming stores (Op::stream_dst),
  // which skip the read for ownership and leave the cache to the data
  // still in flight.
  bool stream_outputs = false;
  // A send of at most this many bytes to any rank of the call completes
  // without that rank's receive (the transport holds it: a shared-memory
  // ring), so a receive may wait for a send to the same peer (in place);
  // 0 promises nothing (TCP: both sides' socket buffers may fill).
  size_t sends_buffered_bytes = 0;
  // Hierarchical algorithms: the hosts (null when they hold different
  // numbers of ranks) and the allreduce run among them.
  const HostLayout* hosts = nullptr;
  Algorithm inter_host = Algorithm::kRing;
  // Allreduce by recursive halving/doubling (flat, or hierarchical's
  // inter-host stage): vectors of fewer bytes than this run recursive
  // doubling, the others Rabenseifner (a vector of fewer elements than
  // ranks always recursive doubling). The tuner sets it to the cost model's
  // crossover; 0 always takes Rabenseifner, SIZE_MAX recursive doubling.
  size_t rhd_switch_bytes = kRhdSmallMessageBytes;
  // Variable counts (allgatherv, reducescatterv, alltoallv), in elements, as
  // MPI lays them out: the receive side's counts and displacements per rank,
  // and (alltoallv) the send side's. Null counts: every block is `count`
  // elements, packed in rank order (the uniform collective; the cost model's
  // replays use that). The arrays outlive the schedule's run.
  const size_t* counts = nullptr;
  const size_t* displs = nullptr;
  const size_t* send_counts = nullptr;
  const size_t* send_displs = nullptr;

  bool operator==(const CollArgs&) const = default;
};

}  // namespace baton
