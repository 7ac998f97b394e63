// Logging with NCCL's conventions: BATON_DEBUG=WARN|INFO|TRACE selects the
// level, BATON_DEBUG_SUBSYS=INIT,NET,SHM,COLL,TUNING (or ALL, ^X to exclude)
// the subsystems (naming them without BATON_DEBUG implies INFO); every line
// starts with "host:pid:tid [rank] BATON LEVEL".
#pragma once

#include <cstdarg>

namespace baton {

enum class LogLevel { kNone = 0, kWarn = 1, kInfo = 2, kTrace = 3 };

// Subsystems, a bit each, so BATON_DEBUG_SUBSYS can filter.
enum LogSubsys : unsigned {
  kLogInit = 1u << 0,
  kLogBootstrap = 1u << 1,
  kLogShm = 1u << 2,
  kLogNet = 1u << 3,
  kLogColl = 1u << 4,
  kLogEnv = 1u << 5,
  kLogTuning = 1u << 6,
  kLogAll = ~0u,
};

// True when a message at (level, subsys) would be printed; cheap, so callers
// can skip building expensive messages.
bool LogEnabled(LogLevel level, unsigned subsys);

// Sets the rank shown in this thread's log lines (-1: none).
void SetLogRank(int rank);

void LogMessage(LogLevel level, unsigned subsys, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 5, 6)));

}  // namespace baton

#define BATON_LOG(level, subsys, ...)                                      \
  do {                                                                     \
    if (::baton::LogEnabled(level, subsys))                                \
      ::baton::LogMessage(level, subsys, __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)
#define BATON_WARN(subsys, ...) BATON_LOG(::baton::LogLevel::kWarn, subsys, __VA_ARGS__)
#define BATON_INFO(subsys, ...) BATON_LOG(::baton::LogLevel::kInfo, subsys, __VA_ARGS__)
#define BATON_TRACE(subsys, ...) BATON_LOG(::baton::LogLevel::kTrace, subsys, __VA_ARGS__)
