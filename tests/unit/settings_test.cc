// The settings table (base/settings.h): every BATON_* variable is declared
// there once, parsed with its type, falls back to its default when
// malformed, and is listed in README.md's table of variables; BATON_TIMEOUT=0
// means "forever" for every wait.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "base/deadline.h"
#include "base/settings.h"
#include "comm/config.h"

namespace baton {
namespace {

// Sets (or with nullptr unsets) a variable for the scope of one test.
class ScopedVariable {
 public:
  ScopedVariable(const char* name, const char* value) : name_(name) {
    if (const char* old = getenv(name)) old_ = old;
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedVariable() {
    if (old_.empty()) {
      unsetenv(name_);
    } else {
      setenv(name_, old_.c_str(), 1);
    }
  }

 private:
  const char* name_;
  std::string old_;
};

TEST(SettingsTest, NamesAreUniqueAndDocumented) {
  std::set<std::string> names;
  for (const SettingInfo& s : AllSettings()) {
    EXPECT_TRUE(names.insert(s.name).second) << s.name << " is declared twice";
    EXPECT_EQ(std::string(s.name).rfind("BATON_", 0), 0u) << s.name;
    EXPECT_GT(std::string(s.doc).size(), 10u) << s.name << " has no doc line";
  }
  EXPECT_TRUE(names.count("BATON_TIMEOUT"));
  EXPECT_EQ(std::string(SettingName::timeout), "BATON_TIMEOUT");
}

// README.md's table of variables names every variable of the table, and
// nothing else.
TEST(SettingsTest, ReadmeListsEveryVariable) {
  std::ifstream readme(BATON_README);
  ASSERT_TRUE(readme.good()) << "cannot read " << BATON_README;
  std::set<std::string> listed;
  std::string line;
  while (std::getline(readme, line)) {
    // Rows of the variables table start with "| `BATON_...`"; a row may
    // name several ("`BATON_RANK`, `BATON_WORLD_SIZE`").
    if (line.rfind("| `BATON_", 0) != 0) continue;
    const std::string first_cell = line.substr(1, line.find('|', 1) - 1);
    size_t pos = 0;
    while ((pos = first_cell.find("`BATON_", pos)) != std::string::npos) {
      const size_t end = first_cell.find('`', pos + 1);
      listed.insert(first_cell.substr(pos + 1, end - pos - 1));
      pos = end + 1;
    }
  }
  std::set<std::string> declared;
  for (const SettingInfo& s : AllSettings()) declared.insert(s.name);
  for (const std::string& name : declared)
    EXPECT_TRUE(listed.count(name)) << name << " is missing from README.md's table";
  for (const std::string& name : listed)
    EXPECT_TRUE(declared.count(name)) << name << " is in README.md but not in base/settings.h";
}

TEST(SettingsTest, DefaultsWhenUnset) {
  ScopedVariable timeout("BATON_TIMEOUT", nullptr);
  ScopedVariable buffsize("BATON_BUFFSIZE", nullptr);
  ScopedVariable cma("BATON_CMA", nullptr);
  ScopedVariable transport("BATON_TRANSPORT", nullptr);
  const Settings s = ReadSettings(/*log=*/false);
  EXPECT_EQ(s.timeout, 300);
  EXPECT_EQ(s.buffsize, 4u << 20);
  EXPECT_FALSE(s.cma);
  EXPECT_EQ(s.transport, "auto");
}

TEST(SettingsTest, ParsesEachType) {
  ScopedVariable timeout("BATON_TIMEOUT", "12");
  ScopedVariable buffsize("BATON_BUFFSIZE", "2M");
  ScopedVariable cma("BATON_CMA", "1");
  ScopedVariable algo("BATON_ALGO", "allreduce:ring");
  const Settings s = ReadSettings(/*log=*/false);
  EXPECT_EQ(s.timeout, 12);
  EXPECT_EQ(s.buffsize, 2u << 20);
  EXPECT_TRUE(s.cma);
  EXPECT_EQ(s.algo, "allreduce:ring");
}

TEST(SettingsTest, MalformedValuesFallBackToTheDefault) {
  ScopedVariable timeout("BATON_TIMEOUT", "ten");
  ScopedVariable buffsize("BATON_BUFFSIZE", "4Q");
  ScopedVariable cma("BATON_CMA", "yes");
  const Settings s = ReadSettings(/*log=*/false);
  EXPECT_EQ(s.timeout, 300);
  EXPECT_EQ(s.buffsize, 4u << 20);
  EXPECT_FALSE(s.cma);
}

// Each snapshot reads the environment as it is then.
TEST(SettingsTest, EachSnapshotSeesTheEnvironmentOfItsTime) {
  ScopedVariable first("BATON_ALGO", "ring");
  EXPECT_EQ(ReadSettings(false).algo, "ring");
  ScopedVariable second("BATON_ALGO", "tree");
  EXPECT_EQ(ReadSettings(false).algo, "tree");
}

TEST(SettingsTest, ZeroTimeoutMeansForeverEverywhere) {
  Settings s;
  s.timeout = 0;
  EXPECT_EQ(TimeoutSeconds(s), kForeverSeconds);
  s.timeout = -3;
  EXPECT_EQ(TimeoutSeconds(s), kForeverSeconds);
  s.timeout = 7;
  EXPECT_EQ(TimeoutSeconds(s), 7.0);
  // The communicator's waits take the same value.
  s.timeout = 0;
  CommConfig config;
  ASSERT_TRUE(CommConfig::FromSettings(s, &config).ok());
  EXPECT_EQ(config.timeout_s, kForeverSeconds);
  // A deadline that far out is still in the future a year from now.
  EXPECT_GT(DeadlineIn(TimeoutSeconds(s)), Clock::now() + std::chrono::hours(24 * 364));
}

TEST(SettingsTest, SizesAndIntegers) {
  uint64_t size = 0;
  EXPECT_TRUE(ParseSize("4K", &size));
  EXPECT_EQ(size, 4096u);
  EXPECT_TRUE(ParseSize("1GB", &size));
  EXPECT_EQ(size, 1u << 30);
  EXPECT_FALSE(ParseSize("-1", &size));
  EXPECT_FALSE(ParseSize("", &size));
  EXPECT_FALSE(ParseSize("99999999999999999999G", &size));
  int64_t n = 0;
  EXPECT_TRUE(ParseInt("-5", &n));
  EXPECT_EQ(n, -5);
  EXPECT_TRUE(ParseInt("0x10", &n));
  EXPECT_EQ(n, 16);
  EXPECT_FALSE(ParseInt("5x", &n));
}

TEST(CommConfigTest, ClampsAndRejects) {
  Settings s;
  s.buffsize = 1;
  s.chunksize = 1;
  s.nsocks_perpeer = 99;
  s.transport = "tcp";
  CommConfig config;
  ASSERT_TRUE(CommConfig::FromSettings(s, &config).ok());
  EXPECT_EQ(config.transport.buffsize, 64u << 10);
  EXPECT_EQ(config.chunk_bytes, 4096u);
  EXPECT_EQ(config.transport.tcp_sockets, kMaxSocketsPerPeer);
  EXPECT_TRUE(config.transport.force_tcp);
  s.algo = "allreduce:nosuch";
  const Status st = CommConfig::FromSettings(s, &config);
  EXPECT_EQ(st.code(), batonInvalidUsage);
  EXPECT_NE(st.message().find("nosuch"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace baton
