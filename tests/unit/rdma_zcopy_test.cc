// RDMA zero-copy between registered user buffers (rdma_channel.h): which
// messages go in place and which through the slots, the results of both,
// the bounded cache of NIC registrations and its releases, and faults in
// the middle of an in-place message; after each case no emulated object
// may be left.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "comm/registrations.h"
#include "transport/rdma/emulated_verbs.h"
#include "transport/rdma/rdma_channel.h"
#include "transport/rdma/user_mr_cache.h"
#include "unit/rdma_pair.h"

namespace baton::rdma {
namespace {

constexpr size_t kMin = 64 << 10;

// A pair whose channels write messages of kMin bytes or more between
// buffers registered in `regs` in place.
struct ZcPair {
  Registrations regs;
  std::shared_ptr<UserMrCache> cache;
  std::unique_ptr<Pair> pair;
  explicit ZcPair(int qps = 1, uint32_t slot_bytes = 4096) {
    std::shared_ptr<Context> ctx = OpenEmulated();
    cache = std::make_shared<UserMrCache>(ctx, kUserMrCacheEntries);
    UserMrCache::Watch(cache, &regs);
    RdmaChannel::Options o = Small(qps);
    o.slot_bytes = slot_bytes;
    o.zcopy_min = kMin;
    o.user_memory = &regs;
    o.mr_cache = cache;
    pair = std::make_unique<Pair>(ctx, o);
  }
  void* Register(std::vector<uint8_t>& v) {
    void* h = nullptr;
    EXPECT_TRUE(regs.Register(v.data(), v.size(), &h).ok());
    return h;
  }
};

RecvTarget CopyInto(std::vector<uint8_t>& dst) {
  RecvTarget t;
  t.dst = dst.data();
  return t;
}

TEST(RdmaZeroCopy, RegisteredLargeMessagesGoInPlace) {
  for (int qps : {1, 3}) {
    {
      ZcPair z(qps);
      const size_t biggest = (3 << 20) + 7;
      std::vector<uint8_t> src = Pattern(biggest, 5), dst(biggest + 64, 0);
      z.Register(src);
      z.Register(dst);
      uint64_t direct = 0;
      CallDescriptor tag;
      tag.seq = 1;
      for (size_t n : {kMin - 1, kMin, kMin + 1, size_t(1) << 20, biggest}) {
        std::fill(dst.begin(), dst.end(), 0);
        RecvTarget t = CopyInto(dst);
        t.opens = &tag;
        // Inside the registrations, at an odd offset too.
        std::vector<uint8_t> msg(src.begin() + (biggest - n), src.end());
        const uint8_t* from = src.data() + (biggest - n);
        size_t sent = 0, got = 0;
        for (int round = 0; (sent < n || got < n) && round < 100000; ++round) {
          if (sent < n) {
            ASSERT_TRUE(z.pair->a->ProgressSend(from, n, &tag, &sent).ok());
          }
          if (got < n) {
            ASSERT_TRUE(z.pair->b->ProgressRecv(t, n, &got).ok());
          }
        }
        ASSERT_EQ(sent, n);
        ASSERT_EQ(got, n);
        EXPECT_EQ(0, memcmp(dst.data(), msg.data(), n)) << n;
        EXPECT_EQ(dst[n], 0) << "wrote past the message";
        if (n >= kMin) ++direct;
        EXPECT_EQ(z.pair->a->counters().direct_sent, direct) << n;
        EXPECT_EQ(z.pair->b->counters().direct_received, direct) << n;
        ++tag.seq;
      }
      // Two ranges, each registered with the NIC once and then reused.
      EXPECT_EQ(z.cache->counters().registered, 2u);
      EXPECT_EQ(z.pair->b->counters().declined, 0u);
    }
    EXPECT_EQ(EmulatedObjectsAlive(), 0);
  }
}

TEST(RdmaZeroCopy, UnregisteredOrReducedTargetsAreStaged) {
  {
    ZcPair z(2);
    const size_t n = 1 << 20;
    std::vector<uint8_t> src = Pattern(n, 9), plain(n), reg(n);
    z.Register(src);
    z.Register(reg);
    // The receiver's buffer is not registered: it declines.
    ASSERT_TRUE(Transfer(*z.pair, src, CopyInto(plain), nullptr).ok());
    EXPECT_EQ(plain, src);
    EXPECT_EQ(z.pair->b->counters().declined, 1u);
    // A reduction into a registered buffer cannot be written in place.
    const size_t count = n / 4;
    std::vector<float> local(count), incoming(count);
    for (size_t i = 0; i < count; ++i) {
      local[i] = static_cast<float>(i % 7);
      incoming[i] = static_cast<float>(i % 11);
    }
    memcpy(src.data(), incoming.data(), n);
    RecvTarget t = CopyInto(reg);
    t.reduce_with = reinterpret_cast<const uint8_t*>(local.data());
    t.datatype = batonFloat32;
    t.elem_size = 4;
    ASSERT_TRUE(Transfer(*z.pair, src, t, nullptr).ok());
    const auto* out = reinterpret_cast<const float*>(reg.data());
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(out[i], local[i] + incoming[i]) << i;
    EXPECT_EQ(z.pair->b->counters().declined, 2u);
    // An unregistered source never offers; the receiver's registration
    // changes nothing.
    std::vector<uint8_t> plain_src = Pattern(n, 4);
    ASSERT_TRUE(Transfer(*z.pair, plain_src, CopyInto(reg), nullptr).ok());
    EXPECT_EQ(reg, plain_src);
    EXPECT_EQ(z.pair->b->counters().declined, 2u);
    EXPECT_EQ(z.pair->a->counters().direct_sent, 0u);
  }
  EXPECT_EQ(EmulatedObjectsAlive(), 0);
}

TEST(RdmaZeroCopy, AnswersAfterTheSlotsCarriedItAllAreDropped) {
  {
    // Slots of 128 KiB: a 64 KiB message is all in its first chunk, done
    // before the receiver's yes comes; the next message must take its own
    // answer.
    ZcPair z(1, 128 << 10);
    const size_t n = 64 << 10;
    std::vector<uint8_t> src = Pattern(3 * n, 6), dst(3 * n);
    z.Register(src);
    z.Register(dst);
    for (int m = 0; m < 3; ++m) {
      std::vector<uint8_t> part(src.begin() + m * n, src.begin() + (m + 1) * n);
      RecvTarget t = CopyInto(dst);
      t.dst += m * n;
      size_t sent = 0, got = 0;
      for (int round = 0; (sent < n || got < n) && round < 1000; ++round) {
        if (sent < n) {
          ASSERT_TRUE(z.pair->a->ProgressSend(src.data() + m * n, n, nullptr, &sent).ok());
        }
        if (got < n) {
          ASSERT_TRUE(z.pair->b->ProgressRecv(t, n, &got).ok());
        }
      }
      ASSERT_EQ(got, n);
      EXPECT_EQ(0, memcmp(dst.data() + m * n, part.data(), n)) << m;
    }
    EXPECT_EQ(z.pair->a->counters().direct_sent, 0u);  // the first chunk was all
    EXPECT_EQ(z.pair->b->counters().declined, 0u);
  }
  EXPECT_EQ(EmulatedObjectsAlive(), 0);
}

TEST(RdmaZeroCopy, CacheIsBoundedAndReleasedAtDeregister) {
  {
    std::shared_ptr<Context> ctx = OpenEmulated();
    const int base = EmulatedObjectsAlive();
    Registrations regs;
    auto cache = std::make_shared<UserMrCache>(ctx, 2);
    UserMrCache::Watch(cache, &regs);
    std::vector<std::vector<uint8_t>> bufs(3, std::vector<uint8_t>(8192));
    std::vector<void*> handles(3);
    std::vector<UserRange> ranges(3);
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(regs.Register(bufs[i].data(), bufs[i].size(), &handles[i]).ok());
      ASSERT_TRUE(regs.Find(bufs[i].data() + 100, 50, &ranges[i]));
      EXPECT_EQ(ranges[i].begin, reinterpret_cast<uintptr_t>(bufs[i].data()));
    }
    EXPECT_FALSE(regs.Find(bufs[0].data() + 8000, 500, &ranges[0]));  // runs past the end
    std::shared_ptr<MemoryRegion> mr;
    ASSERT_TRUE(cache->Get(ranges[0], &mr).ok());
    ASSERT_TRUE(cache->Get(ranges[1], &mr).ok());
    ASSERT_TRUE(cache->Get(ranges[0], &mr).ok());  // 1 is now the oldest
    mr.reset();
    ASSERT_TRUE(cache->Get(ranges[2], &mr).ok());
    mr.reset();
    EXPECT_EQ(cache->size(), 2u);
    EXPECT_EQ(cache->counters().evicted, 1u);
    EXPECT_EQ(cache->counters().hits, 1u);
    EXPECT_EQ(EmulatedObjectsAlive(), base + 2);
    ASSERT_TRUE(cache->Get(ranges[1], &mr).ok());  // evicted: registered again
    EXPECT_EQ(cache->counters().registered, 4u);
    // Deregistering drops the NIC registration, once nobody holds it.
    ASSERT_TRUE(regs.Deregister(handles[1]).ok());
    EXPECT_EQ(cache->counters().released, 1u);
    EXPECT_EQ(EmulatedObjectsAlive(), base + 2);  // held by `mr`
    mr.reset();
    EXPECT_EQ(EmulatedObjectsAlive(), base + 1);
    for (int i : {0, 2}) ASSERT_TRUE(regs.Deregister(handles[i]).ok());
    EXPECT_EQ(cache->size(), 0u);
    EXPECT_EQ(EmulatedObjectsAlive(), base);
    EXPECT_EQ(regs.Deregister(handles[0]).code(), batonInvalidArgument);
  }
  EXPECT_EQ(EmulatedObjectsAlive(), 0);
}

// Starts an in-place message a -> b: the offer is answered and the data
// write is posted (both ends progressed `rounds` times).
void Start(ZcPair& z, const std::vector<uint8_t>& src, std::vector<uint8_t>& dst, int rounds) {
  RecvTarget t = CopyInto(dst);
  size_t sent = 0, got = 0;
  for (int i = 0; i < rounds; ++i) {
    (void)z.pair->a->ProgressSend(src.data(), src.size(), nullptr, &sent);
    (void)z.pair->b->ProgressRecv(t, src.size(), &got);
  }
}

TEST(RdmaZeroCopy, ErrorCompletionMidMessageFailsAndReleases) {
  {
    ZcPair z;
    const size_t n = 1 << 20;
    std::vector<uint8_t> src = Pattern(n, 1), dst(n);
    void* hs = z.Register(src);
    void* hd = z.Register(dst);
    // Writes: the offer's chunk (1), the answer (2) and the chunk's credit
    // (3), the in-place data (4): it fails.
    EmulatedFaults f;
    f.fail_write_at = 4;
    SetEmulatedFaults(f);
    Status st = Transfer(*z.pair, src, CopyInto(dst), nullptr);
    SetEmulatedFaults({});
    EXPECT_EQ(st.code(), batonSystemError) << st.message();
    EXPECT_NE(st.message().find("remote access error"), std::string::npos) << st.message();
    size_t sent = 0;
    EXPECT_FALSE(z.pair->a->ProgressSend(src.data(), n, nullptr, &sent).ok());  // sticks
    z.pair.reset();
    EXPECT_TRUE(z.regs.Deregister(hs).ok());
    EXPECT_TRUE(z.regs.Deregister(hd).ok());
    EXPECT_EQ(z.cache->size(), 0u);
  }
  EXPECT_EQ(EmulatedObjectsAlive(), 0);
}

TEST(RdmaZeroCopy, LostPeerMidMessageIsARemoteError) {
  {
    // The receiver answered, then went away before the data write.
    ZcPair z;
    const size_t n = 1 << 20;
    std::vector<uint8_t> src = Pattern(n, 2), dst(n);
    z.Register(src);
    z.Register(dst);
    EmulatedFaults hold;
    hold.hold_deliveries = true;
    SetEmulatedFaults(hold);
    Start(z, src, dst, 1);  // the offer and the first chunks are parked
    SetEmulatedFaults({});
    Start(z, src, dst, 1);  // delivered and answered; the sender has not seen it
    z.pair->b.reset();
    size_t sent = 0;
    Status st;
    for (int i = 0; i < 5 && st.ok(); ++i)
      st = z.pair->a->ProgressSend(src.data(), n, nullptr, &sent);
    EXPECT_EQ(st.code(), batonRemoteError) << st.message();
    EXPECT_LT(sent, n);
  }
  {
    // The sender, out of credits before any answer, whose peer closed.
    ZcPair z;
    const size_t n = 1 << 20;
    std::vector<uint8_t> src = Pattern(n, 3);
    z.Register(src);
    size_t sent = 0;
    ASSERT_TRUE(z.pair->a->ProgressSend(src.data(), n, nullptr, &sent).ok());
    z.pair->a_peer_closed.store(true);
    EXPECT_EQ(z.pair->a->ProgressSend(src.data(), n, nullptr, &sent).code(), batonRemoteError);
  }
  EXPECT_EQ(EmulatedObjectsAlive(), 0);
}

}  // namespace
}  // namespace baton::rdma
