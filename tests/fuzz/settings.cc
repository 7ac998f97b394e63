// Fuzz target: the values users put in BATON_* variables: sizes, integers
// and the BATON_ALGO filter. Refused or accepted, never a crash.
#include <cstddef>
#include <cstdint>
#include <string>

#include "base/settings.h"
#include "tuning/algorithm_filter.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  uint64_t bytes = 0;
  (void)baton::ParseSize(text, &bytes);
  int64_t value = 0;
  (void)baton::ParseInt(text, &value);
  baton::AlgorithmFilter filter;
  (void)baton::AlgorithmFilter::Parse(text, &filter);
  return 0;
}
