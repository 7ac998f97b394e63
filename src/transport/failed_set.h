// Which ranks of a communicator this rank knows to have failed
// (batonCommGetFailedRanks; docs/reliability.md, "Which ranks failed"). A
// rank has failed when it is gone from the communicator without having
// said goodbye: its process died or exited, its connection was refused, it
// stopped answering past BATON_TIMEOUT, or it aborted a communicator that
// had not failed before. A rank that gives up because of another's failure
// (a relay) has not: its control socket stays open until it frees the
// communicator, and then it says goodbye first. The set only grows, as
// MPI's failed group does. Not thread-safe: ChannelSet guards it.
#pragma once

#include <cstdint>
#include <vector>

namespace baton {

class FailedSet {
 public:
  explicit FailedSet(int nranks = 0) : failed_(nranks, 0), left_(nranks, 0) {}

  int nranks() const { return static_cast<int>(failed_.size()); }
  int count() const { return count_; }
  bool contains(int rank) const { return InRange(rank) && failed_[rank] != 0; }
  // Adds the ranks of `ranks` that are ranks of the communicator (others
  // are ignored); true when the set grew.
  bool Add(const std::vector<int>& ranks) {
    bool grew = false;
    for (int r : ranks) grew = Add(r) || grew;
    return grew;
  }
  bool Add(int rank) {
    if (!InRange(rank) || failed_[rank]) return false;
    failed_[rank] = 1;
    ++count_;
    return true;
  }
  // `rank` said goodbye: it frees its communicator on purpose.
  void MarkLeft(int rank) {
    if (InRange(rank)) left_[rank] = 1;
  }
  bool left(int rank) const { return InRange(rank) && left_[rank] != 0; }
  // The connection to `rank` closed: a failure unless it said goodbye
  // first. True when the set grew.
  bool OnClosed(int rank) { return !left(rank) && Add(rank); }
  // Ascending, each rank once.
  std::vector<int> Sorted() const {
    std::vector<int> out;
    out.reserve(count_);
    for (int r = 0; r < nranks(); ++r)
      if (failed_[r]) out.push_back(r);
    return out;
  }

 private:
  bool InRange(int rank) const { return rank >= 0 && rank < nranks(); }
  std::vector<uint8_t> failed_, left_;
  int count_ = 0;
};

}  // namespace baton
