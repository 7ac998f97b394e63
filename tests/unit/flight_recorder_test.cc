// The flight recorder (comm/flight_recorder.h): its file holds every page
// from the start, so no call pays a page's first fault, and it keeps the
// last `capacity` calls in order as it wraps.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <memory>

#include "base/flight_record.h"
#include "comm/flight_recorder.h"

namespace baton {
namespace {

uint64_t Word(uint64_t seq) {
  return seq * 0x9E3779B97F4A7C15ull;
}

TEST(FlightRecorder, EveryPageIsThereBeforeTheFirstCall) {
  // 1000 entries: 16 pages of 4 KiB, all but the header's first one
  // reached only by later calls.
  constexpr uint32_t kCapacity = 1000;
  auto recorder = FlightRecorder::Create(kCapacity, /*to_file=*/true, 0, 2, 0xF1F1F1F1u, "host");
  ASSERT_NE(recorder, nullptr);
  if (recorder->path().empty()) GTEST_SKIP() << "/dev/shm refused the file (in memory)";
  struct stat st;
  ASSERT_EQ(stat(recorder->path().c_str(), &st), 0);
  // A file sized by ftruncate alone holds no blocks; pages of a tmpfs file
  // exist once something faulted them in.
  EXPECT_GE(static_cast<uint64_t>(st.st_blocks) * 512, FlightFileBytes(kCapacity));
}

TEST(FlightRecorder, KeepsTheLastCallsInOrderAsItWraps) {
  constexpr uint32_t kCapacity = 5;
  for (const bool to_file : {true, false}) {
    auto recorder = FlightRecorder::Create(kCapacity, to_file, 1, 2, 0xF2F2F2F2u, "host");
    ASSERT_NE(recorder, nullptr);
    EXPECT_FALSE(recorder->Latest().in_call);
    constexpr uint64_t kCalls = 13;
    for (uint64_t seq = 1; seq <= kCalls; ++seq) {
      const uint32_t entry = recorder->Begin(Word(seq), seq, ~seq);
      EXPECT_EQ(entry, (seq - 1) % kCapacity);
      EXPECT_TRUE(recorder->Latest().in_call);
      recorder->End(entry, seq == kCalls ? batonSystemError : batonSuccess);
      EXPECT_FALSE(recorder->Latest().in_call);
    }
    if (!to_file) continue;
    ASSERT_FALSE(recorder->path().empty());
    FlightSnapshot snapshot;
    ASSERT_TRUE(ReadFlightFile(recorder->path(), &snapshot));
    EXPECT_EQ(snapshot.calls, kCalls);
    EXPECT_EQ(snapshot.rank, 1);
    EXPECT_EQ(snapshot.pid, getpid());
    ASSERT_EQ(snapshot.last.size(), kCapacity);
    for (uint32_t i = 0; i < kCapacity; ++i) {
      const uint64_t seq = kCalls - kCapacity + 1 + i;
      uint64_t words[3];
      static_assert(sizeof(words) == sizeof(snapshot.last[i].call));
      memcpy(words, &snapshot.last[i].call, sizeof(words));
      EXPECT_EQ(words[0], Word(seq)) << "entry " << i;
      EXPECT_EQ(words[1], seq);
      EXPECT_EQ(words[2], ~seq);
      EXPECT_EQ(snapshot.last[i].state, seq == kCalls ? FlightState::kFailed : FlightState::kDone);
    }
  }
}

}  // namespace
}  // namespace baton
