// How the perf driver prints numbers, JSON and host names, as nccl-tests
// does.
#pragma once

#include <string>

namespace baton_perf {

// nccl-tests' getFloatStr: as many decimals as fit in `width` columns, then an exponent.
std::string FormatColumn(double value, int width);
// A JSON number; NaN and infinities as the strings "nan", "inf", "-inf".
std::string JsonNumber(double value);
// A JSON string literal of `s`, escaped.
std::string JsonString(const char* s);
// -S: nccl-tests' timestamp column, local time in this strftime format.
inline constexpr char kTimestampFormat[] = "%Y-%m-%d %H:%M:%S";
std::string LocalTimestamp();
// Host name up to the first dot, as nccl-tests prints it.
std::string ShortHostName();

}  // namespace baton_perf
