// Typed access to BATON_* environment variables.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace baton {

// Returns the variable's value, or nullopt when unset or empty.
std::optional<std::string> GetEnv(const char* name);

// Integer variable with a default; a malformed value logs a warning and
// falls back to the default rather than failing the job.
int64_t GetEnvInt(const char* name, int64_t default_value);

// Size with an optional K/M/G suffix (BATON_BUFFSIZE=4M).
uint64_t GetEnvSize(const char* name, uint64_t default_value);

// Parses "123", "4K", "2M", "1G" (powers of 1024). False on malformed input.
bool ParseSize(const std::string& text, uint64_t* out);

}  // namespace baton
