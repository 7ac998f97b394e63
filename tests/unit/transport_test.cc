// The shared-memory ring and the TCP channel, exercised in one process: a
// message much larger than the ring, reductions straight out of the slots,
// partial elements across TCP reads, call descriptors on the first message
// of a call (and every way a message can fail to match), control frames.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <numeric>
#include <thread>
#include <vector>

#include "base/socket.h"
#include "kernels/cpu_reduce.h"
#include "transport/control.h"
#include "transport/shm.h"
#include "transport/tcp.h"
#include "unit/shm_pair.h"

namespace baton {
namespace {

// A TCP channel over these sockets (its staging buffers mapped, or the test fails).
std::unique_ptr<TcpChannel> MakeTcp(std::vector<Fd> sockets, size_t staging_bytes, int peer) {
  std::unique_ptr<TcpChannel> ch;
  Status st = TcpChannel::Create(std::move(sockets), staging_bytes, peer, &ch);
  EXPECT_TRUE(st.ok()) << st.message();
  return ch;
}

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

// A reduction written twice in one pass (RecvTarget::copy_to): dst with
// streaming stores, the copy with cached ones at another offset within a
// cache line; with PreMulSum's scale, the scaled sum lands in both.
TEST_F(ShmPair, ReducesIntoTheOutputAndACopy) {
  const size_t n = 100003;
  std::vector<float> in(n), local(n), out(n), copy(n + 3);
  for (size_t i = 0; i < n; ++i) in[i] = float(i % 17), local[i] = float(i % 5);
  for (bool scaled : {false, true}) {
    const float scale = 0.5f;
    std::fill(out.begin(), out.end(), -1.0f);
    std::fill(copy.begin(), copy.end(), -1.0f);
    RecvTarget t;
    t.dst = reinterpret_cast<uint8_t*>(out.data());
    t.copy_to = reinterpret_cast<uint8_t*>(copy.data() + 3);
    t.reduce_with = reinterpret_cast<const uint8_t*>(local.data());
    t.datatype = batonFloat32;
    t.op = batonSum;
    t.elem_size = 4;
    t.non_temporal = true;
    if (scaled) t.scale = reinterpret_cast<const uint8_t*>(&scale);
    Pump(ab_.get(), ba_.get(), reinterpret_cast<const uint8_t*>(in.data()), n * 4, t);
    for (size_t i = 0; i < n; ++i) {
      const float want = scaled ? local[i] * scale + in[i] : in[i] + local[i];
      ASSERT_EQ(out[i], want) << i << (scaled ? " scaled" : "");
      ASSERT_EQ(copy[i + 3], want) << i << (scaled ? " scaled" : "");
    }
    for (size_t i = 0; i < 3; ++i) ASSERT_EQ(copy[i], -1.0f) << "written before the copy";
  }
}

TEST_F(ShmPair, CrossMemoryAttachCopyAndReduce) {
  // qemu-user (the aarch64 test, docs/arm.md) has no process_vm_readv: the
  // probe fails there, so BATON_CMA falls back to copies through the slots.
  if (process_vm_readv(getpid(), nullptr, 0, nullptr, 0, 0) < 0 && errno == ENOSYS)
    GTEST_SKIP() << "process_vm_readv is not implemented here (ENOSYS)";
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
  auto tx = MakeTcp(std::move(ends[0]), 4096, 1),
       rx = MakeTcp(std::move(ends[1]), 4099 * GetParam(), 0);
  for (size_t n : {size_t(1), size_t(1000), size_t(1 << 18) + 5}) {
    std::vector<double> in(n), local(n), out(n), copy(n);
    for (size_t i = 0; i < n; ++i) in[i] = double(i % 1000), local[i] = 0.5;
    RecvTarget t;
    t.dst = reinterpret_cast<uint8_t*>(out.data());
    t.reduce_with = reinterpret_cast<const uint8_t*>(local.data());
    t.datatype = batonFloat64;
    t.op = batonMax;
    t.elem_size = 8;
    // Larger messages also write the result to a copy (RecvTarget::copy_to).
    if (n > 1) t.copy_to = reinterpret_cast<uint8_t*>(copy.data());
    Pump(tx.get(), rx.get(), reinterpret_cast<const uint8_t*>(in.data()), n * 8, t);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], std::max(in[i], 0.5)) << n;
    if (n > 1) {
      EXPECT_EQ(copy, out) << n;
    }
  }
}

TEST_P(TcpStripes, CopiesBackToBackMessages) {
  std::vector<Fd> ends[2];
  SocketPairs(GetParam(), ends);
  auto tx = MakeTcp(std::move(ends[0]), 1 << 16, 1), rx = MakeTcp(std::move(ends[1]), 1 << 16, 0);
  // Sizes around the striping threshold, one after the other on the same
  // sockets: each must land whole and in order.
  for (size_t bytes : {TcpChannel::kStripeMinBytes - 1, TcpChannel::kStripeMinBytes,
                       TcpChannel::kStripeMinBytes + 63, size_t(3) << 20, size_t(7)}) {
    std::vector<uint8_t> src(bytes), dst(bytes);
    for (size_t i = 0; i < bytes; ++i) src[i] = static_cast<uint8_t>(i * 131 + bytes);
    RecvTarget t;
    t.dst = dst.data();
    Pump(tx.get(), rx.get(), src.data(), bytes, t);
    ASSERT_EQ(src, dst) << bytes;
  }
}

INSTANTIATE_TEST_SUITE_P(Sockets, TcpStripes, ::testing::Values(1, 3));

// TCP_QUICKACK only where the peer may wait for our ACK: while a message is
// still arriving, and in one-way flows; never after a whole message of an
// exchange, whose ACK rides on the reply (no packet, no syscall).
TEST(TcpChannelTest, QuickAckOnlyWhereThePeerMayWait) {
  std::vector<Fd> ends[2];
  SocketPairs(1, ends);
  auto a = MakeTcp(std::move(ends[0]), 1 << 16, 1), b = MakeTcp(std::move(ends[1]), 1 << 16, 0);
  std::vector<uint8_t> src(8, 7), dst(8);
  RecvTarget t;
  t.dst = dst.data();
  for (int round = 0; round < 20; ++round) {  // request and reply
    Pump(a.get(), b.get(), src.data(), src.size(), t);
    Pump(b.get(), a.get(), src.data(), src.size(), t);
  }
  EXPECT_EQ(a->quick_acks(), 0u);
  EXPECT_EQ(b->quick_acks(), 0u);
  for (int i = 0; i < 20; ++i) Pump(a.get(), b.get(), src.data(), src.size(), t);  // one way
  EXPECT_EQ(b->quick_acks(), 19u);  // all but the first, which a reply could still carry
  EXPECT_EQ(src, dst);
  // A large message arrives in pieces: the sender waits for ACKs meanwhile.
  Pump(b.get(), a.get(), src.data(), src.size(), t);  // a's receive resets b's count
  const uint64_t before = b->quick_acks();
  std::vector<uint8_t> big(size_t(3) << 20), got(big.size());
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 7);
  RecvTarget bt;
  bt.dst = got.data();
  Pump(a.get(), b.get(), big.data(), big.size(), bt);
  EXPECT_GT(b->quick_acks(), before);
  EXPECT_EQ(big, got);
}

TEST(TcpChannelTest, StagingThatCannotBeMappedIsAnError) {
  // More address space than a process has: the channel reports it (no exception).
  std::vector<Fd> ends[2];
  SocketPairs(1, ends);
  std::unique_ptr<TcpChannel> ch;
  Status st = TcpChannel::Create(std::move(ends[0]), size_t(1) << 50, 3, &ch);
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(ch, nullptr);
  EXPECT_NE(st.message().find("staging buffer"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("rank 3"), std::string::npos) << st.message();
}

TEST(TcpChannelTest, ClosedPeerIsRemoteError) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  std::vector<Fd> one;
  one.emplace_back(sv[1]);
  auto rx = MakeTcp(std::move(one), 4096, 0);
  close(sv[0]);
  std::vector<uint8_t> dst(10);
  RecvTarget t;
  t.dst = dst.data();
  size_t done = 0;
  EXPECT_EQ(rx->ProgressRecv(t, dst.size(), &done).code(), batonRemoteError);
}

// A message sent with descriptor `sent_tag` (null: none) and received by a
// rank that expects `expect` (null: a continuing message); returns the
// receive's status once it fails or all of `bytes` arrived.
Status SendTagged(Channel* tx, Channel* rx, size_t sent_bytes, const CallDescriptor* sent_tag,
                  size_t bytes, const CallDescriptor* expect) {
  std::vector<uint8_t> src(sent_bytes, 7), dst(std::max(bytes, sent_bytes));
  RecvTarget t;
  t.dst = dst.data();
  t.opens = expect;
  size_t sent = 0, received = 0;
  for (int i = 0; i < 1000000 && received < bytes; ++i) {
    if (sent < sent_bytes) {
      Status st = tx->ProgressSend(src.data(), sent_bytes, sent_tag, &sent);
      if (!st.ok()) return st;
    }
    Status st = rx->ProgressRecv(t, bytes, &received);
    if (!st.ok()) return st;
  }
  return received == bytes ? Status::Ok() : InternalError("no progress");
}

// Every way the start of a message can disagree with the receiver's call,
// on one channel pair (a fresh pair per case: a failed stream is not reused).
template <typename MakePair>
void CheckDescriptors(MakePair make_pair) {
  const CallDescriptor mine = AllReduceCall(7, 100, batonSum);
  const CallDescriptor other_op = AllReduceCall(7, 100, batonMax);
  {
    auto [tx, rx] = make_pair();
    ASSERT_TRUE(SendTagged(tx.get(), rx.get(), 400, &mine, 400, &mine).ok());
    // Then a continuing message, without a descriptor on either side.
    ASSERT_TRUE(SendTagged(tx.get(), rx.get(), 40, nullptr, 40, nullptr).ok());
  }
  {
    auto [tx, rx] = make_pair();
    Status st = SendTagged(tx.get(), rx.get(), 400, &other_op, 400, &mine);
    EXPECT_EQ(st.code(), batonInvalidUsage);
    EXPECT_EQ(rx->mismatch().kind, CallMismatch::Kind::kOtherCall);
    EXPECT_EQ(rx->mismatch().theirs, other_op);
  }
  {
    auto [tx, rx] = make_pair();
    EXPECT_EQ(SendTagged(tx.get(), rx.get(), 400, nullptr, 400, &mine).code(), batonInvalidUsage);
    EXPECT_EQ(rx->mismatch().kind, CallMismatch::Kind::kNoDescriptor);
  }
  {
    auto [tx, rx] = make_pair();
    EXPECT_EQ(SendTagged(tx.get(), rx.get(), 400, &mine, 400, nullptr).code(), batonInvalidUsage);
    EXPECT_EQ(rx->mismatch().kind, CallMismatch::Kind::kNewCall);
    EXPECT_EQ(rx->mismatch().theirs, mine);
  }
  {
    // Same call, more bytes than the receiver expects.
    auto [tx, rx] = make_pair();
    EXPECT_EQ(SendTagged(tx.get(), rx.get(), 800, &mine, 400, &mine).code(), batonInvalidUsage);
    EXPECT_EQ(rx->mismatch().kind, CallMismatch::Kind::kSize);
  }
}

TEST(DescriptorTest, SharedMemory) {
  const std::string base = "/baton-test-desc-" + std::to_string(getpid());
  std::vector<std::unique_ptr<ShmSegment>> segments;
  std::atomic<bool> closed{false};
  int n = 0;
  CheckDescriptors([&] {
    std::unique_ptr<ShmSegment> a, b;
    EXPECT_TRUE(
        ShmSegment::Create(base + "-a" + std::to_string(n), ShmSegmentBytes(1, 4, 4096), &a).ok());
    EXPECT_TRUE(
        ShmSegment::Create(base + "-b" + std::to_string(n++), ShmSegmentBytes(1, 4, 4096), &b)
            .ok());
    InitShmSegment(a.get(), 1, 4, 4096);
    InitShmSegment(b.get(), 1, 4, 4096);
    a->Unlink();
    b->Unlink();
    auto pair = std::make_pair(std::make_unique<ShmChannel>(a.get(), 0, b.get(), 0, &closed, 1),
                               std::make_unique<ShmChannel>(b.get(), 0, a.get(), 0, &closed, 0));
    segments.push_back(std::move(a));
    segments.push_back(std::move(b));
    return pair;
  });
}

TEST(DescriptorTest, Tcp) {
  CheckDescriptors([] {
    std::vector<Fd> ends[2];
    SocketPairs(1, ends);
    return std::make_pair(MakeTcp(std::move(ends[0]), 4096, 1),
                          MakeTcp(std::move(ends[1]), 4096, 0));
  });
  // TCP knows the peer's size from the header, also when it is smaller.
  std::vector<Fd> ends[2];
  SocketPairs(1, ends);
  auto tx = MakeTcp(std::move(ends[0]), 4096, 1), rx = MakeTcp(std::move(ends[1]), 4096, 0);
  const CallDescriptor call = AllReduceCall(1, 10, batonSum);
  EXPECT_EQ(SendTagged(tx.get(), rx.get(), 200, &call, 400, &call).code(), batonInvalidUsage);
  EXPECT_EQ(rx->mismatch().kind, CallMismatch::Kind::kSize);
  EXPECT_EQ(rx->mismatch().their_bytes, 200u);
}

TEST(TcpChannelTest, BytesWithoutTheHeaderAreRefused) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  std::vector<Fd> one;
  one.emplace_back(sv[1]);
  auto rx = MakeTcp(std::move(one), 4096, 0);
  std::vector<uint8_t> junk(sizeof(TcpMessageHeader), 0xab);
  ASSERT_EQ(write(sv[0], junk.data(), junk.size()), static_cast<ssize_t>(junk.size()));
  std::vector<uint8_t> dst(10);
  RecvTarget t;
  t.dst = dst.data();
  size_t done = 0;
  Status st = rx->ProgressRecv(t, dst.size(), &done);
  EXPECT_EQ(st.code(), batonInvalidUsage);
  EXPECT_NE(st.message().find("header"), std::string::npos) << st.message();
  EXPECT_EQ(done, 0u);
  close(sv[0]);
}

TEST(ControlFrameTest, RoundTripsAndRefusesGarbage) {
  FailureNote note{batonInvalidUsage, 3, "collective mismatch between rank 3 and rank 1"};
  std::vector<uint8_t> bytes = EncodeNote(note);
  CallState state;
  state.call = AllReduceCall(12, 5, batonSum);
  state.in_call = true;
  const std::vector<uint8_t> s = EncodeState(state), q = EncodeQuery();
  bytes.insert(bytes.end(), q.begin(), q.end());
  bytes.insert(bytes.end(), s.begin(), s.end());
  // Three frames back to back; every prefix is incomplete, never invalid.
  size_t offset = 0;
  std::vector<FrameType> types;
  while (offset < bytes.size()) {
    ControlFrame frame;
    size_t used = 0;
    for (size_t cut = offset; cut < bytes.size(); ++cut) {
      FrameParse p = DecodeFrame(bytes.data() + offset, cut - offset, 8, &frame, &used);
      if (p == FrameParse::kComplete) break;
      ASSERT_EQ(p, FrameParse::kIncomplete) << cut;
    }
    ASSERT_EQ(DecodeFrame(bytes.data() + offset, bytes.size() - offset, 8, &frame, &used),
              FrameParse::kComplete);
    types.push_back(frame.type);
    if (frame.type == FrameType::kNote) {
      EXPECT_EQ(frame.note.code, batonInvalidUsage);
      EXPECT_EQ(frame.note.origin, 3);
      EXPECT_EQ(frame.note.text, note.text);
    }
    if (frame.type == FrameType::kState) {
      EXPECT_EQ(frame.state.call, state.call);
      EXPECT_TRUE(frame.state.in_call);
    }
    offset += used;
  }
  EXPECT_EQ(types,
            (std::vector<FrameType>{FrameType::kNote, FrameType::kQuery, FrameType::kState}));
  // A note from a rank outside the communicator, a huge length, another
  // magic, an unknown type, success as a failure's code: all refused.
  ControlFrame frame;
  size_t used = 0;
  std::vector<uint8_t> bad = EncodeNote(note);
  EXPECT_EQ(DecodeFrame(bad.data(), bad.size(), 3, &frame, &used), FrameParse::kInvalid);
  bad = EncodeNote(FailureNote{batonSuccess, 0, "x"});
  EXPECT_EQ(DecodeFrame(bad.data(), bad.size(), 8, &frame, &used), FrameParse::kInvalid);
  bad = q;
  bad[12] = 0xff, bad[13] = 0xff, bad[14] = 0xff, bad[15] = 0x7f;  // length
  EXPECT_EQ(DecodeFrame(bad.data(), bad.size(), 8, &frame, &used), FrameParse::kInvalid);
  bad = q;
  bad[0] ^= 1;  // magic
  EXPECT_EQ(DecodeFrame(bad.data(), bad.size(), 8, &frame, &used), FrameParse::kInvalid);
  bad = q;
  bad[4] = 99;  // type
  EXPECT_EQ(DecodeFrame(bad.data(), bad.size(), 8, &frame, &used), FrameParse::kInvalid);
  // A note whose text is longer than any sender writes (found by the fuzz
  // target): refused.
  bad = EncodeNote(FailureNote{batonRemoteError, 0, std::string(kMaxNoteText, 'x')});
  bad.push_back('x');
  const uint32_t too_long = 4 + kMaxNoteText + 1;
  memcpy(bad.data() + 12, &too_long, 4);
  EXPECT_EQ(DecodeFrame(bad.data(), bad.size(), 8, &frame, &used), FrameParse::kInvalid);
  // Long texts are cut to the bound.
  const std::vector<uint8_t> long_note =
      EncodeNote(FailureNote{batonRemoteError, 0, std::string(10 * kMaxNoteText, 'x')});
  ASSERT_EQ(DecodeFrame(long_note.data(), long_note.size(), 8, &frame, &used),
            FrameParse::kComplete);
  EXPECT_EQ(frame.note.text.size(), kMaxNoteText);
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
