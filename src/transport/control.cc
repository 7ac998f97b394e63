#include "transport/control.h"

#include <algorithm>
#include <cstring>

namespace baton {
namespace {

struct FrameHeader {
  uint32_t magic;
  uint16_t type;
  uint16_t reserved;
  int32_t value;  // kNote: the result code
  uint32_t length;
};
static_assert(sizeof(FrameHeader) == 16, "the wire format is 16 bytes");

std::vector<uint8_t> Frame(FrameType type, int32_t value, const void* payload, size_t length) {
  FrameHeader h{kControlMagic, static_cast<uint16_t>(type), 0, value,
                static_cast<uint32_t>(length)};
  std::vector<uint8_t> out(sizeof(h) + length);
  memcpy(out.data(), &h, sizeof(h));
  if (length > 0) memcpy(out.data() + sizeof(h), payload, length);
  return out;
}

struct StatePayload {
  CallDescriptor call;
  uint32_t in_call;
  uint32_t reserved;
};
static_assert(sizeof(StatePayload) == 32, "the wire format is 32 bytes");

}  // namespace

Status FailureNote::AsStatus() const {
  return Status(code, text + " (reported by rank " + std::to_string(origin) + ")");
}

std::vector<uint8_t> EncodeNote(const FailureNote& note) {
  const size_t length = std::min(note.text.size(), kMaxNoteText);
  std::vector<uint8_t> payload(4 + length);
  const int32_t origin = note.origin;
  memcpy(payload.data(), &origin, 4);
  memcpy(payload.data() + 4, note.text.data(), length);
  return Frame(FrameType::kNote, note.code, payload.data(), payload.size());
}

std::vector<uint8_t> EncodeQuery() {
  return Frame(FrameType::kQuery, 0, nullptr, 0);
}

std::vector<uint8_t> EncodeState(const CallState& state) {
  StatePayload p{state.call, state.in_call ? 1u : 0u, 0};
  return Frame(FrameType::kState, 0, &p, sizeof(p));
}

std::vector<uint8_t> EncodeShrink(const ShrinkOffer& offer) {
  return Frame(FrameType::kShrink, 0, &offer, sizeof(offer));
}

std::vector<uint8_t> EncodeFailed(const std::vector<int>& ranks) {
  std::vector<uint8_t> out;
  for (size_t at = 0; at < ranks.size(); at += kMaxFailedPerFrame) {
    const size_t n = std::min(kMaxFailedPerFrame, ranks.size() - at);
    std::vector<int32_t> payload(ranks.begin() + static_cast<std::ptrdiff_t>(at),
                                 ranks.begin() + static_cast<std::ptrdiff_t>(at + n));
    const std::vector<uint8_t> frame =
        Frame(FrameType::kFailed, 0, payload.data(), payload.size() * sizeof(int32_t));
    out.insert(out.end(), frame.begin(), frame.end());
  }
  return out;
}

std::vector<uint8_t> EncodeLeave() {
  return Frame(FrameType::kLeave, 0, nullptr, 0);
}

FrameParse DecodeFrame(const uint8_t* data, size_t len, int nranks, ControlFrame* out,
                       size_t* used) {
  if (len < sizeof(FrameHeader)) return FrameParse::kIncomplete;
  FrameHeader h;
  memcpy(&h, data, sizeof(h));
  if (h.magic != kControlMagic || h.length > kMaxFrameBytes) return FrameParse::kInvalid;
  const auto type = static_cast<FrameType>(h.type);
  switch (type) {
    case FrameType::kNote:
      if (h.length < 4 || h.length > 4 + kMaxNoteText || h.value <= batonSuccess ||
          h.value >= batonNumResults || h.value == batonInProgress)
        return FrameParse::kInvalid;
      break;
    case FrameType::kQuery:
      if (h.length != 0) return FrameParse::kInvalid;
      break;
    case FrameType::kState:
      if (h.length != sizeof(StatePayload)) return FrameParse::kInvalid;
      break;
    case FrameType::kShrink:
      if (h.length != sizeof(ShrinkOffer)) return FrameParse::kInvalid;
      break;
    case FrameType::kFailed:
      if (h.length == 0 || h.length % 4 != 0 || h.length / 4 > kMaxFailedPerFrame)
        return FrameParse::kInvalid;
      break;
    case FrameType::kLeave:
      if (h.length != 0) return FrameParse::kInvalid;
      break;
    default:
      return FrameParse::kInvalid;
  }
  if (len < sizeof(h) + h.length) return FrameParse::kIncomplete;
  const uint8_t* payload = data + sizeof(h);
  out->type = type;
  if (type == FrameType::kNote) {
    int32_t origin;
    memcpy(&origin, payload, 4);
    if (origin < 0 || origin >= nranks) return FrameParse::kInvalid;
    out->note.code = static_cast<batonResult_t>(h.value);
    out->note.origin = origin;
    out->note.text.assign(reinterpret_cast<const char*>(payload) + 4, h.length - 4);
  } else if (type == FrameType::kShrink) {
    memcpy(&out->shrink, payload, sizeof(out->shrink));
  } else if (type == FrameType::kFailed) {
    out->failed.resize(h.length / 4);
    for (size_t i = 0; i < out->failed.size(); ++i) {
      int32_t r;
      memcpy(&r, payload + 4 * i, 4);
      if (r < 0 || r >= nranks) return FrameParse::kInvalid;
      out->failed[i] = r;
    }
  } else if (type == FrameType::kState) {
    StatePayload p;
    memcpy(&p, payload, sizeof(p));
    out->state.call = p.call;
    out->state.in_call = p.in_call != 0;
  }
  *used = sizeof(h) + h.length;
  return FrameParse::kComplete;
}

}  // namespace baton
