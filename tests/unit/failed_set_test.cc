// The bookkeeping of failed ranks (transport/failed_set.h) and the control
// frames that carry it between ranks (kFailed, kLeave).
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "transport/control.h"
#include "transport/failed_set.h"

namespace baton {
namespace {

TEST(FailedSetTest, GrowsSortedAndDistinct) {
  FailedSet set(6);
  EXPECT_EQ(set.count(), 0);
  EXPECT_TRUE(set.Sorted().empty());
  EXPECT_TRUE(set.Add(std::vector<int>{4, 1}));
  EXPECT_FALSE(set.Add(std::vector<int>{1, 4, 4}));    // nothing new: no growth to pass on
  EXPECT_FALSE(set.Add(std::vector<int>{-1, 6, 99}));  // not ranks of the communicator
  EXPECT_TRUE(set.Add(std::vector<int>{0, 4}));
  EXPECT_EQ(set.Sorted(), (std::vector<int>{0, 1, 4}));
  EXPECT_EQ(set.count(), 3);
  EXPECT_TRUE(set.contains(0));
  EXPECT_FALSE(set.contains(2));
  EXPECT_FALSE(set.contains(-1));
  EXPECT_FALSE(set.contains(6));
}

TEST(FailedSetTest, ClosingAfterAGoodbyeIsNoFailure) {
  FailedSet set(4);
  set.MarkLeft(2);  // destroyed its communicator on purpose
  EXPECT_FALSE(set.OnClosed(2));
  EXPECT_TRUE(set.OnClosed(3));  // gone without a word: died
  EXPECT_FALSE(set.OnClosed(3));
  EXPECT_EQ(set.Sorted(), (std::vector<int>{3}));
  // A rank listed before it left stays listed (an abort of a healthy
  // communicator lists the rank, then it says goodbye as it frees it).
  EXPECT_TRUE(set.Add(1));
  set.MarkLeft(1);
  EXPECT_EQ(set.Sorted(), (std::vector<int>{1, 3}));
  set.MarkLeft(-5);  // ignored
  EXPECT_FALSE(set.left(-5));
}

// Every frame of `bytes`, decoded in turn; every prefix is incomplete.
std::vector<ControlFrame> DecodeAll(const std::vector<uint8_t>& bytes, int nranks) {
  std::vector<ControlFrame> frames;
  size_t offset = 0;
  while (offset < bytes.size()) {
    ControlFrame frame;
    size_t used = 0;
    for (size_t cut = offset; cut < bytes.size(); ++cut) {
      const FrameParse p = DecodeFrame(bytes.data() + offset, cut - offset, nranks, &frame, &used);
      if (p == FrameParse::kComplete) break;
      EXPECT_EQ(p, FrameParse::kIncomplete) << cut;
    }
    EXPECT_EQ(DecodeFrame(bytes.data() + offset, bytes.size() - offset, nranks, &frame, &used),
              FrameParse::kComplete);
    if (used == 0) break;
    frames.push_back(frame);
    offset += used;
  }
  return frames;
}

TEST(FailedFrameTest, RoundTripsInFramesOfBoundedSize) {
  EXPECT_TRUE(EncodeFailed({}).empty());
  const std::vector<ControlFrame> one = DecodeAll(EncodeFailed({0, 5, 7}), 8);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].type, FrameType::kFailed);
  EXPECT_EQ(one[0].failed, (std::vector<int>{0, 5, 7}));
  // 16k ranks of which 1201 failed: three frames, the list whole.
  std::vector<int> many;
  for (int r = 0; r < 16384; r += 13) many.push_back(r);
  const std::vector<uint8_t> bytes = EncodeFailed(many);
  const std::vector<ControlFrame> frames = DecodeAll(bytes, 16384);
  ASSERT_EQ(frames.size(), (many.size() + kMaxFailedPerFrame - 1) / kMaxFailedPerFrame);
  std::vector<int> back;
  for (const ControlFrame& f : frames) {
    EXPECT_LE(f.failed.size(), kMaxFailedPerFrame);
    back.insert(back.end(), f.failed.begin(), f.failed.end());
  }
  EXPECT_EQ(back, many);
  const std::vector<ControlFrame> leave = DecodeAll(EncodeLeave(), 2);
  ASSERT_EQ(leave.size(), 1u);
  EXPECT_EQ(leave[0].type, FrameType::kLeave);
}

TEST(FailedFrameTest, RefusesWhatNoSenderWrites) {
  ControlFrame frame;
  size_t used = 0;
  // A rank outside the communicator.
  std::vector<uint8_t> bad = EncodeFailed({1, 8});
  EXPECT_EQ(DecodeFrame(bad.data(), bad.size(), 8, &frame, &used), FrameParse::kInvalid);
  bad = EncodeFailed({-1});
  EXPECT_EQ(DecodeFrame(bad.data(), bad.size(), 8, &frame, &used), FrameParse::kInvalid);
  // A length that is not a whole number of ranks, none, or over the bound.
  for (uint32_t length : {0u, 3u, 6u, static_cast<uint32_t>(4 * (kMaxFailedPerFrame + 1))}) {
    bad = EncodeFailed({1});
    bad.resize(16 + length, 0);
    memcpy(bad.data() + 12, &length, 4);
    EXPECT_EQ(DecodeFrame(bad.data(), bad.size(), 8, &frame, &used), FrameParse::kInvalid)
        << length;
  }
  // A goodbye with a payload.
  bad = EncodeLeave();
  const uint32_t four = 4;
  memcpy(bad.data() + 12, &four, 4);
  bad.resize(20, 0);
  EXPECT_EQ(DecodeFrame(bad.data(), bad.size(), 8, &frame, &used), FrameParse::kInvalid);
}

}  // namespace
}  // namespace baton
