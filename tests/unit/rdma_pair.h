// Two RdmaChannels connected in one process over the emulated device,
// and how the unit tests move messages between them.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <vector>

#include "transport/rdma/emulated_verbs.h"
#include "transport/rdma/rdma_channel.h"

namespace baton::rdma {

// The emulated device's first port, opened (null on failure).
inline std::unique_ptr<Context> OpenEmulated() {
  std::unique_ptr<Provider> provider = MakeEmulatedProvider();
  std::vector<DeviceInfo> devices;
  std::unique_ptr<Context> ctx;
  EXPECT_TRUE(provider->ListDevices(&devices).ok());
  if (!devices.empty()) {
    EXPECT_TRUE(provider->Open(devices[0], -1, 0, &ctx).ok());
  }
  return ctx;
}

// Two connected channels in this process, one emulated device.
struct Pair {
  std::unique_ptr<RdmaChannel> a, b;
  std::atomic<bool> a_peer_closed{false}, b_peer_closed{false};
  explicit Pair(RdmaChannel::Options options) : Pair(OpenEmulated(), options) {}
  Pair(std::shared_ptr<Context> shared, RdmaChannel::Options options) {
    EXPECT_TRUE(RdmaChannel::Create(shared, options, 1, &a_peer_closed, &a).ok());
    EXPECT_TRUE(RdmaChannel::Create(shared, options, 0, &b_peer_closed, &b).ok());
    EXPECT_TRUE(a->Connect(b->endpoint()).ok());
    EXPECT_TRUE(b->Connect(a->endpoint()).ok());
  }
};

inline RdmaChannel::Options Small(int qps = 1) {
  RdmaChannel::Options o;
  o.slots = 4;
  o.slot_bytes = 4096;
  o.qps = qps;
  return o;
}

// Moves one message a -> b, alternating the two ends; false (with the
// status) on error or when neither moves for `max_idle` rounds.
inline Status Transfer(Pair& p, const std::vector<uint8_t>& src, const RecvTarget& target,
                       const CallDescriptor* tag, int max_idle = 1000) {
  size_t sent = 0, got = 0, last_sent = 0, last_got = 0;
  int idle = 0;
  while (sent < src.size() || got < src.size()) {
    if (sent < src.size())
      BATON_RETURN_IF_ERROR(p.a->ProgressSend(src.data(), src.size(), tag, &sent));
    if (got < src.size()) BATON_RETURN_IF_ERROR(p.b->ProgressRecv(target, src.size(), &got));
    idle = (sent == last_sent && got == last_got) ? idle + 1 : 0;
    if (idle > max_idle) return TimeoutError("no progress");
    last_sent = sent;
    last_got = got;
  }
  return Status::Ok();
}

inline std::vector<uint8_t> Pattern(size_t n, int seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 131 + seed);
  return v;
}

}  // namespace baton::rdma
