// The executor over a scripted channel: when it lets a receive poll for its
// piece (RecvTarget::idle), and that such a poll never comes before a send
// that the same pass made ready.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "exec/executor.h"
#include "transport/channel_set.h"

namespace baton {
namespace {

constexpr size_t kBytes = 64;

// Rank 1 of a two-rank ring, as rank 0 sees it: its first message (the
// reduce-scatter's) is there at once; its second (the allgather's) leaves
// only after rank 0's own send has arrived, and then only on the
// kPollsAfterSend-th poll, so that rank 0 runs out of work meanwhile.
class ScriptedPeer : public Channel {
 public:
  static constexpr int kPollsAfterSend = 50;

  Kind kind() const override { return Kind::kShm; }
  Status ProgressSend(const uint8_t* src, size_t bytes, const CallDescriptor* /*tag*/,
                      size_t* done) override {
    sent.assign(src, src + bytes);
    *done = bytes;
    return Status::Ok();
  }
  Status ProgressRecv(const RecvTarget& target, size_t bytes, size_t* done) override {
    std::vector<uint8_t> message(bytes, static_cast<uint8_t>(received + 1));
    if (received == 1) {
      if (target.idle) {
        ++idle_polls;
        if (sent.empty()) ++idle_polls_before_send;
      }
      if (sent.empty() || ++polls_after_send < kPollsAfterSend) return Status::Ok();
    }
    Deliver(target, 0, message.data(), bytes);
    *done = bytes;
    ++received;
    return Status::Ok();
  }

  int received = 0;
  std::vector<uint8_t> sent;
  int polls_after_send = 0;
  int idle_polls = 0;              // polls for the second message that may linger
  int idle_polls_before_send = 0;  // ... while the send waited: what must never happen
};

// recv A; send A (after it); recv B. `send_first`: the send's queue comes
// first in the pass (as a ring's schedule lists its first send before its
// first receive), else the receives' queue does.
Schedule RingStep(bool send_first, uint8_t* a, uint8_t* b) {
  Op recv_a;
  recv_a.kind = Op::Kind::kRecv;
  recv_a.peer = 1;
  recv_a.bytes = kBytes;
  recv_a.dst = a;
  Op send_a;
  send_a.kind = Op::Kind::kSend;
  send_a.peer = 1;
  send_a.bytes = kBytes;
  send_a.src = a;
  Op recv_b = recv_a;
  recv_b.dst = b;
  Schedule s;
  if (send_first) {
    send_a.deps[0] = 1;
    s.ops = {send_a, recv_a, recv_b};
  } else {
    send_a.deps[0] = 0;
    s.ops = {recv_a, send_a, recv_b};
  }
  return s;
}

class ExecutorIdleTest : public ::testing::TestWithParam<bool> {};

TEST_P(ExecutorIdleTest, AReceivePollsOnlyWhenNoSendIsReady) {
  std::vector<std::unique_ptr<Channel>> channels(2);
  auto peer = std::make_unique<ScriptedPeer>();
  ScriptedPeer* scripted = peer.get();
  channels[1] = std::move(peer);
  std::unique_ptr<ChannelSet> set = ChannelSet::OverChannels(0, std::move(channels));
  ExecutorConfig config;
  config.timeout_s = 30;
  Executor executor(set.get(), config);

  std::vector<uint8_t> a(kBytes), b(kBytes);
  Schedule schedule = RingStep(GetParam(), a.data(), b.data());
  const std::vector<CallDescriptor> calls(1);
  ASSERT_TRUE(executor.Run(schedule, calls, 0).ok());

  EXPECT_EQ(scripted->received, 2);
  EXPECT_EQ(scripted->sent, std::vector<uint8_t>(kBytes, 1));
  EXPECT_EQ(b, std::vector<uint8_t>(kBytes, 2));
  // The executor did let the receive poll once nothing else could move...
  EXPECT_GT(scripted->idle_polls, 0);
  // ... but never while the send it had just made ready still waited.
  EXPECT_EQ(scripted->idle_polls_before_send, 0);
}

INSTANTIATE_TEST_SUITE_P(QueueOrders, ExecutorIdleTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? std::string("SendQueueFirst")
                                             : std::string("RecvQueueFirst");
                         });

}  // namespace
}  // namespace baton
