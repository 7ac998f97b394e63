// The RDMA transport above the verbs: HCA filters, device choice, the
// set-up hello, and RdmaChannel's protocol over the emulated verbs with
// injected faults; after each case no emulated object may be left.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "comm/config.h"
#include "topology/machine.h"
#include "transport/rdma/emulated_verbs.h"
#include "transport/rdma/rdma_channel.h"
#include "transport/rdma/rdma_setup.h"
#include "unit/rdma_pair.h"

namespace baton::rdma {
namespace {

TEST(RdmaHca, FilterSyntax) {
  DeviceInfo mlx0{"mlx5_0", 1}, mlx0p2{"mlx5_0", 2}, mlx1{"mlx5_1", 1}, mlx10{"mlx5_10", 1};
  HcaFilter all = ParseHcaFilter("");
  EXPECT_TRUE(HcaMatches(all, mlx0));
  HcaFilter prefix = ParseHcaFilter("mlx5_1");
  EXPECT_TRUE(HcaMatches(prefix, mlx1));
  EXPECT_TRUE(HcaMatches(prefix, mlx10));  // a prefix, as NCCL_IB_HCA
  EXPECT_FALSE(HcaMatches(prefix, mlx0));
  HcaFilter exact = ParseHcaFilter("=mlx5_1");
  EXPECT_TRUE(HcaMatches(exact, mlx1));
  EXPECT_FALSE(HcaMatches(exact, mlx10));
  HcaFilter port = ParseHcaFilter("mlx5_0:1,mlx5_1");
  EXPECT_TRUE(HcaMatches(port, mlx0));
  EXPECT_FALSE(HcaMatches(port, mlx0p2));
  EXPECT_TRUE(HcaMatches(port, mlx1));
  HcaFilter exclude = ParseHcaFilter("^mlx5_0");
  EXPECT_FALSE(HcaMatches(exclude, mlx0));
  EXPECT_TRUE(HcaMatches(exclude, mlx1));
  HcaFilter exclude_exact = ParseHcaFilter("^=mlx5_1");
  EXPECT_TRUE(exclude_exact.exclude && exclude_exact.exact);
  EXPECT_FALSE(HcaMatches(exclude_exact, mlx1));
  EXPECT_TRUE(HcaMatches(exclude_exact, mlx10));
  EXPECT_EQ(ParseHcaFilter("mlx5_0:x").entries[0].port, -1);
}

TEST(RdmaHca, ChoosesTheActiveDeviceNearestTheRank) {
  std::vector<DeviceInfo> devices = {{"mlx5_0", 1, true, false, 0, 100000},
                                     {"mlx5_1", 1, true, false, 1, 100000},
                                     {"mlx5_2", 1, false, false, 1, 200000}};
  DeviceInfo chosen;
  std::string why;
  ASSERT_TRUE(ChooseDevice(devices, ParseHcaFilter(""), {}, 1, &chosen, &why));
  EXPECT_EQ(chosen.name, "mlx5_1");  // mlx5_2 is on node 1 too but down
  ASSERT_TRUE(ChooseDevice(devices, ParseHcaFilter(""), {}, 0, &chosen, &why));
  EXPECT_EQ(chosen.name, "mlx5_0");
  ASSERT_TRUE(ChooseDevice(devices, ParseHcaFilter("^mlx5_0"), {}, 0, &chosen, &why));
  EXPECT_EQ(chosen.name, "mlx5_1");
  EXPECT_FALSE(ChooseDevice(devices, ParseHcaFilter("=mlx5_2"), {}, 0, &chosen, &why));
  EXPECT_NE(why.find("not active"), std::string::npos) << why;
  EXPECT_FALSE(ChooseDevice({}, ParseHcaFilter(""), {}, 0, &chosen, &why));
  EXPECT_EQ(why, "no RDMA device: ibv_get_device_list found none");
}

// The GPU's nearest NIC goes before the rank's NUMA node, NICs the model
// does not place go after those it does, and BATON_IB_HCA still rules.
TEST(RdmaHca, ChoosesTheNicNearestTheGpuFirst) {
  const std::vector<DeviceInfo> devices = {{"mlx5_0", 1, true, false, 0, 100000},
                                           {"mlx5_1", 1, true, false, 1, 100000},
                                           {"mlx5_2", 1, true, false, 1, 200000},
                                           {"mlx5_3", 1, false, false, 0, 100000}};
  const std::vector<NicPreference> near = {{"mlx5_3", 2}, {"mlx5_1", 102}, {"mlx5_0", 300}};
  DeviceInfo chosen;
  std::string why;
  // mlx5_3 is nearest but down; mlx5_1 next, though the rank's CPUs are on
  // node 0 and mlx5_2 is faster.
  ASSERT_TRUE(ChooseDevice(devices, ParseHcaFilter(""), near, 0, &chosen, &why));
  EXPECT_EQ(chosen.name, "mlx5_1");
  ASSERT_TRUE(ChooseDevice(devices, ParseHcaFilter("^mlx5_1"), near, 1, &chosen, &why));
  EXPECT_EQ(chosen.name, "mlx5_0");  // placed by the model: before mlx5_2 on node 1
  ASSERT_TRUE(ChooseDevice(devices, ParseHcaFilter("mlx5_2"), near, 0, &chosen, &why));
  EXPECT_EQ(chosen.name, "mlx5_2");
  // Preferences naming no listed device change nothing.
  ASSERT_TRUE(ChooseDevice(devices, ParseHcaFilter(""), {{"mlx4_0", 0}}, 0, &chosen, &why));
  EXPECT_EQ(chosen.name, "mlx5_0");
}

// From the hwloc export to the choice: on the DGX-2 (with its NICs) every
// rank takes the NIC on its GPU's switch, even where its CPUs sit on the
// other socket, and without a GPU the NUMA node decides as before.
TEST(RdmaHca, Dgx2RanksTakeTheNicOnTheirGpusSwitch) {
  Machine dgx;
  const std::string xml = std::string(BATON_TEST_DATA) + "/topologies/nvidiaDGX2-nics.xml";
  ASSERT_TRUE(LoadMachine(xml, &dgx).ok());
  std::vector<DeviceInfo> devices;
  for (int n = 0; n < 8; ++n)
    devices.push_back({"mlx5_" + std::to_string(n), 1, true, false, n < 4 ? 0 : 1, 100000});
  for (int g = 0; g < 16; ++g) {
    const std::vector<NicPreference> near = GpuNicPreferences(dgx, dgx.gpus[g].pci);
    ASSERT_EQ(near.size(), 8u);
    for (int numa : {-1, 0, 1}) {
      DeviceInfo chosen;
      std::string why;
      ASSERT_TRUE(ChooseDevice(devices, ParseHcaFilter(""), near, numa, &chosen, &why));
      EXPECT_EQ(chosen.name, "mlx5_" + std::to_string(g / 2)) << g << " " << numa;
      // Without that NIC: the other one below the same root port.
      ASSERT_TRUE(
          ChooseDevice(devices, ParseHcaFilter("^=" + chosen.name), near, numa, &chosen, &why));
      EXPECT_EQ(chosen.name, "mlx5_" + std::to_string((g / 2) ^ 1)) << g << " " << numa;
    }
  }
  EXPECT_TRUE(GpuNicPreferences(dgx, "0000:99:00.0").empty());
  // CommConfig::PlaceGpu reads the same model (BATON_TOPO_FILE) at creation.
  CommConfig config;
  config.topo_file = xml;
  config.PlaceGpu("0000:E7:00.0");
  EXPECT_EQ(config.transport.rdma.gpu_pci, "0000:E7:00.0");
  ASSERT_EQ(config.transport.rdma.gpu_nics.size(), 8u);
  EXPECT_EQ(config.transport.rdma.gpu_nics[0].name, "mlx5_7");
  config.PlaceGpu("");
  EXPECT_TRUE(config.transport.rdma.gpu_nics.empty());
  config.transport.rdma.mode = RdmaConfig::Mode::kOff;
  config.PlaceGpu("0000:e7:00.0");
  EXPECT_TRUE(config.transport.rdma.gpu_nics.empty());
}

TEST(RdmaSetup, ForcedWithoutADeviceIsAClearError) {
  RdmaConfig config;
  config.mode = RdmaConfig::Mode::kForce;
  std::string why;
  std::unique_ptr<Provider> real = MakeProvider(config, &why);
  if (real) {
    std::vector<DeviceInfo> devices;
    ASSERT_TRUE(real->ListDevices(&devices).ok());
    if (!devices.empty()) GTEST_SKIP() << "this machine has an RDMA device";
  }
  const Status st = CheckForcedRdma(config, -1);
  EXPECT_EQ(st.code(), batonSystemError);
  EXPECT_NE(st.message().find("BATON_TRANSPORT=ib: "), std::string::npos) << st.message();
  EXPECT_TRUE(st.message().find("no RDMA device") != std::string::npos ||
              st.message().find("built without libibverbs") != std::string::npos)
      << st.message();
  config.mode = RdmaConfig::Mode::kAuto;
  EXPECT_TRUE(CheckForcedRdma(config, -1).ok());
  EXPECT_FALSE(RdmaOffered(config, -1));  // auto: TCP, no error
  config.emulate = true;
  EXPECT_TRUE(RdmaOffered(config, -1));
}

TEST(RdmaSetup, HelloIsSealedAndAddressed) {
  UniqueIdData id{};
  id.comm_id = 42;
  for (int i = 0; i < kSecretBytes; ++i) id.secret[i] = static_cast<uint8_t>(i);
  RdmaEndpoint e;
  e.nqps = 2;
  e.slots = 8;
  e.slots_rkey = 7;
  std::vector<uint8_t> hello = MakeRdmaHello(id, 3, 1, e);
  RdmaEndpoint got;
  ASSERT_TRUE(CheckRdmaHello(id, 3, 1, hello, &got).ok());
  EXPECT_EQ(got.slots_rkey, 7u);
  EXPECT_FALSE(CheckRdmaHello(id, 2, 1, hello, &got).ok());  // from another rank's socket
  std::vector<uint8_t> tampered = hello;
  tampered[40] ^= 1;
  EXPECT_FALSE(CheckRdmaHello(id, 3, 1, tampered, &got).ok());
  UniqueIdData other = id;
  other.secret[0] ^= 1;
  EXPECT_FALSE(CheckRdmaHello(other, 3, 1, hello, &got).ok());
  hello.pop_back();
  EXPECT_FALSE(CheckRdmaHello(id, 3, 1, hello, &got).ok());
}

TEST(RdmaChannelTest, CopiesMessagesOfEverySize) {
  for (int qps : {1, 3}) {
    {
      Pair p(Small(qps));
      CallDescriptor tag;
      tag.seq = 1;
      tag.count = 5;
      for (size_t n : {size_t(1), size_t(63), size_t(4096 - 64), size_t(4096), size_t(4097),
                       size_t(100000), size_t(1) << 20}) {
        std::vector<uint8_t> src = Pattern(n, static_cast<int>(n)), dst(n, 0);
        RecvTarget t;
        t.dst = dst.data();
        t.opens = &tag;
        ASSERT_TRUE(Transfer(p, src, t, &tag).ok()) << n;
        EXPECT_EQ(src, dst) << n << " bytes, " << qps << " QPs";
        ++tag.seq;
      }
    }
    EXPECT_EQ(EmulatedObjectsAlive(), 0);
  }
}

TEST(RdmaChannelTest, ReducesIntoTheTarget) {
  {
    Pair p(Small());
    const size_t count = 10000;
    std::vector<float> incoming(count), local(count), out(count);
    for (size_t i = 0; i < count; ++i) {
      incoming[i] = static_cast<float>(i % 97);
      local[i] = static_cast<float>(i % 13);
    }
    std::vector<uint8_t> src(count * 4);
    memcpy(src.data(), incoming.data(), src.size());
    RecvTarget t;
    t.dst = reinterpret_cast<uint8_t*>(out.data());
    t.reduce_with = reinterpret_cast<const uint8_t*>(local.data());
    t.datatype = batonFloat32;
    t.op = batonSum;
    t.elem_size = 4;
    ASSERT_TRUE(Transfer(p, src, t, nullptr).ok());
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(out[i], incoming[i] + local[i]) << i;
  }
  EXPECT_EQ(EmulatedObjectsAlive(), 0);
}

TEST(RdmaChannelTest, MismatchedCallsAndSizesAreErrors) {
  {
    Pair p(Small());
    CallDescriptor mine, theirs;
    mine.seq = 1;
    theirs.seq = 2;
    std::vector<uint8_t> src = Pattern(5000, 1), dst(5000);
    RecvTarget t;
    t.dst = dst.data();
    t.opens = &mine;
    Status st = Transfer(p, src, t, &theirs);
    EXPECT_EQ(st.code(), batonInvalidUsage);
    EXPECT_EQ(p.b->mismatch().kind, CallMismatch::Kind::kOtherCall);
  }
  {
    Pair p(Small());
    std::vector<uint8_t> src = Pattern(5000, 1), dst(6000);
    RecvTarget t;
    t.dst = dst.data();
    size_t sent = 0, got = 0;
    ASSERT_TRUE(p.a->ProgressSend(src.data(), src.size(), nullptr, &sent).ok());
    EXPECT_EQ(p.b->ProgressRecv(t, 6000, &got).code(), batonInvalidUsage);
    EXPECT_EQ(p.b->mismatch().kind, CallMismatch::Kind::kSize);
    EXPECT_EQ(p.b->mismatch().their_bytes, 5000u);
  }
  EXPECT_EQ(EmulatedObjectsAlive(), 0);
}

TEST(RdmaChannelTest, ErrorCompletionFailsTheChannel) {
  {
    Pair p(Small());
    EmulatedFaults f;
    f.fail_write_at = 3;
    SetEmulatedFaults(f);
    std::vector<uint8_t> src = Pattern(50000, 2), dst(50000);
    RecvTarget t;
    t.dst = dst.data();
    Status st = Transfer(p, src, t, nullptr);
    SetEmulatedFaults({});
    EXPECT_EQ(st.code(), batonSystemError) << st.message();
    EXPECT_NE(st.message().find("remote access error"), std::string::npos) << st.message();
    // The failure sticks.
    size_t sent = 0;
    EXPECT_FALSE(p.a->ProgressSend(src.data(), src.size(), nullptr, &sent).ok());
  }
  EXPECT_EQ(EmulatedObjectsAlive(), 0);
}

TEST(RdmaChannelTest, LostPeerIsARemoteError) {
  {
    Pair p(Small());
    // The peer's queue pairs go away: the next write's retries run out.
    p.b.reset();
    std::vector<uint8_t> src = Pattern(50000, 3);
    size_t sent = 0;
    Status st;
    for (int i = 0; i < 3 && st.ok(); ++i)
      st = p.a->ProgressSend(src.data(), src.size(), nullptr, &sent);
    EXPECT_EQ(st.code(), batonRemoteError) << st.message();
  }
  {
    // A receiver whose peer closed its control socket stops waiting.
    Pair p(Small());
    p.b_peer_closed.store(true);
    std::vector<uint8_t> dst(100);
    RecvTarget t;
    t.dst = dst.data();
    size_t got = 0;
    EXPECT_EQ(p.b->ProgressRecv(t, 100, &got).code(), batonRemoteError);
  }
  EXPECT_EQ(EmulatedObjectsAlive(), 0);
}

TEST(RdmaChannelTest, CreditStallWaitsThenCompletes) {
  {
    Pair p(Small());
    std::vector<uint8_t> src = Pattern(60000, 5), dst(60000);
    RecvTarget t;
    t.dst = dst.data();
    EmulatedFaults f;
    f.hold_deliveries = true;
    SetEmulatedFaults(f);
    // Nothing arrives, so no credit returns: the sender fills its 4 slots
    // and stalls without error.
    size_t sent = 0, got = 0;
    for (int i = 0; i < 50; ++i) {
      ASSERT_TRUE(p.a->ProgressSend(src.data(), src.size(), nullptr, &sent).ok());
      ASSERT_TRUE(p.b->ProgressRecv(t, src.size(), &got).ok());
    }
    EXPECT_LE(sent, 4u * 4096);
    EXPECT_EQ(got, 0u);
    WaitSet ws;
    p.a->AddWaitFds(true, 1, &ws);
    EXPECT_EQ(ws.tcp.size(), 2u);
    SetEmulatedFaults({});
    ASSERT_TRUE(Transfer(p, src, t, nullptr).ok());
    EXPECT_EQ(src, dst);
  }
  EXPECT_EQ(EmulatedObjectsAlive(), 0);
}

// Each end on its own thread, both sending and receiving, as two ranks'
// sendrecv does: credits then come back while a sender is still posting
// chunks of a long message, and every credit takes one of its posted
// receives. A sender that went on posting while credits kept coming, without
// polling, ran its receive queue dry ("receiver not ready", the emulated
// RNR) once a message had about 3 x slots chunks; it polls every `slots`
// chunks now, so the receive depth holds.
TEST(RdmaChannelTest, LongMessagesBothWaysAtOnceNeverRunOutOfReceives) {
  for (int qps : {1, 2}) {
    {
      // Slots large enough that the peer credits one while a chunk is copied.
      RdmaChannel::Options options = Small(qps);
      options.slot_bytes = 256 << 10;
      Pair p(options);
      constexpr size_t kBytes = 16 << 20;  // 64 chunks through 4 slots
      for (int round = 0; round < 3; ++round) {
        auto run = [&](RdmaChannel* ch, int seed, Status* st, std::vector<uint8_t>* dst) {
          const std::vector<uint8_t> src = Pattern(kBytes, seed);
          dst->assign(kBytes, 0);
          RecvTarget t;
          t.dst = dst->data();
          size_t sent = 0, got = 0;
          const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
          while ((sent < kBytes || got < kBytes) && st->ok()) {
            if (sent < kBytes) *st = ch->ProgressSend(src.data(), kBytes, nullptr, &sent);
            if (st->ok() && got < kBytes) *st = ch->ProgressRecv(t, kBytes, &got);
            if (std::chrono::steady_clock::now() > give_up) *st = TimeoutError("no progress");
          }
        };
        Status st_a, st_b;
        std::vector<uint8_t> to_a, to_b;
        std::thread other([&] { run(p.b.get(), 2 * round + 1, &st_b, &to_b); });
        run(p.a.get(), 2 * round, &st_a, &to_a);
        other.join();
        ASSERT_TRUE(st_a.ok()) << st_a.message() << ", " << qps << " QPs";
        ASSERT_TRUE(st_b.ok()) << st_b.message() << ", " << qps << " QPs";
        EXPECT_EQ(to_b, Pattern(kBytes, 2 * round)) << qps << " QPs";
        EXPECT_EQ(to_a, Pattern(kBytes, 2 * round + 1)) << qps << " QPs";
      }
    }
    EXPECT_EQ(EmulatedObjectsAlive(), 0);
  }
}

TEST(RdmaChannelTest, ReorderedCompletionsKeepTheOrder) {
  {
    Pair p(Small(3));
    EmulatedFaults f;
    f.reverse_completions = true;
    SetEmulatedFaults(f);
    for (int round = 0; round < 5; ++round) {
      std::vector<uint8_t> src = Pattern(70000 + round, round), dst(src.size());
      RecvTarget t;
      t.dst = dst.data();
      Status st = Transfer(p, src, t, nullptr);
      ASSERT_TRUE(st.ok()) << st.message();
      EXPECT_EQ(src, dst);
    }
    SetEmulatedFaults({});
  }
  EXPECT_EQ(EmulatedObjectsAlive(), 0);
}

TEST(RdmaChannelTest, BadOptionsAndLayoutsAreRefused) {
  {
    std::shared_ptr<Context> shared = OpenEmulated();
    ASSERT_NE(shared, nullptr);
    std::unique_ptr<RdmaChannel> ch;
    RdmaChannel::Options bad = Small();
    bad.slot_bytes = 1000;
    EXPECT_EQ(RdmaChannel::Create(shared, bad, 1, nullptr, &ch).code(), batonInvalidUsage);
    for (int every : {0, kMaxSignalEvery + 1}) {
      bad = Small();
      bad.signal_every = every;
      EXPECT_EQ(RdmaChannel::Create(shared, bad, 1, nullptr, &ch).code(), batonInvalidUsage);
    }
    bad = Small();
    bad.inline_bytes = -1;
    EXPECT_EQ(RdmaChannel::Create(shared, bad, 1, nullptr, &ch).code(), batonInvalidUsage);
    ASSERT_TRUE(RdmaChannel::Create(shared, Small(2), 1, nullptr, &ch).ok());
    RdmaEndpoint e = ch->endpoint();
    e.nqps = 1;
    EXPECT_EQ(ch->Connect(e).code(), batonInvalidUsage);
  }
  EXPECT_EQ(EmulatedObjectsAlive(), 0);
}

// ---- Inline and unsignaled writes -------------------------------------------

// The emulation keeps the send queue as hardware does: unsignaled writes
// complete silently and hold their entries until a later signaled write's
// completion is polled; inline writes take their bytes at post time.
TEST(RdmaEmulation, SendQueueEntriesAndInlineWrites) {
  {
    std::unique_ptr<Context> ctx = OpenEmulated();
    ASSERT_NE(ctx, nullptr);
    std::unique_ptr<CompletionQueue> cq_a, cq_b;
    ASSERT_TRUE(ctx->CreateCq(64, &cq_a).ok());
    ASSERT_TRUE(ctx->CreateCq(64, &cq_b).ok());
    std::unique_ptr<QueuePair> a, b;
    ASSERT_TRUE(ctx->CreateQp(cq_a.get(), 4, 32, 1000, &a).ok());
    ASSERT_TRUE(ctx->CreateQp(cq_b.get(), 4, 32, 0, &b).ok());
    EXPECT_EQ(a->max_inline(), 512);  // granted less than asked
    EXPECT_EQ(b->max_inline(), 0);
    ASSERT_TRUE(a->Connect(b->address()).ok());
    ASSERT_TRUE(b->Connect(a->address()).ok());
    ASSERT_TRUE(b->PostRecvs(7, 32).ok());
    std::unique_ptr<MemoryRegion> src, dst;
    ASSERT_TRUE(ctx->AllocRegistered(4096, &src).ok());
    ASSERT_TRUE(ctx->AllocRegistered(4096, &dst).ok());
    const uint64_t to = reinterpret_cast<uint64_t>(dst->data());
    auto write = [&](uint64_t wr_id, const uint8_t* from, size_t len, uint64_t offset,
                     bool signaled, bool inline_data) {
      WriteFlags f;
      f.with_imm = true;
      f.imm = static_cast<uint32_t>(wr_id);
      f.signaled = signaled;
      f.inline_data = inline_data;
      return a->PostWrite(wr_id, *src, from, len, to + offset, dst->rkey(), f);
    };
    auto poll = [](CompletionQueue* cq, std::vector<Completion>* out) {
      Completion batch[16];
      int got = 0;
      EXPECT_TRUE(cq->Poll(batch, 16, &got).ok());
      out->assign(batch, batch + got);
      return got;
    };
    std::vector<Completion> got;
    // Three unsignaled writes and a signaled one fill the queue of 4.
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(write(i, src->data(), 64, 64 * i, false, false).ok());
    ASSERT_TRUE(write(3, src->data(), 64, 192, true, false).ok());
    EXPECT_EQ(write(4, src->data(), 64, 256, true, false).code(), batonSystemError);
    EXPECT_EQ(poll(cq_a.get(), &got), 1);  // the signaled one alone
    EXPECT_EQ(got[0].wr_id, 3u);
    EXPECT_TRUE(got[0].ok);
    EXPECT_EQ(poll(cq_b.get(), &got), 4);  // every write with immediate arrives
    for (int i = 0; i < 4; ++i) EXPECT_EQ(got[i].imm, static_cast<uint32_t>(i));
    // Its completion freed all four entries; unsignaled writes alone free none.
    for (int i = 0; i < 4; ++i) ASSERT_TRUE(write(10 + i, src->data(), 8, 0, false, false).ok());
    EXPECT_EQ(poll(cq_a.get(), &got), 0);
    EXPECT_EQ(write(14, src->data(), 8, 0, true, false).code(), batonSystemError);
    EXPECT_EQ(poll(cq_b.get(), &got), 4);

    // Inline: the bytes as posted, from memory no region holds; others are
    // read when the NIC gets to them.
    ASSERT_TRUE(ctx->CreateQp(cq_a.get(), 8, 32, 64, &a).ok());
    ASSERT_TRUE(ctx->CreateQp(cq_b.get(), 8, 32, 0, &b).ok());
    ASSERT_TRUE(a->Connect(b->address()).ok());
    ASSERT_TRUE(b->Connect(a->address()).ok());
    ASSERT_TRUE(b->PostRecvs(7, 32).ok());
    EmulatedFaults hold;
    hold.hold_deliveries = true;
    SetEmulatedFaults(hold);
    uint8_t stack[64];
    memset(stack, 'a', sizeof(stack));
    memset(src->data(), 'x', 64);
    ASSERT_TRUE(write(20, stack, 64, 0, false, true).ok());
    ASSERT_TRUE(write(21, src->data(), 64, 64, true, false).ok());
    EXPECT_EQ(write(22, stack, 65, 0, true, true).code(), batonInvalidUsage);  // over 64
    memset(stack, 'b', sizeof(stack));
    memset(src->data(), 'y', 64);
    SetEmulatedFaults({});
    EXPECT_EQ(poll(cq_a.get(), &got), 1);
    EXPECT_EQ(got[0].wr_id, 21u);
    EXPECT_EQ(poll(cq_b.get(), &got), 2);
    EXPECT_EQ(std::string(reinterpret_cast<char*>(dst->data()), 64), std::string(64, 'a'));
    EXPECT_EQ(std::string(reinterpret_cast<char*>(dst->data()) + 64, 64), std::string(64, 'y'));

    // A failed unsignaled write completes anyway, and what follows flushes.
    EmulatedFaults fail;
    fail.fail_write_at = 1;
    SetEmulatedFaults(fail);
    ASSERT_TRUE(write(30, src->data(), 8, 0, false, false).ok());
    ASSERT_TRUE(write(31, src->data(), 8, 0, false, true).ok());
    SetEmulatedFaults({});
    EXPECT_EQ(poll(cq_a.get(), &got), 2);
    EXPECT_EQ(got[0].wr_id, 30u);
    EXPECT_FALSE(got[0].ok);
    EXPECT_FALSE(got[1].ok);
    EXPECT_NE(got[1].error.find("Flushed"), std::string::npos) << got[1].error;
    a.reset();
    b.reset();
  }
  EXPECT_EQ(EmulatedObjectsAlive(), 0);
}

// The channel posts credits and small messages inline and signals one
// write in `signal_every` per queue pair; every byte still arrives, and
// with the default interval a failing unsignaled write fails the channel.
TEST(RdmaChannelTest, InlineAndUnsignaledWrites) {
  for (int every : {1, 4, kMaxSignalEvery}) {
    for (int qps : {1, 2}) {
      {
        RdmaChannel::Options o = Small(qps);
        o.signal_every = every;
        o.inline_bytes = 128;
        Pair p(o);
        CallDescriptor tag;
        tag.seq = 1;
        // Small messages: header and data in one inline write, credits too.
        for (size_t n = 1; n <= 64; ++n) {
          std::vector<uint8_t> src = Pattern(n, static_cast<int>(n)), dst(n, 0);
          RecvTarget t;
          t.dst = dst.data();
          t.opens = &tag;
          ASSERT_TRUE(Transfer(p, src, t, &tag).ok()) << n;
          ASSERT_EQ(src, dst) << n;
          ++tag.seq;
        }
        const RdmaChannel::Counters small_a = p.a->counters(), small_b = p.b->counters();
        EXPECT_EQ(small_a.writes, 64u);
        EXPECT_EQ(small_a.inlined, 64u);
        EXPECT_EQ(small_b.writes, 64u);  // one credit a chunk
        EXPECT_EQ(small_b.inlined, 64u);
        // One in `every` per queue pair (round-robin: 64 / qps writes each).
        const uint64_t per_qp = 64 / qps;
        EXPECT_EQ(small_a.signaled, qps * (per_qp / every)) << every << " " << qps;
        EXPECT_EQ(small_b.signaled, qps * (per_qp / every)) << every << " " << qps;
        // Large: chunks too big to inline, far more writes than the
        // interval; only credits go inline.
        // 64 + 4032 bytes, then 255 full slots: no small tail to inline.
        const size_t big_bytes = (1 << 20) - 64;
        std::vector<uint8_t> big = Pattern(big_bytes, 3), out(big_bytes, 0);
        RecvTarget t;
        t.dst = out.data();
        t.opens = &tag;
        ASSERT_TRUE(Transfer(p, big, t, &tag).ok());
        ASSERT_EQ(big, out);
        const RdmaChannel::Counters a = p.a->counters(), b = p.b->counters();
        const uint64_t chunks = a.writes - small_a.writes;
        EXPECT_EQ(chunks, 256u);
        EXPECT_EQ(a.inlined, small_a.inlined);
        EXPECT_EQ(b.inlined, b.writes);
        EXPECT_EQ(b.writes - small_b.writes, chunks);
        EXPECT_LE(a.completed, a.signaled);
        EXPECT_GE(a.signaled, a.writes / every - qps);
        EXPECT_LE(a.signaled, a.writes / every + qps);
      }
      EXPECT_EQ(EmulatedObjectsAlive(), 0);
    }
  }
  {
    Pair p(Small());
    EmulatedFaults f;
    f.fail_write_at = 2;  // unsignaled with the default interval
    SetEmulatedFaults(f);
    std::vector<uint8_t> src = Pattern(50000, 2), dst(50000);
    RecvTarget t;
    t.dst = dst.data();
    const Status st = Transfer(p, src, t, nullptr);
    SetEmulatedFaults({});
    EXPECT_EQ(st.code(), batonSystemError) << st.message();
    EXPECT_NE(st.message().find("injected"), std::string::npos) << st.message();
  }
  EXPECT_EQ(EmulatedObjectsAlive(), 0);
}

}  // namespace
}  // namespace baton::rdma
