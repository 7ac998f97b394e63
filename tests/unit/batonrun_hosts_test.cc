// batonrun's host lists (-H, --hostfile), rank placement and the wire to other hosts' batonruns.
#include <gtest/gtest.h>

#include "tools/batonrun/hosts.h"
#include "tools/batonrun/remote_launch.h"

namespace batonrun {
namespace {

std::vector<HostSlots> List(const std::string& text, bool expect_ok = true) {
  std::vector<HostSlots> hosts;
  std::string error;
  EXPECT_EQ(ParseHostList(text, &hosts, &error), expect_ok) << text << ": " << error;
  return hosts;
}

TEST(BatonrunHosts, HostListSlotsDefaultToOneAndRepeatsAddUp) {
  std::vector<HostSlots> hosts = List("node0:2,node1,node0:3,[fe80::1]:4,10.0.0.7");
  ASSERT_EQ(hosts.size(), 4u);
  EXPECT_EQ(hosts[0].name, "node0");
  EXPECT_EQ(hosts[0].slots, 5);
  EXPECT_EQ(hosts[1].name, "node1");
  EXPECT_EQ(hosts[1].slots, 1);
  EXPECT_EQ(hosts[2].name, "[fe80::1]");
  EXPECT_EQ(hosts[2].slots, 4);
  EXPECT_EQ(hosts[3].name, "10.0.0.7");
  EXPECT_EQ(hosts[3].slots, 1);
}

TEST(BatonrunHosts, HostListRejectsMalformedEntries) {
  for (const char* bad : {"", ",", "a,,b", "a:", "a:0", "a:-1", "a:x", "a:2:3", "-oProxy=x", "a b",
                          "a;rm", "[]", "fe80::1"}) {
    std::vector<HostSlots> hosts;
    std::string error;
    EXPECT_FALSE(ParseHostList(bad, &hosts, &error)) << bad;
    EXPECT_FALSE(error.empty()) << bad;
  }
}

TEST(BatonrunHosts, HostfileInOpenMpiFormat) {
  std::vector<HostSlots> hosts;
  std::string error;
  ASSERT_TRUE(
      ParseHostfile("# cluster\n\nnode0 slots=2\n  node1   slots=4 max_slots=8 # big\n"
                    "node2\nnode0 slots=1\n",
                    &hosts, &error))
      << error;
  ASSERT_EQ(hosts.size(), 3u);
  EXPECT_EQ(hosts[0].slots, 3);
  EXPECT_EQ(hosts[1].name, "node1");
  EXPECT_EQ(hosts[1].slots, 4);
  EXPECT_EQ(hosts[2].slots, 1);
}

TEST(BatonrunHosts, HostfileErrorsNameTheLine) {
  struct Case {
    const char* text;
    const char* message;
  } cases[] = {{"a slots=2\nb slots=0\n", "line 2"},
               {"a\nb cores=2\n", "line 2"},
               {"a slots\n", "line 1"},
               {"# nothing\n\n", "no host"}};
  for (const Case& c : cases) {
    std::vector<HostSlots> hosts;
    std::string error;
    EXPECT_FALSE(ParseHostfile(c.text, &hosts, &error)) << c.text;
    EXPECT_NE(error.find(c.message), std::string::npos) << c.text << ": " << error;
  }
}

TEST(BatonrunHosts, RanksFillEachHostsSlotsInOrder) {
  const std::vector<HostSlots> hosts = {{"a", 2}, {"b", 3}, {"c", 1}};
  std::vector<HostRanks> placement;
  std::string error;
  ASSERT_TRUE(PlaceRanks(hosts, 0, &placement, &error)) << error;
  ASSERT_EQ(placement.size(), 3u);
  EXPECT_EQ(placement[1].name, "b");
  EXPECT_EQ(placement[1].first_rank, 2);
  EXPECT_EQ(placement[1].num_ranks, 3);
  EXPECT_EQ(placement[2].first_rank, 5);

  placement.clear();
  ASSERT_TRUE(PlaceRanks(hosts, 3, &placement, &error)) << error;
  ASSERT_EQ(placement.size(), 2u);  // c gets no rank and is not started.
  EXPECT_EQ(placement[1].num_ranks, 1);

  placement.clear();
  EXPECT_FALSE(PlaceRanks(hosts, 7, &placement, &error));
  EXPECT_NE(error.find("6 slots"), std::string::npos) << error;
}

TEST(BatonrunHosts, LocalHostNames) {
  EXPECT_TRUE(IsLocalHost("localhost"));
  EXPECT_TRUE(IsLocalHost("127.0.0.1"));
  EXPECT_FALSE(IsLocalHost("node-that-is-not-this-one.example"));
}

TEST(BatonrunWire, ShellQuoteSurvivesQuotesAndAgentSplitsAtBlanks) {
  EXPECT_EQ(ShellQuote("it's $HOME"), "'it'\\''s $HOME'");
  EXPECT_EQ(ShellQuote(""), "''");
  EXPECT_EQ(SplitAgent("  ssh -p 2222\t-x "),
            (std::vector<std::string>{"ssh", "-p", "2222", "-x"}));
  EXPECT_TRUE(SplitAgent(" ").empty());
}

TEST(BatonrunWire, EnvironmentIsNulSeparatedWithAnEndMarker) {
  EXPECT_EQ(EncodeEnvironment({"A=1", "B=x\ny"}), std::string("A=1\0B=x\ny\0\0", 11));
  EXPECT_EQ(EncodeEnvironment({}), std::string(1, '\0'));
}

}  // namespace
}  // namespace batonrun
