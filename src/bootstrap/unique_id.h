// The unique id: what batonGetUniqueId hands out and every rank of a new
// communicator passes to batonCommInitRank, in binary and in its text form
// (256 hex digits, as batonrun exports it in BATON_UNIQUE_ID).
#pragma once

#include <baton.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/socket.h"
#include "base/status.h"

namespace baton {

inline constexpr uint32_t kUniqueIdMagic = 0x314e5442;  // "BTN1"
// Version of the unique id and of every bootstrap message.
inline constexpr uint32_t kBootstrapVersion = 6;
inline constexpr int kSecretBytes = 32;

// What batonUniqueId carries: where the rendezvous listens and the secret
// every connection of the new communicator must prove.
struct UniqueIdData {
  uint32_t magic;
  uint32_t version;
  WireAddr root;
  uint8_t secret[kSecretBytes];
  uint64_t comm_id;  // names shared-memory segments; random per communicator
};
static_assert(sizeof(UniqueIdData) <= BATON_UNIQUE_ID_BYTES);

// batonInvalidArgument unless `id` was made by this version of Baton.
Status DecodeUniqueId(const batonUniqueId& id, UniqueIdData* out);
batonUniqueId EncodeUniqueId(const UniqueIdData& data);

// The text form: every byte of the id as two lowercase hex digits.
// Header-only, so that batonrun (which links only the public library) and
// the library share one codec.
inline std::string UniqueIdToHex(const batonUniqueId& id) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * sizeof(id.internal));
  for (char c : id.internal) {
    const auto byte = static_cast<unsigned char>(c);
    hex.push_back(kDigits[byte >> 4]);
    hex.push_back(kDigits[byte & 0xf]);
  }
  return hex;
}

// The id written by UniqueIdToHex (either case), or nullopt for text of the
// wrong length or with a character that is not a hex digit.
inline std::optional<batonUniqueId> UniqueIdFromHex(std::string_view hex) {
  batonUniqueId id;
  if (hex.size() != 2 * sizeof(id.internal)) return std::nullopt;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < sizeof(id.internal); ++i) {
    const int high = nibble(hex[2 * i]), low = nibble(hex[2 * i + 1]);
    if (high < 0 || low < 0) return std::nullopt;
    id.internal[i] = static_cast<char>(high << 4 | low);
  }
  return id;
}

}  // namespace baton
