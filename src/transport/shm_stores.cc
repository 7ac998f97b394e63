#include "transport/shm_stores.h"

#include <algorithm>

namespace baton {

int SlotStoreChooser::ClassOf(size_t bytes) {
  if (bytes <= kFloorBytes) return -1;
  int c = 0;
  for (size_t floor = kFloorBytes * 2; c + 1 < kClasses && bytes > floor; floor *= 2) ++c;
  return c;
}

size_t SlotStoreChooser::ClassFloorBytes(int c) {
  return kFloorBytes << c;
}

double SlotStoreChooser::Samples::Estimate() const {
  // The faster of the two: interference (another tenant, a rank
  // descheduled) only ever slows a call down.
  return count() < 2 ? ns_per_byte[0] : std::min(ns_per_byte[0], ns_per_byte[1]);
}

double SlotStoreChooser::estimate_ns_per_mib(int c, bool streaming) const {
  const Samples& s = classes_[c].modes[streaming ? 1 : 0];
  return s.count() == 0 ? 0 : s.Estimate() * double(1 << 20);
}

double SlotStoreChooser::mark_ratio(int c) const {
  const ClassState& s = classes_[c];
  if (s.chosen < 0) return 0;
  const Samples& chosen = s.marks[s.chosen];
  const Samples& other = s.marks[1 - s.chosen];
  return chosen.count() == 0 || other.count() == 0 ? 0 : other.Estimate() / chosen.Estimate();
}

bool SlotStoreChooser::Open(int c, size_t bytes, size_t ring_bytes, bool far, uint64_t now_ns,
                            bool* measure) {
  ClassState& s = classes_[c];
  ++s.calls;
  if (s.chosen < 0) {
    s.chosen = far ? 1 : 0;
    s.decide = true;
  }
  open_class_ = -1;
  *measure = s.calls > 1;
  if (!*measure) return s.chosen == 1;
  const int other = 1 - s.chosen;
  if (!s.decide && now_ns >= s.next_trial_ns && s.calls >= s.next_trial_call) {
    s.modes[0] = s.modes[1] = s.marks[0] = s.marks[1] = Samples{};
    s.decide = true;
  }
  // While deciding, the kind with fewer samples goes next (the current one
  // first): the two kinds' calls interleave, as a fair A/B does, so calls
  // that change between two trials' samples (a program that alternates out
  // of place and in place calls of one size, as a benchmark does) change
  // both kinds' samples alike.
  const int mode =
      s.decide && s.modes[other].count() < s.modes[s.chosen].count() ? other : s.chosen;
  open_class_ = c;
  open_streams_ = mode == 1;
  open_bytes_ = bytes;
  open_mark_bytes_ = std::max(bytes / kMarkFraction, ring_bytes * kMarkRings);
  open_ns_ = now_ns;
  open_marked_ = open_cut_ = false;
  open_report_ = -1;
  return open_streams_;
}

bool SlotStoreChooser::Mark(uint64_t now_ns, size_t sent) {
  const int c = open_class_;
  if (c < 0 || open_marked_ || sent == 0) return open_streams_;
  open_marked_ = true;
  ClassState& s = classes_[c];
  const int mode = open_streams_ ? 1 : 0;
  s.marks[mode].Add(double(now_ns - open_ns_) / double(sent));
  // A trial call of the other kind that reached the mark kClearlySlower
  // times later than the current kind's did would end its trial when it
  // ends (Ended); ending it here spares the rest of the call.
  if (!s.decide || mode == s.chosen || s.marks[s.chosen].count() == 0 ||
      s.marks[mode].Estimate() < s.marks[s.chosen].Estimate() * kClearlySlower)
    return open_streams_;
  open_cut_ = true;
  open_report_ = Conclude(c, /*change=*/false, now_ns);
  open_streams_ = s.chosen == 1;
  return open_streams_;
}

void SlotStoreChooser::HostChanged() {
  for (ClassState& s : classes_) {
    if (!s.decided) continue;
    s.decided = false;
    s.next_trial_ns = 0;
    s.next_trial_call = 0;
  }
}

int SlotStoreChooser::Ended(uint64_t now_ns) {
  const int c = open_class_;
  if (c < 0 || open_bytes_ == 0) return -1;
  ClassState& s = classes_[c];
  open_class_ = -1;
  if (open_cut_) return open_report_;
  s.modes[open_streams_ ? 1 : 0].Add(double(now_ns - open_ns_) / double(open_bytes_));
  if (!s.decide) return -1;
  const int other = 1 - s.chosen;
  // One call of the other kind that took kClearlySlower times the current
  // kind's ends the trial in the current kind's favour: its second call
  // would cost as much again (docs/performance.md, "The store chooser's
  // trials, in that spell"), and a descheduled call only ever slows one
  // down, so this can keep the choice a trial too long, never change it.
  const bool clearly_slower =
      s.modes[other].count() > 0 && s.modes[s.chosen].count() > 0 &&
      s.modes[other].Estimate() >= s.modes[s.chosen].Estimate() * kClearlySlower;
  if (!clearly_slower && (s.modes[0].count() < 2 || s.modes[1].count() < 2)) return -1;
  return Conclude(c, s.modes[other].Estimate() < s.modes[s.chosen].Estimate() * kSwitchBelow,
                  now_ns);
}

int SlotStoreChooser::Conclude(int c, bool change, uint64_t now_ns) {
  ClassState& s = classes_[c];
  s.decide = false;
  const bool first = !s.decided;
  s.decided = true;
  if (change) s.chosen = 1 - s.chosen;
  if (change || first) {
    s.interval_ns = kFirstIntervalNs;
    s.interval_calls = kFirstIntervalCalls;
  } else {
    s.interval_ns = std::min(s.interval_ns * 2, kLastIntervalNs);
    s.interval_calls = std::min(s.interval_calls * 2, kLastIntervalCalls);
  }
  s.next_trial_ns = now_ns + s.interval_ns;
  s.next_trial_call = s.calls + s.interval_calls;
  return change || first ? c : -1;
}

}  // namespace baton
