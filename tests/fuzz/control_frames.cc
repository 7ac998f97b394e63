// Fuzz target: the control sockets' frames (transport/control.h) as a peer
// could send them: any bytes, parsed frame after frame as the watchdog does.
// Must never crash, read out of bounds, or accept a frame that breaks the
// format's bounds.
#include <cstddef>
#include <cstdint>

#include "transport/control.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int nranks = 1 + data[0] % 64;
  size_t offset = 1;
  while (offset < size) {
    baton::ControlFrame frame;
    size_t used = 0;
    const baton::FrameParse p =
        baton::DecodeFrame(data + offset, size - offset, nranks, &frame, &used);
    if (p != baton::FrameParse::kComplete) break;
    if (used == 0 || used > size - offset) __builtin_trap();
    if (frame.type == baton::FrameType::kNote &&
        (frame.note.origin < 0 || frame.note.origin >= nranks ||
         frame.note.text.size() > baton::kMaxNoteText))
      __builtin_trap();
    if (frame.type == baton::FrameType::kFailed) {
      if (frame.failed.empty() || frame.failed.size() > baton::kMaxFailedPerFrame)
        __builtin_trap();
      for (int r : frame.failed)
        if (r < 0 || r >= nranks) __builtin_trap();
    }
    offset += used;
  }
  return 0;
}
