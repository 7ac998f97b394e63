// Fuzz target: unique ids as users and launchers hand them over (the hex
// text of BATON_UNIQUE_ID, and the 128 bytes themselves): refused with a
// Status or accepted, never a crash.
#include <baton.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "bootstrap/unique_id.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto id = baton::UniqueIdFromHex(text)) {
    baton::UniqueIdData decoded;
    (void)baton::DecodeUniqueId(*id, &decoded);
  }
  batonUniqueId raw;
  memset(&raw, 0, sizeof(raw));
  memcpy(raw.internal, data, size < sizeof(raw.internal) ? size : sizeof(raw.internal));
  baton::UniqueIdData decoded;
  if (baton::DecodeUniqueId(raw, &decoded).ok()) {
    // What decodes must encode back to an id that decodes alike.
    baton::UniqueIdData again;
    if (!baton::DecodeUniqueId(baton::EncodeUniqueId(decoded), &again).ok()) __builtin_trap();
  }
  return 0;
}
