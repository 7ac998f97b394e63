#include "base/log.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <strings.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "base/settings.h"

namespace baton {
namespace {

struct LogConfig {
  LogLevel level = LogLevel::kNone;
  unsigned subsys = kLogAll;
  char host[64] = "?";
};

unsigned ParseSubsys(const char* spec) {
  static const struct {
    const char* name;
    unsigned bit;
  } kNames[] = {{"INIT", kLogInit}, {"BOOTSTRAP", kLogBootstrap}, {"SHM", kLogShm},
                {"NET", kLogNet},   {"COLL", kLogColl},           {"ENV", kLogEnv},
                {"TUNING", kLogTuning}, {"ALL", kLogAll}};
  bool exclude = spec[0] == '^';
  if (exclude) ++spec;
  unsigned mask = 0;
  std::string s(spec);
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t comma = s.find(',', pos);
    if (comma == std::string::npos) comma = s.size();
    std::string tok = s.substr(pos, comma - pos);
    for (const auto& n : kNames)
      if (strcasecmp(tok.c_str(), n.name) == 0) mask |= n.bit;
    pos = comma + 1;
  }
  return exclude ? ~mask : mask;
}

const LogConfig& Config() {
  // Read once: logging is configured per process, like NCCL's.
  static const LogConfig config = [] {
    LogConfig c;
    const Settings& settings = ProcessSettings();
    if (!settings.debug.empty()) {
      const char* lvl = settings.debug.c_str();
      if (strcasecmp(lvl, "WARN") == 0)
        c.level = LogLevel::kWarn;
      else if (strcasecmp(lvl, "INFO") == 0)
        c.level = LogLevel::kInfo;
      else if (strcasecmp(lvl, "TRACE") == 0)
        c.level = LogLevel::kTrace;
      else if (strcasecmp(lvl, "VERSION") == 0)
        c.level = LogLevel::kNone;
    } else if (settings.debug_subsys != Settings{}.debug_subsys) {
      // Naming subsystems asks to see them.
      c.level = LogLevel::kInfo;
    }
    c.subsys = ParseSubsys(settings.debug_subsys.c_str());
    gethostname(c.host, sizeof(c.host) - 1);
    if (char* dot = strchr(c.host, '.')) *dot = '\0';
    return c;
  }();
  return config;
}

thread_local int tls_rank = -1;

}  // namespace

bool LogEnabled(LogLevel level, unsigned subsys) {
  const LogConfig& c = Config();
  // Warnings are always shown unless logging is off entirely; NCCL behaves
  // the same way, and a warning is what a user needs to see a failure cause.
  return level <= c.level && (level == LogLevel::kWarn || (c.subsys & subsys) != 0);
}

void SetLogRank(int rank) {
  tls_rank = rank;
}

void LogMessage(LogLevel level, unsigned, const char* file, int line, const char* fmt, ...) {
  const LogConfig& c = Config();
  char body[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(body, sizeof(body), fmt, ap);
  va_end(ap);
  const char* lvl = level == LogLevel::kWarn ? "WARN" : level == LogLevel::kInfo ? "INFO" : "TRACE";
  const char* base = strrchr(file, '/');
  base = base ? base + 1 : file;
  char rank[16] = "";
  if (tls_rank >= 0) snprintf(rank, sizeof(rank), " [%d]", tls_rank);
  // One fprintf per line so lines from threads do not interleave.
  if (level == LogLevel::kTrace) {
    fprintf(stderr, "%s:%d:%ld%s BATON %s %s:%d %s\n", c.host, getpid(), (long)syscall(SYS_gettid),
            rank, lvl, base, line, body);
  } else {
    fprintf(stderr, "%s:%d:%ld%s BATON %s %s\n", c.host, getpid(), (long)syscall(SYS_gettid), rank,
            lvl, body);
  }
}

}  // namespace baton
