// Which stores a shared-memory ring's producer fills whole slots with in
// calls too large for the hot window (kShmHotCallBytes): the one that made
// such calls faster on this host, measured, instead of the one the line
// latency predicts (docs/performance.md, "Streaming or cached stores,
// measured"). The latency verdict (LinesAreFar) is right for calls that fit
// the cache, and only a prior here: on this VM, with the lines far in both,
// one spell had cached stores faster for whole-slot calls and another
// streaming ones.
//
// Contract: Open as a call of a chosen class opens on the channel; Ended
// as it ends on this rank, only after an Open that returned measure. Each
// class of call sizes keeps the last two calls' times per byte for each
// kind of store; deciding, it runs the two kinds in turns until each has
// two, then takes the faster by their better calls (the other only if
// under kSwitchBelow of the current: noise flips nothing), or stops at the
// other kind's first call where that took kClearlySlower times the
// current's (keeping the current). A call also passes a mark partway
// (Mark, once its ring has sent mark_bytes()); a trial call of the other
// kind that reached it kClearlySlower times later than the current kind's
// calls did ends the trial there, and the rest of that call goes by the
// current kind: a clearly lost trial costs an eighth of a call, not a whole
// one. It decides again once both kInterval* have passed, doubling them
// while the choice holds (a trial costs two calls of the other kind, one,
// or the first part of one). Nothing here reads a clock or another rank:
// the choice is this producer's own, and a ring's two ends need not agree
// (the consumer reads both kinds alike).
#pragma once

#include <cstddef>
#include <cstdint>

namespace baton {

class SlotStoreChooser {
 public:
  // Calls over kFloorBytes (kShmHotCallBytes, which shm.h checks), by
  // powers of two: (8, 16] MiB, (16, 32], ... and the last for everything
  // above 256 MiB.
  static constexpr size_t kFloorBytes = size_t(8) << 20;
  static constexpr int kClasses = 6;
  static constexpr double kSwitchBelow = 0.95;
  static constexpr double kClearlySlower = 2.0;
  // A call's mark: this fraction of its bytes, and at least kMarkRings
  // times its ring's capacity (before that the producer only fills the
  // ring, so its pace says little of the consumer's).
  static constexpr size_t kMarkFraction = 8;
  static constexpr size_t kMarkRings = 2;
  static constexpr uint64_t kFirstIntervalNs = 1000000000;
  static constexpr uint64_t kLastIntervalNs = 64 * kFirstIntervalNs;
  static constexpr uint32_t kFirstIntervalCalls = 64;
  static constexpr uint32_t kLastIntervalCalls = 4096;

  // The class of a call of `bytes` (its count times its datatype's size),
  // or -1 for calls this does not choose for.
  static int ClassOf(size_t bytes);
  // The smallest call of class `c`, for log lines.
  static size_t ClassFloorBytes(int c);

  // As a call of `bytes`, of class `c`, opens at `now_ns` on a ring that
  // holds `ring_bytes`, the latency verdict being `far`: whether the call
  // streams. *measure: whether to time it (the first call of a class
  // touches its buffers for the first time and is not).
  bool Open(int c, size_t bytes, size_t ring_bytes, bool far, uint64_t now_ns, bool* measure);
  // Where the measured call's mark lies, in bytes its ring sends (0: no
  // call is measured, or its mark has passed).
  size_t mark_bytes() const { return open_class_ >= 0 && !open_marked_ ? open_mark_bytes_ : 0; }
  // The measured call's ring has sent `sent` bytes (at least mark_bytes())
  // at `now_ns`: whether the rest of the call streams.
  bool Mark(uint64_t now_ns, size_t sent);
  // The call measured last ended at `now_ns`. Returns its class when that
  // class's choice was made afresh (its first, or the first after
  // HostChanged) or changed (choice() and estimate_ns_per_mib() say to
  // what, and why), else -1.
  int Ended(uint64_t now_ns);
  // The latency verdict changed (the host moved the two cores apart, or
  // back): every class that has chosen decides afresh from its next call,
  // and its trials start again from the first interval.
  void HostChanged();

  // For class `c`: whether it streams (-1: no choice yet), and the estimate
  // for streaming (true) or cached stores, ns per MiB (0: none).
  int choice(int c) const { return classes_[c].chosen; }
  double estimate_ns_per_mib(int c, bool streaming) const;
  // For class `c`: how many times later than the chosen kind's calls the
  // other kind's reached the mark (0: not both measured there).
  double mark_ratio(int c) const;

 private:
  struct Samples {
    double ns_per_byte[2] = {0, 0};
    uint32_t total = 0;  // ever added; the newest is at (total - 1) % 2
    void Add(double v) { ns_per_byte[total++ % 2] = v; }
    uint32_t count() const { return total < 2 ? total : 2; }
    double Estimate() const;
  };
  struct ClassState {
    Samples modes[2];  // [0] cached, [1] streaming: whole calls, ns per call byte
    Samples marks[2];  // the same kinds' calls at their mark, ns per byte sent
    int chosen = -1;
    uint32_t calls = 0;
    bool decide = false;   // decide once both kinds have two samples
    bool decided = false;  // a choice was made by measure since the last HostChanged
    uint64_t next_trial_ns = 0;
    uint32_t next_trial_call = 0;
    uint64_t interval_ns = kFirstIntervalNs;
    uint32_t interval_calls = kFirstIntervalCalls;
  };

  // Ends class `c`'s trial at `now_ns`, switching to the other kind where
  // `change`. Returns c where the choice was made afresh or changed, else -1.
  int Conclude(int c, bool change, uint64_t now_ns);

  ClassState classes_[kClasses];
  // The call being measured.
  int open_class_ = -1;
  bool open_streams_ = false;
  size_t open_bytes_ = 0;
  size_t open_mark_bytes_ = 0;
  uint64_t open_ns_ = 0;
  bool open_marked_ = false;  // its mark has passed
  bool open_cut_ = false;     // its trial ended at the mark: its kinds were mixed
  int open_report_ = -1;      // what Ended returns for a trial the mark ended
};

}  // namespace baton
