// Test helpers shared by the transport tests: a driver that pumps a send
// and a receive to completion, an allreduce call descriptor, and a pair of
// shared-memory segments with a channel each way.
#ifndef BATON_TESTS_UNIT_SHM_PAIR_H_
#define BATON_TESTS_UNIT_SHM_PAIR_H_

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>

#include "transport/channel.h"
#include "transport/shm.h"

namespace baton {

// Drives a send and a receive on two channels until both finish.
inline void Pump(Channel* tx, Channel* rx, const uint8_t* src, size_t bytes, const RecvTarget& t) {
  size_t sent = 0, received = 0;
  int idle = 0;
  while (sent < bytes || received < bytes) {
    size_t s0 = sent, r0 = received;
    if (sent < bytes) {
      ASSERT_TRUE(tx->ProgressSend(src, bytes, nullptr, &sent).ok());
    }
    if (received < bytes) {
      ASSERT_TRUE(rx->ProgressRecv(t, bytes, &received).ok());
    }
    idle = (sent == s0 && received == r0) ? idle + 1 : 0;
    ASSERT_LT(idle, 10000000) << "no progress";
  }
}

inline CallDescriptor AllReduceCall(uint32_t seq, uint64_t count, uint8_t op) {
  CallDescriptor d;
  d.kind = kCallKindCollectiveBase;
  d.seq = seq;
  d.count = count;
  d.datatype = batonFloat32;
  d.op = op;
  return d;
}

class ShmPair : public ::testing::Test {
 protected:
  void SetUp() override { Make(4, 4096); }
  // Fresh segments of one ring of `nslots` x `slot_bytes` each, and the
  // channels: a sends into b's ring 0; b receives from its ring 0.
  void Make(uint32_t nslots, uint32_t slot_bytes,
            ShmChannel::Copying copying = ShmChannel::Copying::kHot, bool adaptive = false) {
    std::string base = "/baton-test-" + std::to_string(getpid());
    ASSERT_TRUE(ShmSegment::Create(base + "-a", ShmSegmentBytes(1, nslots, slot_bytes), &a_).ok());
    ASSERT_TRUE(ShmSegment::Create(base + "-b", ShmSegmentBytes(1, nslots, slot_bytes), &b_).ok());
    InitShmSegment(a_.get(), 1, nslots, slot_bytes);
    InitShmSegment(b_.get(), 1, nslots, slot_bytes);
    a_->Unlink();
    b_->Unlink();
    ab_ = std::make_unique<ShmChannel>(a_.get(), 0, b_.get(), 0, &closed_, 1, copying, adaptive);
    ba_ = std::make_unique<ShmChannel>(b_.get(), 0, a_.get(), 0, &closed_, 0, copying, adaptive);
  }
  std::unique_ptr<ShmSegment> a_, b_;
  std::unique_ptr<ShmChannel> ab_, ba_;
  std::atomic<bool> closed_{false};
};

}  // namespace baton

#endif  // BATON_TESTS_UNIT_SHM_PAIR_H_
