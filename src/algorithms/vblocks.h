// The blocks of a variable-count collective (CollArgs::counts and friends)
// as byte ranges, for the v builders: where rank r's block lies in a
// buffer and how large it is, with the uniform layout (count elements per
// rank, packed) when the call has no per-rank counts.
#pragma once

#include <cstddef>
#include <vector>

#include "algorithms/schedule.h"
#include "base/datatype.h"

namespace baton {

// Byte offset and size of every rank's block in one buffer.
struct VBlocks {
  std::vector<size_t> offset, bytes;
  size_t total = 0;  // sum of the sizes
  // Whether the blocks lie back to back in rank order from offset 0.
  bool packed = true;
};

// counts[r] / displs[r] elements of `es` bytes; counts null: `count` each;
// displs null: packed.
inline VBlocks MakeVBlocks(int nranks, size_t es, size_t count, const size_t* counts,
                           const size_t* displs) {
  VBlocks b;
  b.offset.resize(nranks);
  b.bytes.resize(nranks);
  size_t packed_at = 0;
  for (int r = 0; r < nranks; ++r) {
    b.bytes[r] = (counts != nullptr ? counts[r] : count) * es;
    b.offset[r] = displs != nullptr ? displs[r] * es : packed_at;
    // An empty block lies nowhere: it does not break packing.
    b.packed = b.packed && (b.bytes[r] == 0 || b.offset[r] == packed_at);
    packed_at += b.bytes[r];
  }
  b.total = packed_at;
  return b;
}

// The receive side of a v call (allgatherv: the output; reducescatterv: the
// per-rank counts, packed, which is also the layout of its input).
inline VBlocks RecvBlocks(const CollArgs& a) {
  return MakeVBlocks(a.nranks, DatatypeSize(a.datatype), a.count, a.counts, a.displs);
}

// The send side of an alltoallv.
inline VBlocks SendBlocks(const CollArgs& a) {
  return MakeVBlocks(a.nranks, DatatypeSize(a.datatype), a.count, a.send_counts, a.send_displs);
}

}  // namespace baton
