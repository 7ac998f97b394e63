// CallDescriptor: what one call is (which collective, count, datatype, op,
// root, algorithm, and its number on the communicator), in 24 bytes. The
// first message of a call on each connection carries the sender's; the
// receiver compares it with its own, so ranks that called different things
// fail with a message naming both calls instead of exchanging bytes that do
// not belong together (wrong results, or a hang).
//
// Numbering: collectives (with barrier and Baton's own internal ones) are
// numbered per communicator in call order, the same on every rank; sends
// and receives are numbered per peer and direction, since only the two
// ranks of a pair take part.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace baton {

// CallDescriptor::kind: 1 + the Collective value (algorithms/collective.h)
// for the collectives, then these.
inline constexpr uint8_t kCallKindCollectiveBase = 1;
inline constexpr uint8_t kCallKindBarrier = 32;
inline constexpr uint8_t kCallKindInternal = 33;  // Baton's own (split, CUDA IPC, calibration)
inline constexpr uint8_t kCallKindPointToPoint = 34;

// CallDescriptor::op of a call with a PreMulSum op (batonNumOps): the kind
// of op, not the handle, which may differ between ranks.
inline constexpr uint8_t kCallOpPreMulSum = 5;

struct CallDescriptor {
  uint32_t seq = 0;  // the call's number (see above)
  // Collectives with a root: the root; 0 otherwise. Point-to-point, until
  // the communicator numbers the call: the peer.
  int32_t root = 0;
  uint64_t count = 0;
  uint8_t kind = 0;
  uint8_t datatype = 0;
  uint8_t op = 0;         // 0 where the call has no op
  uint8_t algorithm = 0;  // the Algorithm that built the schedule (collectives)
  // Point-to-point, until the communicator numbers the call: 1 for a send.
  // Numbering clears it and the peer, so both ends compare equal.
  uint8_t is_send = 0;
  // Collectives with per-rank counts that every rank passes alike
  // (allgatherv, reducescatterv): 24 bits of a hash of those counts, so
  // that ranks whose counts differ fail at their first message (count holds
  // only their sum). 0 otherwise.
  uint8_t counts_hash[3] = {0, 0, 0};

  // 64 bits that tell descriptors apart: what a shared-memory message
  // carries in its polled cache line (the full descriptor rides in a line
  // the receiver reads only when the fingerprints differ). Each word enters
  // through a bijection, so two descriptors that differ in one field (or
  // in one word) always differ here; a few cycles, as it is on every call.
  uint64_t Fingerprint() const {
    const auto* p = reinterpret_cast<const uint8_t*>(this);
    uint64_t w0, w1, w2;  // word loads (see CopyCallDescriptor)
    memcpy(&w0, p, 8);
    memcpy(&w1, p + 8, 8);
    memcpy(&w2, p + 16, 8);
    asm("" : "+r"(w0), "+r"(w1), "+r"(w2));
    return w0 ^ ((w1 << 21) | (w1 >> 43)) ^ ((w2 << 42) | (w2 >> 22));
  }

  bool operator==(const CallDescriptor& other) const {
    return memcmp(this, &other, sizeof(*this)) == 0;
  }
  bool operator!=(const CallDescriptor& other) const { return !(*this == other); }
};
static_assert(sizeof(CallDescriptor) == 24, "the wire format is 24 bytes");
// The numbering works on the three 64-bit words (little-endian x86 and
// arm64): seq and root share word 0, is_send sits in word 2.
static_assert(offsetof(CallDescriptor, seq) == 0 && offsetof(CallDescriptor, root) == 4 &&
                  offsetof(CallDescriptor, kind) == 16 && offsetof(CallDescriptor, is_send) == 20,
              "CallDescriptor's layout");
static_assert(offsetof(CallDescriptor, counts_hash) == 21, "counts_hash is bits 40..63 of word 2");
inline constexpr uint64_t kCallIsSendMask = uint64_t{0xff} << 32;  // in word 2

// Descriptors are built and copied a 64-bit word at a time: on the latency
// path a descriptor is copied soon after it is written, and a copy with
// wider (or narrower) moves than the writes stalls on store forwarding.
inline void StoreCallWords(CallDescriptor* to, uint64_t w0, uint64_t w1, uint64_t w2) {
  auto* dst = reinterpret_cast<uint8_t*>(to);
  memcpy(dst, &w0, 8);
  memcpy(dst + 8, &w1, 8);
  memcpy(dst + 16, &w2, 8);
}
inline void CopyCallDescriptor(CallDescriptor* to, const CallDescriptor& from) {
  const auto* src = reinterpret_cast<const uint8_t*>(&from);
  uint64_t w0, w1, w2;
  memcpy(&w0, src, 8);
  memcpy(&w1, src + 8, 8);
  memcpy(&w2, src + 16, 8);
  // Keeps the compiler from merging the words into one wider load.
  asm("" : "+r"(w0), "+r"(w1), "+r"(w2));
  StoreCallWords(to, w0, w1, w2);
}
// A descriptor, unnumbered (seq 0); `counts_hash`'s low 24 bits go to
// CallDescriptor::counts_hash.
inline void MakeCallDescriptor(CallDescriptor* to, uint8_t kind, uint64_t count, uint8_t datatype,
                               uint8_t op, int32_t root, uint8_t algorithm, bool is_send,
                               uint32_t counts_hash = 0) {
  StoreCallWords(to, uint64_t{static_cast<uint32_t>(root)} << 32, count,
                 uint64_t{kind} | uint64_t{datatype} << 8 | uint64_t{op} << 16 |
                     uint64_t{algorithm} << 24 | uint64_t{is_send ? 1u : 0u} << 32 |
                     uint64_t{counts_hash & 0xffffffu} << 40);
}

// The 24-bit hash of n counts that CallDescriptor::counts_hash holds
// (never 0, so that a descriptor with counts differs from one without).
inline uint32_t HashCounts(const size_t* counts, int n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (int i = 0; i < n; ++i) {
    h ^= counts[i];
    h *= 0x100000001b3ull;
    h ^= h >> 29;
  }
  const auto folded = static_cast<uint32_t>((h ^ (h >> 24) ^ (h >> 48)) & 0xffffffu);
  return folded != 0 ? folded : 1;
}

}  // namespace baton
