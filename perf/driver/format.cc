#include "driver/format.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>

namespace baton_perf {

std::string FormatColumn(double value, int width) {
  char buf[64];
  if (!std::isfinite(value)) {
    std::snprintf(buf, sizeof(buf), "%*.2f", width, value);
    return buf;
  }
  int digits = 0;  // digits before the decimal point
  for (double power = 1; value >= power && digits < 400; power *= 10) ++digits;
  if (digits < width - 2) {
    std::snprintf(buf, sizeof(buf), "%*.2f", width, value);
  } else if (digits < width - 1) {
    std::snprintf(buf, sizeof(buf), "%*.1f", width, value);
  } else if (digits < width + 1) {
    std::snprintf(buf, sizeof(buf), "%*.0f", width, value);
  } else if (width >= 7) {
    std::snprintf(buf, sizeof(buf), "%*.1e", width, value);
  } else {
    std::snprintf(buf, sizeof(buf), "%*.0e", width, value);
  }
  return buf;
}

std::string JsonNumber(double value) {
  if (std::isnan(value)) return "\"nan\"";
  if (std::isinf(value)) return value > 0 ? "\"inf\"" : "\"-inf\"";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%f", value);
  return buf;
}

std::string JsonString(const char* s) {
  std::string out = "\"";
  for (; *s; ++s) {
    const auto c = static_cast<unsigned char>(*s);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string LocalTimestamp() {
  char buf[64] = {};
  const std::time_t now = std::time(nullptr);
  std::tm local = {};
  localtime_r(&now, &local);
  std::strftime(buf, sizeof(buf), kTimestampFormat, &local);
  return buf;
}

std::string ShortHostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "unknown";
  char* dot = std::strchr(name, '.');
  if (dot) *dot = '\0';
  return name;
}

}  // namespace baton_perf
