#include "core/env.h"

#include <cerrno>
#include <cstdlib>

#include "core/log.h"

namespace baton {

std::optional<std::string> GetEnv(const char* name) {
  const char* v = getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

int64_t GetEnvInt(const char* name, int64_t default_value) {
  auto v = GetEnv(name);
  if (!v) return default_value;
  char* end = nullptr;
  errno = 0;
  long long parsed = strtoll(v->c_str(), &end, 0);
  if (errno != 0 || end == v->c_str() || *end != '\0') {
    BATON_WARN(kLogEnv, "ignoring %s=%s: not an integer", name, v->c_str());
    return default_value;
  }
  BATON_INFO(kLogEnv, "%s set to %lld", name, parsed);
  return parsed;
}

bool ParseSize(const std::string& text, uint64_t* out) {
  char* end = nullptr;
  errno = 0;
  unsigned long long n = strtoull(text.c_str(), &end, 0);
  if (errno != 0 || end == text.c_str() || text[0] == '-') return false;
  uint64_t mult = 1;
  switch (*end) {
    case '\0':
      break;
    case 'k':
    case 'K':
      mult = 1ull << 10;
      ++end;
      break;
    case 'm':
    case 'M':
      mult = 1ull << 20;
      ++end;
      break;
    case 'g':
    case 'G':
      mult = 1ull << 30;
      ++end;
      break;
    default:
      return false;
  }
  if (*end == 'B' || *end == 'b') ++end;
  if (*end != '\0') return false;
  if (n > UINT64_MAX / mult) return false;
  *out = n * mult;
  return true;
}

uint64_t GetEnvSize(const char* name, uint64_t default_value) {
  auto v = GetEnv(name);
  if (!v) return default_value;
  uint64_t parsed;
  if (!ParseSize(*v, &parsed)) {
    BATON_WARN(kLogEnv, "ignoring %s=%s: not a size", name, v->c_str());
    return default_value;
  }
  BATON_INFO(kLogEnv, "%s set to %llu", name, (unsigned long long)parsed);
  return parsed;
}

}  // namespace baton
