// The shared-memory rings' choice of stores for calls over the hot window,
// by measure (SlotStoreChooser): it tries both kinds in turns, keeps the
// faster, ignores noise and one slow call, and follows a host that changes.
#include "transport/shm_stores.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "transport/shm.h"

namespace baton {
namespace {

constexpr uint64_t kMs = 1000000;
constexpr size_t kCallBytes = size_t(64) << 20;

// Drives a chooser with calls of kCallBytes whose time a function of the
// kind of store (and of the call's number) gives, on a fake clock: each
// call takes its time, then `gap_ns` pass before the next. With `marks`,
// a call's ring sends its bytes evenly over the call and passes its mark
// (an eighth of the call: kRingBytes is small), where the rest may change
// kind; without, the ring never gets there (a call whose ring carries
// less than its mark).
class Driver {
 public:
  explicit Driver(bool far, bool marks = true) : far_(far), marks_(marks) {}
  // Runs `n` calls; returns how many of them streamed (opened streaming).
  int Run(int n, const std::function<uint64_t(bool streams, int call)>& ns_of,
          uint64_t gap_ns = 0) {
    int streamed = 0;
    for (int i = 0; i < n; ++i, ++calls_) {
      bool measure = false;
      const bool streams = chooser_.Open(kClass, kCallBytes, kRingBytes, far_, now_, &measure);
      kinds_.push_back(streams);
      streamed += streams;
      const size_t mark = chooser_.mark_bytes();
      EXPECT_EQ(mark, measure ? kCallBytes / SlotStoreChooser::kMarkFraction : 0);
      bool rest_streams = streams;
      if (marks_ && mark != 0) {
        now_ += ns_of(streams, calls_) / SlotStoreChooser::kMarkFraction;
        rest_streams = chooser_.Mark(now_, mark);
        EXPECT_EQ(chooser_.mark_bytes(), 0u);
        now_ += ns_of(rest_streams, calls_) / SlotStoreChooser::kMarkFraction *
                (SlotStoreChooser::kMarkFraction - 1);
      } else {
        now_ += ns_of(streams, calls_);
      }
      rest_kinds_.push_back(rest_streams);
      if (measure) {
        const int changed = chooser_.Ended(now_);
        if (changed >= 0) {
          EXPECT_EQ(changed, kClass);
          decisions_.push_back(calls_);
        }
      }
      now_ += gap_ns;
    }
    return streamed;
  }
  static constexpr int kClass = 2;  // (32, 64] MiB
  static constexpr size_t kRingBytes = size_t(1) << 20;
  SlotStoreChooser chooser_;
  bool far_;
  bool marks_;
  uint64_t now_ = 0;
  int calls_ = 0;
  std::vector<bool> kinds_;       // each call's, as it opened
  std::vector<bool> rest_kinds_;  // each call's after its mark
  std::vector<int> decisions_;    // the calls that made or changed the choice
};

uint64_t Cost(bool streams, uint64_t streaming_ns, uint64_t cached_ns) {
  return streams ? streaming_ns : cached_ns;
}

TEST(SlotStoreChooser, ClassesAreCallsOverTheHotWindowByPowersOfTwo) {
  EXPECT_EQ(SlotStoreChooser::ClassOf(0), -1);
  EXPECT_EQ(SlotStoreChooser::ClassOf(kShmHotCallBytes), -1);
  EXPECT_EQ(SlotStoreChooser::ClassOf(kShmHotCallBytes + 1), 0);
  EXPECT_EQ(SlotStoreChooser::ClassOf(2 * kShmHotCallBytes), 0);
  EXPECT_EQ(SlotStoreChooser::ClassOf(2 * kShmHotCallBytes + 4), 1);
  EXPECT_EQ(SlotStoreChooser::ClassOf(kCallBytes), Driver::kClass);
  EXPECT_EQ(SlotStoreChooser::ClassOf(size_t(256) << 20), SlotStoreChooser::kClasses - 2);
  EXPECT_EQ(SlotStoreChooser::ClassOf((size_t(256) << 20) + 1), SlotStoreChooser::kClasses - 1);
  EXPECT_EQ(SlotStoreChooser::ClassOf(SIZE_MAX), SlotStoreChooser::kClasses - 1);
  for (int c = 0; c < SlotStoreChooser::kClasses; ++c) {
    EXPECT_EQ(SlotStoreChooser::ClassOf(SlotStoreChooser::ClassFloorBytes(c) + 1), c);
    EXPECT_EQ(SlotStoreChooser::ClassFloorBytes(c), kShmHotCallBytes << c);
  }
}

// The first call of a class goes as the latency verdict says and is not
// timed; then the kinds alternate, the verdict's first, two calls each,
// and the faster is kept.
TEST(SlotStoreChooser, TriesBothKindsThenKeepsTheFaster) {
  for (const bool far : {false, true}) {
    for (const bool streaming_faster : {false, true}) {
      SCOPED_TRACE(testing::Message()
                   << "far " << far << ", streaming faster " << streaming_faster);
      Driver d(far);
      auto ns = [&](bool s, int) {
        return Cost(s, streaming_faster ? 10 * kMs : 13 * kMs,
                    streaming_faster ? 13 * kMs : 10 * kMs);
      };
      d.Run(5, ns);
      ASSERT_EQ(d.kinds_, (std::vector<bool>{far, far, !far, far, !far}));
      ASSERT_EQ(d.decisions_, std::vector<int>{4});
      EXPECT_EQ(d.chooser_.choice(Driver::kClass), streaming_faster ? 1 : 0);
      EXPECT_DOUBLE_EQ(d.chooser_.estimate_ns_per_mib(Driver::kClass, true),
                       double(streaming_faster ? 10 * kMs : 13 * kMs) / 64);
      EXPECT_DOUBLE_EQ(d.chooser_.estimate_ns_per_mib(Driver::kClass, false),
                       double(streaming_faster ? 13 * kMs : 10 * kMs) / 64);
      // Then only the faster, until the first interval has passed.
      EXPECT_EQ(d.Run(10, ns), streaming_faster ? 10 : 0);
      // Other classes have not chosen.
      EXPECT_EQ(d.chooser_.choice(0), -1);
    }
  }
}

// Within kSwitchBelow the verdict's kind stays; one slow call of the faster
// kind (a rank descheduled) does not hide it.
TEST(SlotStoreChooser, NoiseAndOneSlowCallFlipNothing) {
  Driver close(/*far=*/false);
  close.Run(40, [](bool s, int) { return Cost(s, 97 * kMs / 10, 10 * kMs); });
  EXPECT_EQ(close.chooser_.choice(Driver::kClass), 0);
  Driver slow_once(/*far=*/false);
  // Calls 1 and 3 are the cached ones: the first of them takes 5x.
  slow_once.Run(
      40, [](bool s, int call) { return call == 1 ? 50 * kMs : Cost(s, 12 * kMs, 10 * kMs); });
  EXPECT_EQ(slow_once.chooser_.choice(Driver::kClass), 0);
  EXPECT_EQ(slow_once.decisions_, std::vector<int>{4});
}

// A host whose faster kind changes (this VM's modes) while the latency
// verdict stays: the next trial, once both a second and kFirstIntervalCalls
// have passed, finds it. While the choice holds, trials come at doubling
// intervals; each takes four calls, two of the other kind.
TEST(SlotStoreChooser, FollowsAHostThatChanges) {
  Driver d(/*far=*/true);
  int turn = 1 << 30;  // the call from which cached stores are faster
  auto ns = [&](bool s, int call) {
    return call < turn ? Cost(s, 10 * kMs, 14 * kMs) : Cost(s, 14 * kMs, 10 * kMs);
  };
  d.Run(5, ns);
  EXPECT_EQ(d.chooser_.choice(Driver::kClass), 1);
  // 10 ms calls: a second is 100 calls, more than kFirstIntervalCalls.
  const int before = d.Run(400, ns);
  // Trials at about 1, 2 and 4 s in 4 s of calls, two cached calls each.
  EXPECT_GE(400 - before, 4);
  EXPECT_LE(400 - before, 8);
  EXPECT_EQ(d.chooser_.choice(Driver::kClass), 1);
  EXPECT_EQ(d.decisions_.size(), 1u);
  turn = d.calls_;
  d.Run(1200, ns);  // the interval is 8 s by now
  EXPECT_EQ(d.chooser_.choice(Driver::kClass), 0);
  ASSERT_EQ(d.decisions_.size(), 2u);
  EXPECT_LT(d.decisions_[1] - turn, 900);
  // After a change the trials come at the first interval again (a second:
  // 100 calls), the current kind first.
  const int flip = d.decisions_[1];
  int next_trial = flip + 1;
  while (next_trial < d.calls_ && !d.kinds_[next_trial]) ++next_trial;
  EXPECT_GE(next_trial - flip, 100);
  EXPECT_LE(next_trial - flip, 103);
}

// A change of the latency verdict (the host moved the cores apart, or
// back) starts a trial at the next call and the intervals again from the
// first, instead of waiting out one that doubled to a minute.
TEST(SlotStoreChooser, AVerdictThatChangesStartsATrial) {
  Driver d(/*far=*/false);
  int turn = 1 << 30;
  auto ns = [&](bool s, int call) {
    return call < turn ? Cost(s, 14 * kMs, 10 * kMs) : Cost(s, 10 * kMs, 14 * kMs);
  };
  d.Run(2000, ns);  // 20 s: trials at about 1, 2, 4 and 8 s, the interval 32 s now
  EXPECT_EQ(d.chooser_.choice(Driver::kClass), 0);
  turn = d.calls_;
  d.chooser_.HostChanged();
  d.Run(4, ns);
  ASSERT_EQ(d.kinds_.size(), 2004u);
  EXPECT_EQ(std::vector<bool>(d.kinds_.end() - 4, d.kinds_.end()),
            (std::vector<bool>{false, true, false, true}));
  EXPECT_EQ(d.chooser_.choice(Driver::kClass), 1);
  EXPECT_EQ(d.decisions_.back(), 2003);
  // A class that has not chosen yet is not disturbed.
  EXPECT_EQ(d.chooser_.choice(0), -1);
  // And the next trial after the first interval: 100 calls, from streaming.
  const int streamed = d.Run(150, ns);
  EXPECT_GE(150 - streamed, 2);
  EXPECT_LE(150 - streamed, 4);
}

// Long gaps between calls: a trial also waits for kFirstIntervalCalls, so
// rare calls are not tried at every one.
TEST(SlotStoreChooser, RareCallsAreTriedByCountToo) {
  Driver d(/*far=*/false);
  auto ns = [](bool s, int) { return Cost(s, 14 * kMs, 10 * kMs); };
  d.Run(5, ns, /*gap_ns=*/10000 * kMs);
  // The last of these opens the trial, with the current kind; then the
  // other, the current and the other again.
  EXPECT_EQ(d.Run(SlotStoreChooser::kFirstIntervalCalls, ns, 10000 * kMs), 0);
  EXPECT_EQ(d.Run(3, ns, 10000 * kMs), 2);
  EXPECT_EQ(d.chooser_.choice(Driver::kClass), 0);
  EXPECT_EQ(d.decisions_, std::vector<int>{4});
  // The choice held: the next trial after twice as many calls.
  EXPECT_EQ(d.Run(2 * SlotStoreChooser::kFirstIntervalCalls - 1, ns, 10000 * kMs), 0);
  EXPECT_EQ(d.Run(2, ns, 10000 * kMs), 1);
}

// A program that alternates blocks of slower and faster calls of one size
// (out of place, then in place): the trials interleave the kinds, so the
// truly faster kind wins whichever block a trial falls in.
TEST(SlotStoreChooser, AlternatingCallsDoNotMisleadIt) {
  for (const int block : {3, 7, 40}) {
    for (const bool streaming_faster : {false, true}) {
      SCOPED_TRACE(testing::Message()
                   << "blocks of " << block << ", streaming faster " << streaming_faster);
      Driver d(/*far=*/false);
      auto ns = [&](bool s, int call) {
        const uint64_t base = (call / block) % 2 ? 16 * kMs : 10 * kMs;
        return s == streaming_faster ? base * 85 / 100 : base;
      };
      d.Run(2000, ns);
      EXPECT_EQ(d.chooser_.choice(Driver::kClass), streaming_faster ? 1 : 0);
      // The faster kind almost always, once found.
      int faster_last = 0;
      for (size_t i = d.kinds_.size() - 1000; i < d.kinds_.size(); ++i)
        faster_last += d.kinds_[i] == streaming_faster;
      EXPECT_GE(faster_last, 990);
    }
  }
}

// A trial whose other kind takes kClearlySlower times the current one's
// call ends after that one call, keeping the current kind (calls whose ring
// never reaches the mark; the next test has the mark): the first
// decision and every later trial cost one call of the slow kind, not two
// (this VM's slow spells: streaming 3.4x faster at 64 MiB). Under that
// ratio the trial runs its four calls; a current kind that is the slow one
// is still left only after two calls of each.
TEST(SlotStoreChooser, AClearlySlowerTrialEndsAfterOneCall) {
  Driver clear(/*far=*/true, /*marks=*/false);  // streams first, as a far verdict says
  auto slow_cached = [](bool s, int) { return Cost(s, 10 * kMs, 34 * kMs); };
  clear.Run(3, slow_cached);
  EXPECT_EQ(clear.kinds_, (std::vector<bool>{true, true, false}));
  EXPECT_EQ(clear.decisions_, std::vector<int>{2});
  EXPECT_EQ(clear.chooser_.choice(Driver::kClass), 1);
  // Every later trial: one cached call (they come after 1 s and 64 calls,
  // then 2 s and 128, ...).
  EXPECT_LE(clear.Run(400, slow_cached, 20 * kMs), 398);
  for (size_t i = 3; i + 1 < clear.kinds_.size(); ++i)
    EXPECT_FALSE(!clear.kinds_[i] && !clear.kinds_[i + 1]) << "two cached calls in a row at " << i;
  EXPECT_EQ(clear.chooser_.choice(Driver::kClass), 1);
  // 1.9x: the whole trial.
  Driver close(/*far=*/true, /*marks=*/false);
  close.Run(5, [](bool s, int) { return Cost(s, 10 * kMs, 19 * kMs); });
  EXPECT_EQ(close.kinds_, (std::vector<bool>{true, true, false, true, false}));
  EXPECT_EQ(close.decisions_, std::vector<int>{4});
  // The current kind the slow one: two of each, then the switch.
  Driver wrong(/*far=*/false, /*marks=*/false);
  wrong.Run(5, slow_cached);
  EXPECT_EQ(wrong.kinds_, (std::vector<bool>{false, false, true, false, true}));
  EXPECT_EQ(wrong.decisions_, std::vector<int>{4});
  EXPECT_EQ(wrong.chooser_.choice(Driver::kClass), 1);
}

// The same at the call's mark: a trial call of the other kind that reaches
// it kClearlySlower times later than the current kind's call did goes on
// in the current kind, and the trial ends there (the first decision too),
// so a clearly lost trial costs an eighth of a call in the slow kind.
// Under that ratio, or where the trial's kind is the faster, nothing
// changes at the mark.
TEST(SlotStoreChooser, AClearlySlowerTrialEndsAtItsMark) {
  Driver clear(/*far=*/true);
  auto slow_cached = [](bool s, int) { return Cost(s, 8 * kMs, 32 * kMs); };
  clear.Run(3, slow_cached);
  EXPECT_EQ(clear.kinds_, (std::vector<bool>{true, true, false}));
  EXPECT_EQ(clear.rest_kinds_, (std::vector<bool>{true, true, true}));
  EXPECT_EQ(clear.decisions_, std::vector<int>{2});
  EXPECT_EQ(clear.chooser_.choice(Driver::kClass), 1);
  // Three calls: two at 8 ms, and the trial's an eighth at 32 and the rest at 8.
  EXPECT_EQ(clear.now_, 2 * 8 * kMs + 4 * kMs + 7 * kMs);
  EXPECT_DOUBLE_EQ(clear.chooser_.mark_ratio(Driver::kClass), 4.0);
  // The trial's mixed call is not a sample of either kind.
  EXPECT_EQ(clear.chooser_.estimate_ns_per_mib(Driver::kClass, false), 0);
  EXPECT_DOUBLE_EQ(clear.chooser_.estimate_ns_per_mib(Driver::kClass, true), double(8 * kMs) / 64);
  // Later trials alike: every cached call switches at its mark.
  clear.Run(400, slow_cached, 20 * kMs);
  int trials = 0;
  for (size_t i = 3; i < clear.kinds_.size(); ++i) {
    EXPECT_TRUE(clear.rest_kinds_[i]) << "call " << i;
    trials += !clear.kinds_[i];
  }
  EXPECT_GE(trials, 2);
  EXPECT_EQ(clear.chooser_.choice(Driver::kClass), 1);
  EXPECT_EQ(clear.decisions_, std::vector<int>{2});
  // 1.9x: the whole trial, every call whole.
  Driver close(/*far=*/true);
  close.Run(5, [](bool s, int) { return Cost(s, 10 * kMs, 19 * kMs); });
  EXPECT_EQ(close.kinds_, (std::vector<bool>{true, true, false, true, false}));
  EXPECT_EQ(close.rest_kinds_, close.kinds_);
  EXPECT_EQ(close.decisions_, std::vector<int>{4});
  EXPECT_EQ(close.chooser_.choice(Driver::kClass), 1);
  // The current kind the slow one: its trial of the faster kind runs
  // whole, two of each, then the switch.
  Driver wrong(/*far=*/false);
  wrong.Run(5, slow_cached);
  EXPECT_EQ(wrong.kinds_, (std::vector<bool>{false, false, true, false, true}));
  EXPECT_EQ(wrong.rest_kinds_, wrong.kinds_);
  EXPECT_EQ(wrong.decisions_, std::vector<int>{4});
  EXPECT_EQ(wrong.chooser_.choice(Driver::kClass), 1);
}

// Where the mark lies: an eighth of the call, and at least two rings' worth
// of bytes; none for the class's first call, which is not timed.
TEST(SlotStoreChooser, TheMarkIsAnEighthOfTheCallAndTwoRings) {
  SlotStoreChooser chooser;
  bool measure = true;
  const size_t mib = size_t(1) << 20;
  chooser.Open(2, 64 * mib, 4 * mib, false, 0, &measure);
  EXPECT_FALSE(measure);
  EXPECT_EQ(chooser.mark_bytes(), 0u);
  chooser.Open(2, 64 * mib, 4 * mib, false, 1, &measure);
  EXPECT_TRUE(measure);
  EXPECT_EQ(chooser.mark_bytes(), 8 * mib);
  chooser.Ended(2);
  EXPECT_EQ(chooser.mark_bytes(), 0u);
  chooser.Open(2, 64 * mib, 16 * mib, false, 3, &measure);
  EXPECT_EQ(chooser.mark_bytes(), 32 * mib);
  chooser.Ended(4);
  chooser.Open(5, 512 * mib, 4 * mib, false, 5, &measure);
  chooser.Open(5, 512 * mib, 4 * mib, false, 6, &measure);
  EXPECT_EQ(chooser.mark_bytes(), 64 * mib);
}

}  // namespace
}  // namespace baton
