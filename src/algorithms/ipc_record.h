// The record ranks exchange before a CUDA IPC collective (cuda/cuda_ipc.cc),
// and the verdict every rank draws from all of them. Kept free of CUDA so
// the verdict logic is tested on any machine (tests/ipc_plan_test.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "algorithms/ipc_plan.h"
#include "base/status.h"

namespace baton {

// What one rank tells the others about one call. Plain bytes: it travels
// through an allgather as is, so every field has a fixed size.
struct IpcRecord {
  uint32_t magic;
  uint32_t version;
  int32_t collective, datatype, op, root;
  uint64_t count;
  int32_t pid;
  uint32_t flags;                         // kIpcHas*, kIpcReady
  char bus_id[32];                        // PCI bus id of the rank's GPU, "0000:3b:00.0"
  char send_handle[64], recv_handle[64];  // cudaIpcMemHandle_t of the allocations
  uint64_t send_offset, recv_offset;      // of the buffers in those allocations
  uint64_t send_ptr, recv_ptr;            // the rank's own addresses (same-process peers)
  char reason[96];                        // why kIpcReady is missing, for the log
};

inline constexpr uint32_t kIpcRecordMagic = 0x43504942;  // "BIPC"
inline constexpr uint32_t kIpcRecordVersion = 1;
inline constexpr uint32_t kIpcHasSend = 1u << 0;
inline constexpr uint32_t kIpcHasRecv = 1u << 1;
inline constexpr uint32_t kIpcReady = 1u << 2;  // this rank can serve IPC (handles obtained)

// A zeroed record describing `call` from process `pid`, kIpcReady set.
IpcRecord MakeIpcRecord(const IpcCall& call, int pid);

// The record's call as the ordinary path words one
// (algorithms/call_description.h): "allreduce (4096 x float, sum)". The
// v-collectives' count is their total and their root field the counts'
// hash (launch/call.cc).
std::string DescribeIpcRecord(const IpcRecord& r);

// Marks a record as unable to serve IPC, with the reason (truncated).
void SetIpcNotReady(IpcRecord* record, const std::string& reason);

// What the records of all ranks say. Every rank holds the same records, so
// every rank reaches the same verdict: none is left waiting for another.
struct IpcVerdict {
  enum class Kind { kRun, kFallback, kError } kind = Kind::kRun;
  Status error;        // kError: batonInvalidUsage with the ranks' calls
  std::string reason;  // kFallback: which rank cannot serve IPC, and why
};
IpcVerdict JudgeIpcRecords(const std::vector<IpcRecord>& all);

// Names the set of (process, GPU) of all ranks: peer access is agreed once
// per such set.
std::string IpcPeerSetKey(const std::vector<IpcRecord>& all);

}  // namespace baton
