// The shared-memory rings' choice of pieces: hot pieces for calls that fit
// the cache, whole slots otherwise, streaming stores between packages and
// while the consumer measures far lines (LineTransferGauge).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include "transport/shm.h"
#include "unit/shm_pair.h"

namespace baton {
namespace {

// Rings of the default layout (32 slots of 128 KiB): a call that fits the
// cache sends hot pieces that stay in the ring's first kShmHotWindowBytes, a
// larger one whole slots; a call that starts while the ring still holds the
// previous one's pieces keeps their size; a peer naming data outside the
// ring is an error.
class ShmHotPieces : public ShmPair {
 protected:
  static constexpr uint32_t kSlots = 32, kSlotBytes = 128 << 10;
  void SetUp() override { Make(kSlots, kSlotBytes); }
  static CallDescriptor Call(uint32_t seq, uint64_t floats) {
    return AllReduceCall(seq, floats, batonSum);
  }
  // Sends as much of `bytes` as the ring takes (the call opens with `call`).
  size_t Send(const std::vector<uint8_t>& src, const CallDescriptor& call) {
    size_t done = 0;
    EXPECT_TRUE(ab_->ProgressSend(src.data(), src.size(), &call, &done).ok());
    return done;
  }
  void Finish(const std::vector<uint8_t>& src, size_t sent, const CallDescriptor& call,
              std::vector<uint8_t>* dst) {
    dst->assign(src.size(), 0);
    RecvTarget t;
    t.dst = dst->data();
    t.opens = &call;
    size_t received = 0;
    for (int idle = 0; received < src.size(); ++idle) {
      ASSERT_LT(idle, 1000000) << "no progress";
      if (sent < src.size()) {
        ASSERT_TRUE(ab_->ProgressSend(src.data(), src.size(), nullptr, &sent).ok());
      }
      Status st = ba_->ProgressRecv(t, src.size(), &received);
      ASSERT_TRUE(st.ok()) << st.message();
    }
  }
  // On b: receives call `seq` of `got->size()` bytes into *got; false once
  // the sending side stopped before it (`last_call`, 0 while it runs) or
  // on an error.
  bool ReceiveCall(uint32_t seq, std::vector<uint8_t>* got,
                   const std::atomic<uint32_t>& last_call) {
    const CallDescriptor d = Call(seq, got->size() / 4);
    RecvTarget t;
    t.dst = got->data();
    t.opens = &d;
    size_t received = 0;
    while (received < got->size()) {
      if (last_call.load() != 0 && seq > last_call.load()) return false;
      Status st = ba_->ProgressRecv(t, got->size(), &received);
      if (!st.ok()) {
        ADD_FAILURE() << st.message();
        return false;
      }
    }
    return true;
  }
  // The (size, offset into the ring's data) of message `n`'s cell, published.
  std::pair<uint32_t, uint64_t> Piece(uint64_t n) const {
    const ShmSlotCell& cell = b_->ring(0)->cells[SlotIndex(n, kSlots)];
    uint32_t page;
    memcpy(&page, cell.inline_data, sizeof(page));
    return {static_cast<uint32_t>(cell.word.load()) & ~kCallTagBit, uint64_t{page} * kShmDataPage};
  }
  static std::vector<uint8_t> Bytes(size_t n, int seed) {
    std::vector<uint8_t> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 131 + seed);
    return v;
  }
};

TEST_F(ShmHotPieces, CallsThatFitTheCacheStayInTheHotWindow) {
  const uint32_t hot = HotPieceBytes(kSlots, kSlotBytes);
  ASSERT_EQ(uint64_t{hot} * kSlots, kShmHotWindowBytes);
  ASSERT_LT(hot, kSlotBytes);
  uint64_t n = 0;
  std::vector<uint8_t> dst;
  // Three hot calls in a row: 1 MiB + 1 byte each, the ring drained between.
  for (uint32_t call = 1; call <= 3; ++call) {
    const auto src = Bytes((1 << 20) + 1, static_cast<int>(call));
    const CallDescriptor d = Call(call, 1 << 18);
    const size_t sent = Send(src, d);
    ASSERT_EQ(sent, src.size());
    const uint64_t pieces = (src.size() + hot - 1) / hot;
    for (uint64_t k = 0; k < pieces; ++k, ++n) {
      const auto [size, offset] = Piece(n);
      if (k + 1 < pieces) {
        EXPECT_EQ(size, hot) << "piece " << k << " of call " << call;
        EXPECT_EQ(offset, SlotIndex(n, kSlots) * hot) << "piece " << k << " of call " << call;
        EXPECT_LE(offset + size, kShmHotWindowBytes);
      }
    }
    Finish(src, sent, d, &dst);
    ASSERT_EQ(dst, src) << "call " << call;
  }
  // A call beyond kShmHotCallBytes on the empty ring: whole slots.
  const auto big = Bytes(3 << 20, 9);
  const CallDescriptor d = Call(4, kShmHotCallBytes);  // floats: 4x the bytes
  const size_t sent = Send(big, d);
  for (uint64_t k = 0; k < 3 * 8; ++k, ++n) {
    const auto [size, offset] = Piece(n);
    EXPECT_EQ(size, kSlotBytes) << "piece " << k;
    EXPECT_EQ(offset, SlotIndex(n, kSlots) * uint64_t{kSlotBytes}) << "piece " << k;
  }
  Finish(big, sent, d, &dst);
  ASSERT_EQ(dst, big);
}

TEST_F(ShmHotPieces, ARingKeepsItsPieceSizeUntilItDrains) {
  // A large call's whole slots are still in flight when a hot call starts:
  // its pieces must not move onto theirs, so it keeps whole slots.
  const auto big = Bytes(5 << 20, 3), small = Bytes(300000, 5), after = Bytes(300000, 6);
  const CallDescriptor large_call = Call(1, (2 << 20) + 1), hot_call = Call(2, 75000),
                       next_call = Call(3, 75000);
  size_t big_sent = Send(big, large_call);
  ASSERT_EQ(big_sent, uint64_t{kSlots} * kSlotBytes);  // the ring is full
  std::vector<uint8_t> big_out(big.size()), small_out(small.size()), after_out(after.size());
  RecvTarget tb, ts, ta;
  tb.dst = big_out.data();
  tb.opens = &large_call;
  ts.dst = small_out.data();
  ts.opens = &hot_call;
  ta.dst = after_out.data();
  ta.opens = &next_call;
  size_t big_received = 0, small_sent = 0, small_received = 0, after_received = 0;
  ASSERT_TRUE(ba_->ProgressRecv(tb, big.size(), &big_received).ok());  // the first 4 MiB
  ASSERT_TRUE(ab_->ProgressSend(big.data(), big.size(), nullptr, &big_sent).ok());
  ASSERT_EQ(big_sent, big.size());  // its last 8 slots are in flight
  ASSERT_TRUE(ab_->ProgressSend(small.data(), small.size(), &hot_call, &small_sent).ok());
  ASSERT_EQ(small_sent, small.size());
  const uint64_t first = big.size() / kSlotBytes;  // the hot call's first message number
  for (uint64_t n = first; n < first + 2; ++n)
    EXPECT_EQ(Piece(n).first, kSlotBytes) << "a piece changed size while the ring held others";
  ASSERT_TRUE(ba_->ProgressRecv(tb, big.size(), &big_received).ok());
  ASSERT_EQ(big_received, big.size());
  ASSERT_TRUE(ba_->ProgressRecv(ts, small.size(), &small_received).ok());
  ASSERT_EQ(small_received, small.size());
  EXPECT_EQ(big_out, big);
  EXPECT_EQ(small_out, small);
  // Drained: the next hot call sends hot pieces.
  size_t after_sent = 0;
  ASSERT_TRUE(ab_->ProgressSend(after.data(), after.size(), &next_call, &after_sent).ok());
  EXPECT_EQ(Piece(first + 3).first, HotPieceBytes(kSlots, kSlotBytes));
  ASSERT_TRUE(ba_->ProgressRecv(ta, after.size(), &after_received).ok());
  ASSERT_EQ(after_received, after.size());
  EXPECT_EQ(after_out, after);
}

TEST_F(ShmHotPieces, StreamingAndCachedCopiesFillWholeSlots) {
  // Ranks in different packages (or BATON_SHM_STREAM=1): whole slots, and
  // with streaming stores the data still arrives (the stores are fenced
  // before the cell is published).
  for (auto copying : {ShmChannel::Copying::kStreaming, ShmChannel::Copying::kCached}) {
    Make(kSlots, kSlotBytes, copying);
    const auto src = Bytes((1 << 20) + 4097, 11);
    const CallDescriptor d = Call(1, 1 << 18);  // small enough for hot pieces
    const size_t sent = Send(src, d);
    for (uint64_t n = 0; n < 8; ++n) EXPECT_EQ(Piece(n).first, kSlotBytes) << "piece " << n;
    std::vector<uint8_t> dst;
    Finish(src, sent, d, &dst);
    EXPECT_EQ(dst, src);
  }
}

TEST(LineTransferGauge, AWindowsMinimumIsTheMeasure) {
  LineTransferGauge g;
  EXPECT_EQ(g.windows(), 0u);
  // Slow samples and one fast (negative: the consumer's clock behind the
  // producer's): the fast one is the measure; samples of a rank that was
  // descheduled do not count.
  for (uint32_t i = 0; i + 1 < kShmSampleWindow; ++i) {
    EXPECT_FALSE(g.Add(300));
    EXPECT_FALSE(g.Add(kShmSampleMaxNs + 1));
  }
  EXPECT_TRUE(g.Add(-40));
  EXPECT_EQ(g.windows(), 1u);
  EXPECT_EQ(g.last_min_ns(), -40);
  // The next window starts afresh; the measure is the lower of the last
  // two windows' minima, so that one slow window does not count alone.
  for (uint32_t i = 0; i + 1 < kShmSampleWindow; ++i) EXPECT_FALSE(g.Add(250 + i));
  EXPECT_TRUE(g.Add(900));
  EXPECT_EQ(g.windows(), 2u);
  EXPECT_EQ(g.last_min_ns(), -40);
  for (uint32_t i = 0; i < kShmSampleWindow; ++i) g.Add(700 + i);
  EXPECT_EQ(g.windows(), 3u);
  EXPECT_EQ(g.last_min_ns(), 250);
  for (uint32_t i = 0; i < kShmSampleWindow; ++i) g.Add(600 + i);
  EXPECT_EQ(g.last_min_ns(), 600);  // two slow windows in a row: slow
}

TEST(LineTransferGauge, HalfARoundTripDecidesAndTheClocksOffsetCancels) {
  // Fast lines whatever the offset between the two cores' clocks.
  EXPECT_FALSE(LinesAreFar(false, 60, 50));
  EXPECT_FALSE(LinesAreFar(false, 560, -460));
  // Slow ones, even where one direction reads negative.
  EXPECT_TRUE(LinesAreFar(false, 230, 220));
  EXPECT_TRUE(LinesAreFar(false, 750, -300));
  // Between the two thresholds a ring keeps what it was.
  const int64_t between = (kShmFarLineNs + kShmNearLineNs) / 2;
  EXPECT_FALSE(LinesAreFar(false, between, between));
  EXPECT_TRUE(LinesAreFar(true, between, between));
  EXPECT_FALSE(LinesAreFar(true, kShmNearLineNs - 10, kShmNearLineNs - 10));
  // A round trip timed on one clock (a one-way ring's producer) decides the
  // same way: the fast and slow modes' measures here.
  EXPECT_FALSE(RoundTripIsFar(false, 140));
  EXPECT_TRUE(RoundTripIsFar(false, 470));
  EXPECT_TRUE(RoundTripIsFar(true, 2 * between));
  EXPECT_FALSE(RoundTripIsFar(true, 2 * kShmNearLineNs - 20));
}

// Lines that take long to cross (a VM's host put the two ranks' vCPUs in
// different sockets, which the topology cannot show): a ping-pong of
// one-piece calls whose stamps all read early, as they would across
// sockets, makes both consumers publish their measures, and then an
// adaptive producer sends whole slots by streaming stores. Rings that do
// not adapt (BATON_SHM_STREAM 0 or 1, ranks in different packages) neither
// measure nor heed them, and pieces under kShmSampleMinBytes measure
// nothing.
TEST_F(ShmHotPieces, FarLinesGetWholeSlotsFromAnAdaptiveProducer) {
  const uint32_t hot = HotPieceBytes(kSlots, kSlotBytes);
  ASSERT_LE(kShmSampleMinBytes, hot);
  struct Case {
    bool adaptive;
    uint32_t piece;
  };
  for (const Case c : {Case{false, kShmSampleMinBytes}, Case{true, kShmSampleMinBytes / 4},
                       Case{true, kShmSampleMinBytes}}) {
    const bool adaptive = c.adaptive, measures = adaptive && c.piece >= kShmSampleMinBytes;
    SCOPED_TRACE(testing::Message() << "adaptive " << adaptive << ", pieces of " << c.piece);
    Make(kSlots, kSlotBytes, ShmChannel::Copying::kHot, adaptive);
    ab_->SkewStampsForTesting(kShmFarLineNs * 3);
    ba_->SkewStampsForTesting(kShmFarLineNs * 3);
    ShmRing *to_b = b_->ring(0), *to_a = a_->ring(0);
    const auto src = Bytes(c.piece, 3);
    // Where nothing is measured a shorter run shows it.
    const uint32_t max_calls = measures ? 20000 : 2000;
    std::atomic<uint32_t> last_call{0};  // set when the pinging side stops
    // b: receives each call and sends it back.
    std::thread echo([&] {
      std::vector<uint8_t> got(src.size());
      for (uint32_t seq = 1;; ++seq) {
        if (!ReceiveCall(seq, &got, last_call)) return;
        const CallDescriptor d = Call(seq, src.size() / 4);
        size_t sent = 0;
        while (sent < src.size())
          ASSERT_TRUE(ba_->ProgressSend(got.data(), got.size(), &d, &sent).ok());
      }
    });
    std::vector<uint8_t> back(src.size());
    uint32_t seq = 1;
    auto measured = [&] { return to_b->oneway_count.load() > 0 && to_a->oneway_count.load() > 0; };
    for (; seq <= max_calls && !measured(); ++seq) {
      const CallDescriptor d = Call(seq, src.size() / 4);
      size_t sent = 0, received = 0;
      while (sent < src.size())
        ASSERT_TRUE(ab_->ProgressSend(src.data(), src.size(), &d, &sent).ok());
      RecvTarget t;
      t.dst = back.data();
      t.opens = &d;
      while (received < src.size()) {
        Status st = ab_->ProgressRecv(t, src.size(), &received);
        ASSERT_TRUE(st.ok()) << st.message();
      }
      ASSERT_EQ(back, src);
    }
    last_call.store(seq - 1);
    echo.join();
    if (measures) {
      ASSERT_TRUE(measured()) << "no window in " << max_calls << " calls";
      EXPECT_GT(to_b->oneway_ns.load(), kShmFarLineNs);
      EXPECT_GT(to_a->oneway_ns.load(), kShmFarLineNs);
    } else {
      ASSERT_EQ(to_b->oneway_count.load() + to_a->oneway_count.load(), 0u) << "measured";
    }
    if (!adaptive) {
      // Far measures, as if published, change nothing for its producer.
      for (ShmRing* r : {to_a, to_b}) {
        r->oneway_ns.store(kShmFarLineNs * 3);
        r->oneway_count.store(1);
      }
    }
    // The next call that fits the cache: whole slots only if adaptive.
    const uint64_t first = to_b->tail.load();
    const auto big = Bytes((1 << 20) + 3, 5);
    const CallDescriptor d = Call(seq, 1 << 18);
    const size_t sent = Send(big, d);
    EXPECT_EQ(Piece(first).first, measures ? kSlotBytes : hot);
    EXPECT_EQ(Piece(first + 1).first, measures ? kSlotBytes : hot);
    std::vector<uint8_t> out;
    Finish(big, sent, d, &out);
    EXPECT_EQ(out, big);
  }
}

// A ring whose data flows one way (around a ring of more than two ranks)
// has no reverse ring to measure: its producer times round trips on its
// own clock while the consumer polls for a sampled piece (asking for
// longer polls until its first window), and an adaptive one turns to whole
// slots once they are far. One that does not adapt never turns.
TEST_F(ShmHotPieces, AOneWayRingTimesItsOwnRoundTrips) {
  const uint32_t hot = HotPieceBytes(kSlots, kSlotBytes);
  // Calls through a fresh pair until the pieces change size or max_calls;
  // returns the last call's piece size and whether the producer still asks
  // for longer polls.
  auto run = [&](bool adaptive, uint32_t max_calls, uint32_t* piece, bool* asking) {
    Make(kSlots, kSlotBytes, ShmChannel::Copying::kHot, adaptive);
    ab_->SkewStampsForTesting(kShmFarLineNs * 3);
    const auto src = Bytes(size_t{hot} * 4, 9);  // fits the cache: hot pieces while near
    std::atomic<uint32_t> last_call{0};          // set when the sending side stops
    // b only receives, and checks every call.
    std::thread sink([&] {
      std::vector<uint8_t> got(src.size());
      for (uint32_t seq = 1;; ++seq) {
        if (!ReceiveCall(seq, &got, last_call)) return;
        ASSERT_EQ(got, src) << "call " << seq;
      }
    });
    uint64_t first = 0;  // the call's first piece
    uint32_t seq = 1;
    for (; seq <= max_calls; ++seq) {
      // (A ring changes its pieces' size only once it has drained.)
      while (b_->ring(0)->tail.load() != first) std::this_thread::yield();
      const CallDescriptor d = Call(seq, src.size() / 4);
      size_t sent = 0;
      while (sent == 0) ASSERT_TRUE(ab_->ProgressSend(src.data(), src.size(), &d, &sent).ok());
      // Until its first window the producer asks for longer polls.
      if (seq == 1) {
        EXPECT_EQ(b_->ring(0)->wants_round_trips.load(), adaptive ? 1u : 0u);
      }
      *piece = Piece(first).first;
      while (sent < src.size())
        ASSERT_TRUE(ab_->ProgressSend(src.data(), src.size(), nullptr, &sent).ok());
      first += (src.size() + *piece - 1) / *piece;
      if (*piece != hot) break;
    }
    last_call.store(std::min(seq, max_calls));
    sink.join();
    *asking = b_->ring(0)->wants_round_trips.load() != 0;
  };
  uint32_t piece = 0;
  bool asking = false;
  run(/*adaptive=*/false, 2000, &piece, &asking);
  EXPECT_EQ(piece, hot) << "a ring that does not adapt turned";
  // The consumer must be polling when a sampled piece lands, and a round
  // trip over kShmSampleMaxNs is dropped: on a loaded machine (or under a
  // sanitizer) a pair can miss every sample, so fresh pairs try again for
  // up to 20 s, as in APairMeasuresItsLinesAsItConnects.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  do {
    run(/*adaptive=*/true, 20000, &piece, &asking);
  } while (piece != kSlotBytes && std::chrono::steady_clock::now() < until);
  EXPECT_EQ(piece, kSlotBytes) << "no far verdict in 20 s";
  EXPECT_FALSE(asking) << "still asking after a window";
}

TEST_F(ShmHotPieces, DataOutsideTheRingIsAnError) {
  const auto src = Bytes(200000, 1);
  const CallDescriptor d = Call(1, 50000);
  ASSERT_EQ(Send(src, d), src.size());
  ShmSlotCell& cell = b_->ring(0)->cells[0];
  const uint32_t page = kSlots * kSlotBytes / kShmDataPage;  // just past the end
  memcpy(cell.inline_data, &page, sizeof(page));
  std::vector<uint8_t> dst(src.size());
  RecvTarget t;
  t.dst = dst.data();
  t.opens = &d;
  size_t received = 0;
  Status st = ba_->ProgressRecv(t, src.size(), &received);
  EXPECT_EQ(st.code(), batonRemoteError) << st.message();
  EXPECT_NE(st.message().find("outside"), std::string::npos) << st.message();
}

// As a pair connects, both ranks ping-pong one line each way; the fastest
// round trip gives an adaptive ring its first verdict before any piece is
// sampled, so the first call that fits the cache already goes in whole
// slots when the lines are far. A ring that does not adapt measures too and
// keeps its pieces.
TEST_F(ShmHotPieces, APairMeasuresItsLinesAsItConnects) {
  const uint32_t hot = HotPieceBytes(kSlots, kSlotBytes);
  const int64_t skew = kShmFarLineNs * 3;
  for (const bool adaptive : {false, true}) {
    SCOPED_TRACE(testing::Message() << "adaptive " << adaptive);
    // Two threads on a loaded machine (other tests beside this one) may
    // miss each other: a sample longer than kShmSampleMaxNs is dropped, an
    // answer later than kShmConnectAnswerNs ends the measure. So fresh
    // pairs try again, for up to 20 s.
    int64_t first_rt = 0, second_rt = 0;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while ((first_rt == 0 || second_rt == 0) && std::chrono::steady_clock::now() < until) {
      Make(kSlots, kSlotBytes, ShmChannel::Copying::kHot, adaptive);
      ab_->SkewStampsForTesting(skew);
      ba_->SkewStampsForTesting(skew);
      std::thread second([&] { second_rt = ba_->MeasureAtConnect(false); });
      first_rt = ab_->MeasureAtConnect(true);
      second.join();
    }
    ASSERT_GT(first_rt, 0) << "no round trips measured in 20 s";
    ASSERT_GT(second_rt, 0);
    EXPECT_GE(first_rt, skew);
    EXPECT_GE(second_rt, skew);
    EXPECT_EQ(ab_->Streaming(), adaptive);
    EXPECT_EQ(ba_->Streaming(), adaptive);
    // The first call, which fits the cache: whole slots only if adaptive.
    const auto src = Bytes((1 << 20) + 3, 7);
    const CallDescriptor d = Call(1, 1 << 18);
    const size_t sent = Send(src, d);
    EXPECT_EQ(Piece(0).first, adaptive ? kSlotBytes : hot);
    std::vector<uint8_t> out;
    Finish(src, sent, d, &out);
    EXPECT_EQ(out, src);
  }
}

// An adaptive producer times its calls over the hot window, for the
// measured choice of their stores (SlotStoreChooser): not the first of its
// size, not smaller calls, nothing on a ring that does not adapt. Whichever
// kind a call goes by (the first calls try both), its data arrives whole.
TEST_F(ShmHotPieces, AdaptiveProducersTimeCallsOverTheHotWindow) {
  const auto src = Bytes((1 << 20) + 3, 9);
  for (const bool adaptive : {false, true}) {
    SCOPED_TRACE(testing::Message() << "adaptive " << adaptive);
    Make(kSlots, kSlotBytes, ShmChannel::Copying::kHot, adaptive);
    uint32_t seq = 0;
    // A call of `floats` whose first message is src: whether it was timed.
    auto call = [&](uint64_t floats) {
      const CallDescriptor d = Call(++seq, floats);
      const size_t sent = Send(src, d);
      const bool timed = ab_->timing_call();
      std::vector<uint8_t> out;
      Finish(src, sent, d, &out);
      EXPECT_EQ(out, src) << "call " << seq;
      if (timed) ab_->CallEnded();
      EXPECT_FALSE(ab_->timing_call());
      return timed;
    };
    const uint64_t large = kShmHotCallBytes / 4 + 1;
    EXPECT_FALSE(call(1 << 18));
    EXPECT_FALSE(call(large));
    for (int i = 0; i < 6; ++i) EXPECT_EQ(call(large), adaptive) << "call " << seq;
    EXPECT_FALSE(call(1 << 18));
    EXPECT_FALSE(call(4 * large));
    EXPECT_EQ(call(4 * large), adaptive);
  }
}

// A peer that never answers: the measure gives up (no verdict, the ring as
// it was) within its bound.
TEST_F(ShmHotPieces, APairWhosePeerDoesNotAnswerKeepsItsRing) {
  Make(kSlots, kSlotBytes, ShmChannel::Copying::kHot, /*adaptive=*/true);
  ab_->SkewStampsForTesting(kShmFarLineNs * 3);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(ab_->MeasureAtConnect(true), 0);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  EXPECT_FALSE(ab_->Streaming());
  // A peer gone meanwhile ends the wait at once.
  Make(kSlots, kSlotBytes, ShmChannel::Copying::kHot, /*adaptive=*/true);
  closed_.store(true);
  EXPECT_EQ(ba_->MeasureAtConnect(false), 0);
  closed_.store(false);
}

// A piece smaller than its ring's piece size starts a few pages into its
// space, by message number: consecutive small pieces spread over the
// cache's sets instead of one stride apart, and each stays in its own space
// (the pieces in flight never share bytes).
TEST_F(ShmHotPieces, SmallPiecesSpreadOverTheirSpaces) {
  const uint32_t hot = HotPieceBytes(kSlots, kSlotBytes);
  const auto src = Bytes(16 << 10, 4);
  std::set<uint64_t> starts;  // offsets within a piece's space
  for (uint32_t n = 0; n < kSlots; ++n) {
    const CallDescriptor d = Call(n + 1, src.size() / 4);
    const size_t sent = Send(src, d);
    const auto [size, offset] = Piece(n);
    ASSERT_EQ(size, src.size());
    EXPECT_GE(offset, uint64_t{n} * hot) << "message " << n;
    EXPECT_LE(offset + size, uint64_t{n + 1} * hot) << "message " << n;
    EXPECT_EQ(offset % kShmDataPage, 0u);
    starts.insert(offset - uint64_t{n} * hot);
    std::vector<uint8_t> out;
    Finish(src, sent, d, &out);
    ASSERT_EQ(out, src) << "message " << n;
  }
  // (Up to the room a 16 KiB piece leaves in its space.)
  EXPECT_EQ(starts.size(),
            std::min<uint64_t>(kShmSkewPages, (hot - src.size()) / kShmDataPage + 1));
  // A piece that fills its space starts at its beginning.
  const auto whole = Bytes(size_t{hot} * 2, 8);
  const CallDescriptor d = Call(kSlots + 1, whole.size() / 4);
  const size_t sent = Send(whole, d);
  EXPECT_EQ(Piece(kSlots).second, 0u);
  EXPECT_EQ(Piece(kSlots + 1).second, uint64_t{hot});
  std::vector<uint8_t> out;
  Finish(whole, sent, d, &out);
  EXPECT_EQ(out, whole);
}

}  // namespace
}  // namespace baton
