// Partition: how Baton splits N items into P nearly equal parts, everywhere
// (ring segments, pipeline chunks, TCP stripes, IPC plan parts).
#pragma once

#include <cstddef>

namespace baton {

// [begin, end) of part `i` when `total` items are split into `parts` nearly
// equal contiguous parts (the first total % parts get one more).
inline void Partition(size_t total, size_t parts, size_t i, size_t* begin, size_t* end) {
  size_t q = total / parts, r = total % parts;
  *begin = q * i + (i < r ? i : r);
  *end = *begin + q + (i < r ? 1 : 0);
}

}  // namespace baton
