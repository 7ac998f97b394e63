// The control socket of each pair of ranks carries small frames beside the
// data: why a rank gave up (a failure note, sent just before it leaves, so
// that the survivors report the cause rather than only that a peer left),
// and, while a rank waits without progress, a question to its peers about
// the call they are in and their answers (so a rank can tell a peer in
// another call from a slow one, and name the rank everyone waits for).
//
// Frames: a 16-byte header (magic with the format's version, type, a value,
// payload length), then the payload; lengths are bounded, and anything
// else is not a frame.
#pragma once

#include <baton.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/call_descriptor.h"
#include "base/status.h"

namespace baton {

// Why a rank gave up. A rank that fails because of a note passes the same
// note on, with the rank it came from.
struct FailureNote {
  batonResult_t code = batonRemoteError;
  int origin = -1;   // the rank whose failure it describes
  std::string text;  // its message there

  // The status a rank other than the origin reports.
  Status AsStatus() const;
};

// Where a rank is: in a call, or between calls after one.
struct CallState {
  CallDescriptor call;   // the call it is in, or the last it finished
  bool in_call = false;  // false: it finished `call` (seq 0: no call yet)
};

// What the lowest surviving rank tells the others when a communicator
// shrinks: the unique id of the new communicator, and a fingerprint of the
// ranks it leaves out (the others check theirs against it).
struct ShrinkOffer {
  uint8_t unique_id[128] = {};
  uint64_t excluded_fingerprint = 0;
  uint32_t survivors = 0;
  uint32_t reserved = 0;
};
static_assert(sizeof(ShrinkOffer) == 144, "the wire format is 144 bytes");

enum class FrameType : uint16_t {
  kNote = 1,
  kQuery = 2,
  kState = 3,
  kShrink = 4,
  kFailed = 5,  // ranks (int32 each) the sender knows to have failed
  kLeave = 6,   // the sender frees its communicator on purpose
};

inline constexpr uint32_t kControlMagic = 0x42544e46;  // "BTNF", version 1
inline constexpr size_t kMaxNoteText = 2000;
inline constexpr size_t kMaxFrameBytes = 16 + 4 + kMaxNoteText;
// Ranks per kFailed frame (the same bound as a note's text); a longer list
// goes in several frames.
inline constexpr size_t kMaxFailedPerFrame = kMaxNoteText / 4;

std::vector<uint8_t> EncodeNote(const FailureNote& note);
std::vector<uint8_t> EncodeQuery();
std::vector<uint8_t> EncodeState(const CallState& state);
std::vector<uint8_t> EncodeShrink(const ShrinkOffer& offer);
// The failed ranks `ranks` (each in [0, nranks)), in as many frames as
// they need, back to back; nothing for an empty list.
std::vector<uint8_t> EncodeFailed(const std::vector<int>& ranks);
std::vector<uint8_t> EncodeLeave();

// One frame parsed from the front of what a control socket delivered.
struct ControlFrame {
  FrameType type = FrameType::kQuery;
  FailureNote note;         // kNote
  CallState state;          // kState
  ShrinkOffer shrink;       // kShrink
  std::vector<int> failed;  // kFailed: every one in [0, nranks)
};
enum class FrameParse { kComplete, kIncomplete, kInvalid };
// Parses the frame at the front of data[0, len); on kComplete, *used is its
// size. kInvalid: not a frame (another version of Baton, or garbage).
FrameParse DecodeFrame(const uint8_t* data, size_t len, int nranks, ControlFrame* out,
                       size_t* used);

}  // namespace baton
