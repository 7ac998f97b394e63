#include "base/settings.h"

#include <cerrno>
#include <cstdlib>
#include <string>

#include "base/deadline.h"
#include "base/log.h"

namespace baton {
namespace {

constexpr SettingInfo kSettings[] = {
#define BATON_SETTING_INFO(member, name, type, default_value, doc) \
  {name, #type, #default_value, doc},
    BATON_SETTINGS(BATON_SETTING_INFO)
#undef BATON_SETTING_INFO
};

// The raw value of a variable, or nullopt when unset or empty.
std::optional<std::string> RawValue(const char* name) {
  const char* v = getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

// One parser per type: leaves *out alone (the default) when the variable is
// unset or malformed; with `log`, says what it did.
void Parse(const char* name, bool /*log*/, std::string* out) {
  if (auto v = RawValue(name)) *out = *v;
}

// Integers and sizes: `parse` reads the text, `what` names the type in the
// warning.
template <typename T>
void ParseNumber(const char* name, bool log, bool (*parse)(const std::string&, T*),
                 const char* what, T* out) {
  auto v = RawValue(name);
  if (!v) return;
  T parsed;
  if (!parse(*v, &parsed)) {
    if (log) BATON_WARN(kLogEnv, "ignoring %s=%s: not %s", name, v->c_str(), what);
    return;
  }
  if (log) BATON_INFO(kLogEnv, "%s set to %s", name, std::to_string(parsed).c_str());
  *out = parsed;
}

void Parse(const char* name, bool log, int64_t* out) {
  ParseNumber(name, log, ParseInt, "an integer", out);
}

void Parse(const char* name, bool log, uint64_t* out) {
  ParseNumber(name, log, ParseSize, "a size", out);
}

void Parse(const char* name, bool log, bool* out) {
  int64_t value = *out ? 1 : 0;
  Parse(name, log, &value);
  *out = value != 0;
}

}  // namespace

std::span<const SettingInfo> AllSettings() {
  return kSettings;
}

Settings ReadSettings(bool log) {
  Settings s;
#define BATON_SETTING_READ(member, name, type, default_value, doc) Parse(name, log, &s.member);
  BATON_SETTINGS(BATON_SETTING_READ)
#undef BATON_SETTING_READ
  return s;
}

const Settings& ProcessSettings() {
  // Silent: logging itself is configured from this snapshot, and warnings
  // about malformed values come from the communicator's own snapshot.
  static const Settings settings = ReadSettings(/*log=*/false);
  return settings;
}

double TimeoutSeconds(const Settings& settings) {
  return settings.timeout > 0 ? static_cast<double>(settings.timeout) : kForeverSeconds;
}

std::optional<std::string> ForeignVariable(const char* name) {
  return RawValue(name);
}

bool ParseInt(const std::string& text, int64_t* out) {
  char* end = nullptr;
  errno = 0;
  long long parsed = strtoll(text.c_str(), &end, 0);
  if (errno != 0 || end == text.c_str() || *end != '\0') return false;
  *out = parsed;
  return true;
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

}  // namespace baton
