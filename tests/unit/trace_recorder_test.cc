// The timeline's recorder (comm/trace_recorder.h): a bounded buffer that
// counts the calls it has no room for, per-call bytes and peers from the
// schedule's ops, and a file that reports what was dropped. The end-to-end
// check of a job's merged timeline is tests/scripts/trace_test.sh.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "base/cpu.h"
#include "base/trace_file.h"
#include "comm/trace_recorder.h"

namespace baton {
namespace {

CallDescriptor Numbered(Collective c, uint32_t seq, uint64_t count) {
  CallDescriptor d;
  MakeCallDescriptor(&d, static_cast<uint8_t>(kCallKindCollectiveBase + static_cast<int>(c)), count,
                     batonFloat32, batonSum, 0, static_cast<uint8_t>(Algorithm::kRing), false);
  d.seq = seq;
  return d;
}

Op Message(Op::Kind kind, int peer, uint64_t bytes, uint16_t call = 0) {
  Op op;
  op.kind = kind;
  op.peer = peer;
  op.bytes = bytes;
  op.call = call;
  return op;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TraceRecorderConfig Config(uint32_t capacity) {
  TraceRecorderConfig c;
  c.capacity = capacity;
  c.path = testing::TempDir() + "trace_recorder_test." + std::to_string(getpid()) + ".json";
  c.track = 3;
  c.comm_rank = 1;
  c.nranks = 4;
  c.host = "host\"1";
  return c;
}

TEST(TraceRecorderTest, AFullBufferCountsWhatItDrops) {
  TraceRecorder trace(Config(3));
  Schedule s;
  s.Add(Message(Op::Kind::kSend, 2, 8));
  s.Add(Message(Op::Kind::kRecv, 0, 8));
  for (uint32_t seq = 1; seq <= 5; ++seq) {
    trace.Begin(s, {Numbered(Collective::kAllReduce, seq, 2)});
    trace.End(batonSuccess);
  }
  ASSERT_EQ(trace.size(), 3u);
  EXPECT_EQ(trace.dropped(), 2u);
  for (size_t i = 0; i < trace.size(); ++i) {
    CallDescriptor d;
    StoreCallWords(&d, trace.event(i).words[0], trace.event(i).words[1], trace.event(i).words[2]);
    EXPECT_EQ(d.seq, i + 1);  // the first calls are kept
    EXPECT_LE(trace.event(i).begin, trace.event(i).end);
    EXPECT_EQ(trace.event(i).sent, 8u);
    EXPECT_EQ(trace.event(i).received, 8u);
    EXPECT_EQ(trace.event(i).peer_count, 2);
  }
  ASSERT_TRUE(trace.Write().ok());
  const std::string text = ReadFile(trace.config().path);
  unlink(trace.config().path.c_str());
  EXPECT_NE(text.find("\"dropped\":2"), std::string::npos) << text;
  EXPECT_NE(text.find("2 Baton calls not traced"), std::string::npos) << text;
  EXPECT_NE(text.find("\"name\":\"rank 3 (host\\\"1)\""), std::string::npos) << text;
  EXPECT_NE(text.find("\"name\":\"allreduce\""), std::string::npos) << text;
  EXPECT_NE(text.find("\"algorithm\":\"ring\""), std::string::npos) << text;
  EXPECT_NE(text.find("\"op\":\"sum\""), std::string::npos) << text;
}

TEST(TraceRecorderTest, AGroupThatDoesNotFitIsDroppedWhole) {
  TraceRecorder trace(Config(2));
  Schedule one;
  trace.Begin(one, {Numbered(Collective::kBroadcast, 1, 4)});
  trace.End(batonSuccess);
  Schedule group;
  group.Add(Message(Op::Kind::kSend, 1, 16, 0));
  group.Add(Message(Op::Kind::kRecv, 2, 32, 1));
  trace.Begin(group,
              {Numbered(Collective::kAllReduce, 2, 4), Numbered(Collective::kAllGather, 3, 4)});
  trace.End(batonSuccess);
  EXPECT_EQ(trace.size(), 1u);
  EXPECT_EQ(trace.dropped(), 2u);
}

TEST(TraceRecorderTest, GroupCallsGetTheirOwnBytesAndPeers) {
  TraceRecorder trace(Config(8));
  Schedule group;
  group.Add(Message(Op::Kind::kSend, 1, 16, 0));
  group.Add(Message(Op::Kind::kSend, 1, 16, 0));
  group.Add(Message(Op::Kind::kRecv, 2, 32, 1));
  group.Add(Message(Op::Kind::kCopy, -1, 64, 1));
  trace.Begin(group,
              {Numbered(Collective::kAllReduce, 2, 4), Numbered(Collective::kAllGather, 3, 4)});
  trace.End(batonTimeout);
  ASSERT_EQ(trace.size(), 2u);
  EXPECT_EQ(trace.event(0).sent, 32u);
  EXPECT_EQ(trace.event(0).received, 0u);
  ASSERT_EQ(trace.event(0).peer_count, 1);
  EXPECT_EQ(trace.event(0).peers[0], 1);
  EXPECT_EQ(trace.event(1).received, 32u);
  ASSERT_EQ(trace.event(1).peer_count, 1);
  EXPECT_EQ(trace.event(1).peers[0], 2);
  EXPECT_EQ(trace.event(0).group, 2);
  EXPECT_EQ(trace.event(1).result, batonTimeout);
  EXPECT_EQ(trace.event(0).begin, trace.event(1).begin);
}

TEST(TraceRecorderTest, ManyPeersAreCutShort) {
  TraceRecorder trace(Config(1));
  Schedule s;
  for (int p = 0; p < TraceEvent::kPeers + 3; ++p) s.Add(Message(Op::Kind::kSend, p, 1));
  trace.Begin(s, {Numbered(Collective::kAlltoAll, 1, 1)});
  trace.End(batonSuccess);
  EXPECT_EQ(trace.event(0).peer_count, TraceEvent::kPeers);
  EXPECT_TRUE(trace.event(0).more_peers);
}

TEST(TraceRecorderTest, TicksBecomeRealtimeAndUnfinishedCallsEndNow) {
  TraceRecorder trace(Config(4));
  Schedule s;
  trace.Begin(s, {Numbered(Collective::kReduce, 7, 1)});
  trace.Begin(s, {Numbered(Collective::kReduce, 8, 1)});
  TraceEvent events[2] = {trace.event(0), trace.event(1)};
  // The ticks' rate as the recorder takes it (base/cpu.h): the TSC's from
  // the two points on x86 (2 GHz here), CNTFRQ_EL0's on aarch64, and ticks
  // that are CLOCK_REALTIME ns already elsewhere. `from` is 1 s after the
  // epoch; the calls sit 1, 2 and 3 ms after it, `now` 4 ms after.
  const uint64_t hz = !kHaveCycleCounter      ? 1'000'000'000
                      : CycleCounterHz() != 0 ? CycleCounterHz()
                                              : 2'000'000'000;
  ASSERT_EQ(hz % 1000, 0u) << "a counter rate that is not a whole number of kHz";
  const int64_t ms = static_cast<int64_t>(hz / 1000);  // ticks a millisecond
  const int64_t t0 = kHaveCycleCounter ? 12345 : 1'000'000'000;
  TraceClock from, now;
  from.ticks = t0;
  from.realtime_ns = 1'000'000'000;
  now.ticks = t0 + 4 * ms;
  now.realtime_ns = 1'000'000'000 + 4'000'000;
  EXPECT_DOUBLE_EQ(TraceClock::NsPerTick(from, now), 1e9 / static_cast<double>(hz));
  events[0].begin = t0 + ms;
  events[0].end = t0 + 2 * ms;
  events[1].begin = t0 + 3 * ms;  // unfinished: ends at now
  const std::string json = TraceEventsJson(trace.config(), events, 2, from, now);
  EXPECT_NE(json.find("\"ts\":1001000.000,\"dur\":1000.000"), std::string::npos) << json;
  EXPECT_NE(json.find("\"ts\":1003000.000,\"dur\":1000.000"), std::string::npos) << json;
  EXPECT_NE(json.find("\"unfinished\":true"), std::string::npos) << json;
  EXPECT_EQ(json.find("\"unfinished\":true"), json.rfind("\"unfinished\":true")) << json;
  EXPECT_NE(json.find("\"root\":0"), std::string::npos) << json;
}

// The live counter (TSC, CNTVCT_EL0) against CLOCK_REALTIME over 50 ms: the
// converted span matches the clock's (on aarch64 this checks CNTFRQ_EL0).
TEST(TraceRecorderTest, CounterKeepsPaceWithTheClock) {
  if (kHaveCycleCounter && CycleCounterHz() == 0) {
    // x86: the rate is measured between the two points, so take three.
    const TraceClock a = TraceClock::Now();
    usleep(50'000);
    const TraceClock b = TraceClock::Now();
    usleep(50'000);
    const TraceClock c = TraceClock::Now();
    EXPECT_NEAR(TraceClock::ToNs(b.ticks, a, c), b.realtime_ns, 5e6);
    return;
  }
  const TraceClock a = TraceClock::Now();
  usleep(50'000);
  const TraceClock b = TraceClock::Now();
  EXPECT_GT(b.ticks, a.ticks);
  EXPECT_NEAR(TraceClock::ToNs(b.ticks, a, a), b.realtime_ns, 5e6);
}

TEST(TraceFileTest, RankFilesSitBesideTheBase) {
  EXPECT_EQ(TraceRankFile("dir/t.json", 3), "dir/t.rank3.json");
  EXPECT_EQ(TraceRankFile("dir/t.json", 3, "comm2"), "dir/t.rank3.comm2.json");
  EXPECT_EQ(TraceRankFile("trace", 0), "trace.rank0.json");
  EXPECT_EQ(TraceRankPrefix("a.b.json", 12), "a.b.rank12.");
}

}  // namespace
}  // namespace baton
