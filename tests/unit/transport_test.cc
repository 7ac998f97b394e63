// The shared-memory ring and the TCP channel, exercised in one process: a
// message much larger than the ring, reductions straight out of the slots,
// partial elements across TCP reads.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <numeric>
#include <thread>
#include <vector>

#include "base/socket.h"
#include "kernels/cpu_reduce.h"
#include "transport/shm.h"
#include "transport/tcp.h"

namespace baton {
namespace {

// Drives a send and a receive on two channels until both finish.
void Pump(Channel* tx, Channel* rx, const uint8_t* src, size_t bytes, const RecvTarget& t) {
  size_t sent = 0, received = 0;
  int idle = 0;
  while (sent < bytes || received < bytes) {
    size_t s0 = sent, r0 = received;
    if (sent < bytes) {
      ASSERT_TRUE(tx->ProgressSend(src, bytes, &sent).ok());
    }
    if (received < bytes) {
      ASSERT_TRUE(rx->ProgressRecv(t, bytes, &received).ok());
    }
    idle = (sent == s0 && received == r0) ? idle + 1 : 0;
    ASSERT_LT(idle, 10000000) << "no progress";
  }
}

class ShmPair : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string base = "/baton-test-" + std::to_string(getpid());
    ASSERT_TRUE(ShmSegment::Create(base + "-a", ShmSegmentBytes(1, 4, 4096), &a_).ok());
    ASSERT_TRUE(ShmSegment::Create(base + "-b", ShmSegmentBytes(1, 4, 4096), &b_).ok());
    InitShmSegment(a_.get(), 1, 4, 4096);
    InitShmSegment(b_.get(), 1, 4, 4096);
    a_->Unlink();
    b_->Unlink();
    // a sends into b's ring 0; b receives from its ring 0.
    ab_ = std::make_unique<ShmChannel>(a_.get(), 0, b_.get(), 0, &closed_, 1);
    ba_ = std::make_unique<ShmChannel>(b_.get(), 0, a_.get(), 0, &closed_, 0);
  }
  std::unique_ptr<ShmSegment> a_, b_;
  std::unique_ptr<ShmChannel> ab_, ba_;
  std::atomic<bool> closed_{false};
};

TEST_F(ShmPair, LargeMessageThroughSmallRing) {
  std::vector<uint8_t> src(1 << 20), dst(1 << 20);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 31 + 7);
  RecvTarget t;
  t.dst = dst.data();
  Pump(ab_.get(), ba_.get(), src.data(), src.size(), t);
  EXPECT_EQ(src, dst);
}

TEST_F(ShmPair, ReducesOutOfTheSlots) {
  const size_t n = 100003;
  std::vector<float> in(n), local(n), out(n);
  for (size_t i = 0; i < n; ++i) in[i] = float(i % 17), local[i] = float(i % 5);
  RecvTarget t;
  t.dst = reinterpret_cast<uint8_t*>(out.data());
  t.reduce_with = reinterpret_cast<const uint8_t*>(local.data());
  t.datatype = batonFloat32;
  t.op = batonSum;
  t.elem_size = 4;
  Pump(ab_.get(), ba_.get(), reinterpret_cast<const uint8_t*>(in.data()), n * 4, t);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], in[i] + local[i]);
}

TEST_F(ShmPair, CrossMemoryAttachCopyAndReduce) {
  // Our own process stands in for the peer: process_vm_readv works on it.
  InitCmaProbe(a_.get());
  ASSERT_TRUE(ProbeCma(getpid(), *a_));
  ab_->EnableCma(true, getpid(), 4096);
  ba_->EnableCma(true, getpid(), 4096);
  const size_t n = (1 << 20) + 3;
  std::vector<int32_t> in(n), local(n), out(n);
  for (size_t i = 0; i < n; ++i) in[i] = int32_t(i * 7), local[i] = int32_t(i % 13);
  RecvTarget copy;
  copy.dst = reinterpret_cast<uint8_t*>(out.data());
  Pump(ab_.get(), ba_.get(), reinterpret_cast<const uint8_t*>(in.data()), n * 4, copy);
  ASSERT_EQ(in, out);
  RecvTarget reduce = copy;
  reduce.reduce_with = reinterpret_cast<const uint8_t*>(local.data());
  reduce.datatype = batonInt32;
  reduce.op = batonMin;
  reduce.elem_size = 4;
  Pump(ab_.get(), ba_.get(), reinterpret_cast<const uint8_t*>(in.data()), n * 4, reduce);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], std::min(in[i], local[i]));
  // Small messages still go through the slots.
  std::vector<uint8_t> small(100, 7), small_out(100);
  RecvTarget t;
  t.dst = small_out.data();
  Pump(ab_.get(), ba_.get(), small.data(), small.size(), t);
  EXPECT_EQ(small, small_out);
}

TEST_F(ShmPair, PeerDeathIsAnErrorNotAHang) {
  std::vector<uint8_t> dst(100);
  RecvTarget t;
  t.dst = dst.data();
  size_t done = 0;
  closed_ = true;
  Status st = ba_->ProgressRecv(t, dst.size(), &done);
  EXPECT_EQ(st.code(), batonRemoteError);
}

// `k` connected socket pairs: ends[0] for one side, ends[1] for the other.
void SocketPairs(int k, std::vector<Fd> ends[2]) {
  for (int i = 0; i < k; ++i) {
    int sv[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    ends[0].emplace_back(sv[0]);
    ends[1].emplace_back(sv[1]);
  }
}

class TcpStripes : public ::testing::TestWithParam<int> {};

TEST_P(TcpStripes, ReduceWithPartialElementsAcrossReads) {
  std::vector<Fd> ends[2];
  SocketPairs(GetParam(), ends);
  // A tiny, odd staging buffer forces partial elements at every read.
  TcpChannel tx(std::move(ends[0]), 4096, 1), rx(std::move(ends[1]), 4099 * GetParam(), 0);
  for (size_t n : {size_t(1), size_t(1000), size_t(1 << 18) + 5}) {
    std::vector<double> in(n), local(n), out(n);
    for (size_t i = 0; i < n; ++i) in[i] = double(i % 1000), local[i] = 0.5;
    RecvTarget t;
    t.dst = reinterpret_cast<uint8_t*>(out.data());
    t.reduce_with = reinterpret_cast<const uint8_t*>(local.data());
    t.datatype = batonFloat64;
    t.op = batonMax;
    t.elem_size = 8;
    Pump(&tx, &rx, reinterpret_cast<const uint8_t*>(in.data()), n * 8, t);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], std::max(in[i], 0.5)) << n;
  }
}

TEST_P(TcpStripes, CopiesBackToBackMessages) {
  std::vector<Fd> ends[2];
  SocketPairs(GetParam(), ends);
  TcpChannel tx(std::move(ends[0]), 1 << 16, 1), rx(std::move(ends[1]), 1 << 16, 0);
  // Sizes around the striping threshold, one after the other on the same
  // sockets: each must land whole and in order.
  for (size_t bytes : {TcpChannel::kStripeMinBytes - 1, TcpChannel::kStripeMinBytes,
                       TcpChannel::kStripeMinBytes + 63, size_t(3) << 20, size_t(7)}) {
    std::vector<uint8_t> src(bytes), dst(bytes);
    for (size_t i = 0; i < bytes; ++i) src[i] = static_cast<uint8_t>(i * 131 + bytes);
    RecvTarget t;
    t.dst = dst.data();
    Pump(&tx, &rx, src.data(), bytes, t);
    ASSERT_EQ(src, dst) << bytes;
  }
}

INSTANTIATE_TEST_SUITE_P(Sockets, TcpStripes, ::testing::Values(1, 3));

TEST(TcpChannelTest, ClosedPeerIsRemoteError) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  std::vector<Fd> one;
  one.emplace_back(sv[1]);
  TcpChannel rx(std::move(one), 4096, 0);
  close(sv[0]);
  std::vector<uint8_t> dst(10);
  RecvTarget t;
  t.dst = dst.data();
  size_t done = 0;
  EXPECT_EQ(rx.ProgressRecv(t, dst.size(), &done).code(), batonRemoteError);
}

TEST(SocketTest, ParseHostPort) {
  SockAddr a;
  ASSERT_TRUE(ParseHostPort("127.0.0.1:1234", &a).ok());
  EXPECT_EQ(a.ToString(), "127.0.0.1:1234");
  ASSERT_TRUE(ParseHostPort("[::1]:80", &a).ok());
  EXPECT_EQ(a.port(), 80);
  EXPECT_FALSE(ParseHostPort("nocolon", &a).ok());
  EXPECT_FALSE(ParseHostPort(":12", &a).ok());
  SockAddr b = FromWire(ToWire(a));
  EXPECT_EQ(b.ToString(), a.ToString());
}

}  // namespace
}  // namespace baton
