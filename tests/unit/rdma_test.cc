// The RDMA transport above the verbs: HCA filters, device choice, the
// set-up hello, and RdmaChannel's protocol over the emulated verbs with
// injected faults; after each case no emulated object may be left.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "comm/config.h"
#include "topology/machine.h"
#include "transport/rdma/emulated_verbs.h"
#include "transport/rdma/rdma_channel.h"
#include "transport/rdma/rdma_setup.h"

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
      ASSERT_TRUE(ChooseDevice(devices, ParseHcaFilter("^=" + chosen.name), near, numa, &chosen,
                               &why));
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

// Two connected channels in this process, one emulated device.
struct Pair {
  std::unique_ptr<RdmaChannel> a, b;
  std::atomic<bool> a_peer_closed{false}, b_peer_closed{false};
  explicit Pair(RdmaChannel::Options options) {
    std::unique_ptr<Provider> provider = MakeEmulatedProvider();
    std::vector<DeviceInfo> devices;
    EXPECT_TRUE(provider->ListDevices(&devices).ok());
    std::unique_ptr<Context> ctx;
    EXPECT_TRUE(provider->Open(devices[0], -1, 0, &ctx).ok());
    std::shared_ptr<Context> shared(std::move(ctx));
    EXPECT_TRUE(RdmaChannel::Create(shared, options, 1, &a_peer_closed, &a).ok());
    EXPECT_TRUE(RdmaChannel::Create(shared, options, 0, &b_peer_closed, &b).ok());
    EXPECT_TRUE(a->Connect(b->endpoint()).ok());
    EXPECT_TRUE(b->Connect(a->endpoint()).ok());
  }
};

RdmaChannel::Options Small(int qps = 1) {
  RdmaChannel::Options o;
  o.slots = 4;
  o.slot_bytes = 4096;
  o.qps = qps;
  return o;
}

// Moves one message a -> b, alternating the two ends; false (with the
// status) on error or when neither moves for `max_idle` rounds.
Status Transfer(Pair& p, const std::vector<uint8_t>& src, const RecvTarget& target,
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

std::vector<uint8_t> Pattern(size_t n, int seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 131 + seed);
  return v;
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
    std::unique_ptr<Provider> provider = MakeEmulatedProvider();
    std::vector<DeviceInfo> devices;
    ASSERT_TRUE(provider->ListDevices(&devices).ok());
    std::unique_ptr<Context> ctx;
    ASSERT_TRUE(provider->Open(devices[0], -1, 0, &ctx).ok());
    std::shared_ptr<Context> shared(std::move(ctx));
    std::unique_ptr<RdmaChannel> ch;
    RdmaChannel::Options bad = Small();
    bad.slot_bytes = 1000;
    EXPECT_EQ(RdmaChannel::Create(shared, bad, 1, nullptr, &ch).code(), batonInvalidUsage);
    ASSERT_TRUE(RdmaChannel::Create(shared, Small(2), 1, nullptr, &ch).ok());
    RdmaEndpoint e = ch->endpoint();
    e.nqps = 1;
    EXPECT_EQ(ch->Connect(e).code(), batonInvalidUsage);
  }
  EXPECT_EQ(EmulatedObjectsAlive(), 0);
}

}  // namespace
}  // namespace baton::rdma
