// How far apart a shared-memory ring's two ranks are, as their cache lines
// travel: the samples on sampled pieces, the producer's own round trips, the
// ping-pong as a pair connects, and the verdict they give (transport/shm.h,
// LineTransferGauge; docs/performance.md, "A ring that measures its line
// transfers").
#include <sched.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>

#include "base/cpu.h"
#include "base/log.h"
#include "transport/shm.h"

namespace baton {

uint64_t ShmChannel::AwaitSampledPiece(const ShmSlotCell& cell, uint64_t* seen_at) {
  recv_ring_->probe.store(ProbeWord(recv_tail_, false), std::memory_order_relaxed);
  const uint64_t spin = recv_ring_->wants_round_trips.load(std::memory_order_relaxed) != 0
                            ? kShmAskedSpinNs
                            : kShmSampleSpinNs;
  const uint64_t start = ShmNowNs();
  for (;;) {
    const uint64_t word = cell.word.load(std::memory_order_acquire);
    if (SlotPublished(word, recv_tail_)) {
      recv_ring_->probe.store(ProbeWord(recv_tail_, true), std::memory_order_relaxed);
      *seen_at = ShmNowNs();
      return word;
    }
    if (ShmNowNs() - start > spin) {
      recv_ring_->probe.store(0, std::memory_order_relaxed);
      return word;
    }
    CpuRelax();
  }
}

void ShmChannel::AskForRoundTrips() {
  if (asking_ || gauge_.windows() > 0) return;
  if (round_trips_.windows() > 0 && ShmNowNs() - round_trips_at_ < kShmRemeasureNs) return;
  asking_ = true;
  send_ring_->wants_round_trips.store(1, std::memory_order_relaxed);
}

void ShmChannel::AwaitEcho(uint64_t piece, uint64_t stamp) {
  // The first read fetches the probe's line from the consumer: if the
  // consumer saw the piece meanwhile, that read is the way back.
  const uint64_t waiting = ProbeWord(piece, false), seen = ProbeWord(piece, true);
  for (;;) {
    const uint64_t probe = send_ring_->probe.load(std::memory_order_relaxed);
    const uint64_t now = ShmNowNs();
    if (probe == seen) {
      if (!round_trips_.Add(static_cast<int64_t>(now - stamp))) return;
      BATON_TRACE(kLogShm, "this rank -> rank %d: window %u's fastest round trip took %lld ns",
                  peer_rank_, round_trips_.windows(),
                  static_cast<long long>(round_trips_.last_min_ns()));
      round_trips_at_ = now;
      if (asking_) {
        asking_ = false;
        send_ring_->wants_round_trips.store(0, std::memory_order_relaxed);
      }
      return;
    }
    // (The consumer gave up, or this one waited as long as a sample counts.)
    if (probe != waiting || now - stamp > static_cast<uint64_t>(kShmSampleMaxNs) + stamp_skew_)
      return;
    CpuRelax();
  }
}

void ShmChannel::MeasureLineTransfer(const ShmSlotCell& cell, uint64_t seen_at) {
  uint64_t stamp;
  memcpy(&stamp, cell.inline_data + kShmStampOffset, sizeof(stamp));
  if (!gauge_.Add(static_cast<int64_t>(seen_at - stamp))) return;
  BATON_TRACE(kLogShm, "rank %d -> this rank: window %u's fastest transfer took %lld ns",
              peer_rank_, gauge_.windows(), static_cast<long long>(gauge_.last_min_ns()));
  recv_ring_->oneway_ns.store(gauge_.last_min_ns(), std::memory_order_relaxed);
  recv_ring_->oneway_count.store(gauge_.windows(), std::memory_order_release);
}

void ShmChannel::UpdateVerdict() {
  // Both directions' measures, or else the producer's own round trips; a
  // ring with neither stays as it was.
  int64_t round_trip;
  if (gauge_.windows() > 0 && send_ring_->oneway_count.load(std::memory_order_acquire) > 0) {
    round_trip = send_ring_->oneway_ns.load(std::memory_order_relaxed) + gauge_.last_min_ns();
  } else if (round_trips_.windows() > 0) {
    round_trip = round_trips_.last_min_ns();
  } else {
    return;
  }
  const bool far = RoundTripIsFar(far_, round_trip);
  if (far == far_) return;
  far_ = far;
  stores_.HostChanged();
  BATON_INFO(kLogShm,
             "rank %d <-> this rank: a line takes %lld ns to cross (round trip %lld ns), so %s",
             peer_rank_, static_cast<long long>(round_trip / 2), static_cast<long long>(round_trip),
             far ? "large messages to it now go by streaming stores"
                 : "messages to it go through the cache again");
}

void ShmChannel::CallEnded() {
  timing_call_ = false;
  const int c = stores_.Ended(ShmNowNs());
  if (c < 0) return;
  const bool streams = stores_.choice(c) == 1;
  const size_t floor_mib = SlotStoreChooser::ClassFloorBytes(c) >> 20;
  const std::string sizes = c + 1 < SlotStoreChooser::kClasses
                                ? std::to_string(floor_mib) + "-" + std::to_string(2 * floor_mib)
                                : "over " + std::to_string(floor_mib);
  const char* other = streams ? "cached" : "streaming";
  const double other_us = stores_.estimate_ns_per_mib(c, !streams) / 1000;
  char against[128];
  if (other_us == 0) {
    // The other kind's trial ended at its call's mark (SlotStoreChooser::Mark).
    snprintf(against, sizeof(against),
             "; with %s ones the first part of a call took %.1f times as long", other,
             stores_.mark_ratio(c));
  } else {
    snprintf(against, sizeof(against),
             ", against %.0f with %s ones; to the mark %.2f times as long", other_us, other,
             stores_.mark_ratio(c));
  }
  BATON_INFO(kLogShm, "this rank -> rank %d: calls of %s MiB go by %s stores (%.0f us per MiB%s)",
             peer_rank_, sizes.c_str(), streams ? "streaming" : "cached",
             stores_.estimate_ns_per_mib(c, streams) / 1000, against);
}

int64_t ShmChannel::MeasureAtConnect(bool first) {
  uint64_t sent = 0, stamp = 0;
  auto ping = [&] {
    stamp = ShmNowNs() - stamp_skew_;
    send_ring_->ping.store(++sent, std::memory_order_release);
  };
  // The peer's next ping after `seen`, or 0 when it did not come within
  // `limit_ns` (or the peer left).
  auto await_ping = [&](uint64_t seen, uint64_t limit_ns) -> uint64_t {
    const uint64_t start = ShmNowNs();
    for (;;) {
      const uint64_t value = recv_ring_->ping.load(std::memory_order_acquire);
      if (value > seen) return value;
      const uint64_t waited = ShmNowNs() - start;
      if (waited > limit_ns || peer_closed_->load(std::memory_order_relaxed)) return 0;
      // No pause while the answer may come any moment: it would add its
      // own length to the round trip. Past a few line transfers the peer
      // is elsewhere (descheduled, with more ranks than cores): give it the
      // core. Such a sample is dropped anyway.
      if (waited > static_cast<uint64_t>(kShmSampleMaxNs)) sched_yield();
    }
  };
  // The first rank pings; each answers the other's ping with its own, the
  // first rank stopping after its last answer. Every ping after a rank's
  // own closes a round trip on that rank's clock.
  if (first) ping();
  int64_t best = INT64_MAX;
  int samples = 0;
  for (uint64_t seen = 0; seen < kShmConnectPings;) {
    const uint64_t value = await_ping(seen, seen == 0 ? kShmConnectStartNs : kShmConnectAnswerNs);
    if (value == 0) {
      BATON_TRACE(kLogShm, "rank %d did not answer ping %llu in time", peer_rank_,
                  static_cast<unsigned long long>(seen + 1));
      break;
    }
    const int64_t round_trip = static_cast<int64_t>(ShmNowNs() - stamp);
    seen = value;
    if (sent > 0 && round_trip <= kShmSampleMaxNs) {
      best = std::min(best, round_trip);
      ++samples;
    }
    if (!first || seen < kShmConnectPings) ping();
  }
  if (samples < kShmConnectMinSamples) return 0;
  BATON_TRACE(kLogShm, "rank %d <-> this rank: the fastest of %d round trips took %lld ns",
              peer_rank_, samples, static_cast<long long>(best));
  if (adaptive_ && RoundTripIsFar(false, best)) {
    far_ = true;
    BATON_INFO(kLogShm,
               "rank %d <-> this rank: a line takes %lld ns to cross (round trip %lld ns as the "
               "pair connected), so large messages to it go by streaming stores",
               peer_rank_, static_cast<long long>(best / 2), static_cast<long long>(best));
  }
  return best;
}

}  // namespace baton
