// Fuzz target: what a local peer writes into the slot ring that carries its
// messages to this rank (slot words with sizes and flags, call descriptors
// and their fingerprints, single-copy descriptors, inline data), received
// by a ShmChannel that expects one message of a given size and call. The
// receiver must check every word before it trusts it: no input may crash
// it, make it read outside the segment or write past its buffer, or hang it.
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "transport/shm.h"

namespace {

constexpr uint32_t kSlots = 4;
constexpr uint32_t kSlotBytes = 4096;

struct Segments {
  std::unique_ptr<baton::ShmSegment> own, peer;
};

// Two segments, made once per process and unlinked at once (the mappings
// stay): ours, whose ring the fuzzed peer writes, and the peer's.
Segments MakeSegments() {
  Segments s;
  const std::string prefix = "/baton-fuzz-" + std::to_string(getpid());
  const size_t bytes = baton::ShmSegmentBytes(1, kSlots, kSlotBytes);
  if (!baton::ShmSegment::Create(prefix + "-own", bytes, &s.own).ok() ||
      !baton::ShmSegment::Create(prefix + "-peer", bytes, &s.peer).ok())
    __builtin_trap();
  baton::InitShmSegment(s.own.get(), 1, kSlots, kSlotBytes);
  baton::InitShmSegment(s.peer.get(), 1, kSlots, kSlotBytes);
  s.own->Unlink();
  s.peer->Unlink();
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  static Segments segs = MakeSegments();
  baton::ShmRing* ring = segs.own->ring(0);
  ring->tail.store(0);
  for (auto& cell : ring->cells) cell.word.store(0);
  // The receiver's side: the size it expects, whether it reduces, whether
  // the message opens a call, whether single-copy descriptors may come.
  const size_t expected = 1 + (data[0] | (data[1] << 8)) % (3 * kSlotBytes);
  const bool reduce = data[2] & 1, opens = data[2] & 2, cma = data[2] & 4;
  data += 3;
  size -= 3;
  // The peer's side: each slot's word (its slot number usually right, so
  // the receiver reads on), fingerprint, descriptor and first bytes.
  for (uint32_t slot = 0; slot < kSlots && size > 0; ++slot) {
    baton::ShmSlotCell& cell = ring->cells[slot];
    uint8_t record[1 + 4 + 8 + sizeof(baton::CallDescriptor) + sizeof(baton::CmaDescriptor)] = {};
    const size_t n = size < sizeof(record) ? size : sizeof(record);
    memcpy(record, data, n);
    data += n;
    size -= n;
    uint32_t piece;
    memcpy(&piece, record + 1, 4);
    const uint32_t tag = (record[0] & 1) ? slot + 1 : record[0] >> 1;
    memcpy(&cell.tag_fingerprint, record + 5, 8);
    memcpy(&cell.tag, record + 13, sizeof(baton::CallDescriptor));
    memset(cell.inline_data, 0x3c, sizeof(cell.inline_data));
    memcpy(segs.own->slot(0, slot), record + 13 + sizeof(baton::CallDescriptor),
           sizeof(baton::CmaDescriptor));
    cell.word.store(static_cast<uint64_t>(tag) << 32 | piece);
  }
  const std::atomic<bool> peer_closed{true};  // then an empty slot ends the call
  baton::ShmChannel rx(segs.own.get(), 0, segs.peer.get(), 0, &peer_closed, 1);
  // Single-copy reads go to this very process: any address the input names
  // is either ours (harmless to read) or fails with EFAULT.
  if (cma) rx.EnableCma(false, getpid(), 1);
  std::vector<float> dst(expected / sizeof(float) + 2), local(dst.size(), 1.0f);
  baton::CallDescriptor call;
  call.kind = baton::kCallKindCollectiveBase;
  call.seq = 1;
  call.count = expected / 4;
  baton::RecvTarget t;
  t.dst = reinterpret_cast<uint8_t*>(dst.data());
  if (reduce) {
    t.reduce_with = reinterpret_cast<const uint8_t*>(local.data());
    t.datatype = batonFloat32;
    t.elem_size = 4;
  }
  t.opens = opens ? &call : nullptr;
  const size_t bytes = reduce ? expected / 4 * 4 + 4 : expected;
  size_t done = 0;
  for (int i = 0; i < 2 * kSlots && done < bytes; ++i)
    if (!rx.ProgressRecv(t, bytes, &done).ok()) break;
  if (done > bytes) __builtin_trap();
  return 0;
}
