// The IPC exchange record and its verdict; see ipc_record.h.
#include "algorithms/ipc_record.h"

#include <cstdio>
#include <cstring>

#include "base/datatype.h"

namespace baton {

std::string DescribeIpcRecord(const IpcRecord& r) {
  const auto c = static_cast<Collective>(r.collective);
  std::string out = std::string(CollectiveName(c)) + " (" + std::to_string(r.count) + " x " +
                    DatatypeName(static_cast<batonDataType_t>(r.datatype));
  if (HasVariableCounts(c)) {
    char hash[16];
    std::snprintf(hash, sizeof(hash), "%x", static_cast<unsigned>(r.root));
    out += std::string(" in all, counts #") + hash;
  }
  if (Reduces(c)) out += std::string(", ") + RedOpName(static_cast<batonRedOp_t>(r.op));
  if (HasRoot(c)) out += ", root " + std::to_string(r.root);
  return out + ")";
}

IpcRecord MakeIpcRecord(const IpcCall& call, int pid) {
  IpcRecord r;
  std::memset(&r, 0, sizeof(r));
  r.magic = kIpcRecordMagic;
  r.version = kIpcRecordVersion;
  r.collective = static_cast<int32_t>(call.collective);
  r.datatype = call.datatype;
  r.op = call.op;
  r.root = call.root;
  r.count = call.count;
  r.pid = pid;
  r.flags = kIpcReady;
  return r;
}

void SetIpcNotReady(IpcRecord* record, const std::string& reason) {
  record->flags &= ~kIpcReady;
  std::snprintf(record->reason, sizeof(record->reason), "%s", reason.c_str());
}

IpcVerdict JudgeIpcRecords(const std::vector<IpcRecord>& all) {
  IpcVerdict v;
  for (size_t q = 0; q < all.size(); ++q) {
    const IpcRecord& r = all[q];
    if (r.magic != kIpcRecordMagic || r.version != kIpcRecordVersion) {
      v.kind = IpcVerdict::Kind::kError;
      v.error = InvalidUsage("rank " + std::to_string(q) +
                             " is not in the same CUDA IPC call (is BATON_CUDA_IPC the same on "
                             "all ranks, and do all ranks pass device buffers?)");
      return v;
    }
  }
  // Compared with rank 0's call, so every rank names the same two ranks.
  const IpcRecord& first = all[0];
  for (size_t q = 1; q < all.size(); ++q) {
    const IpcRecord& r = all[q];
    if (r.collective != first.collective || r.datatype != first.datatype || r.op != first.op ||
        r.root != first.root || r.count != first.count) {
      v.kind = IpcVerdict::Kind::kError;
      v.error =
          InvalidUsage("ranks disagree on the call: rank 0 called " + DescribeIpcRecord(first) +
                       ", rank " + std::to_string(q) + " called " + DescribeIpcRecord(r));
      return v;
    }
  }
  for (size_t q = 0; q < all.size(); ++q) {
    if (!(all[q].flags & kIpcReady)) {
      v.kind = IpcVerdict::Kind::kFallback;
      char reason[sizeof(all[q].reason) + 1] = {};
      std::memcpy(reason, all[q].reason, sizeof(all[q].reason));
      v.reason = "rank " + std::to_string(q) + ": " + reason;
      return v;
    }
  }
  return v;
}

std::string IpcPeerSetKey(const std::vector<IpcRecord>& all) {
  std::string key;
  for (const IpcRecord& r : all) {
    char bus[sizeof(r.bus_id) + 1] = {};
    std::memcpy(bus, r.bus_id, sizeof(r.bus_id));
    key += std::to_string(r.pid) + "@" + bus + ";";
  }
  return key;
}

}  // namespace baton
