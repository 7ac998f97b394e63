// Fuzz target: flight recorder files as batonrun finds them in /dev/shm
// (another user's, a truncated one, garbage): read or refused, never a
// crash or a read past the file.
#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/flight_record.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/baton-fuzz-flight-" + std::to_string(getpid());
  const int fd = open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0600);
  if (fd < 0) return 0;
  if (write(fd, data, size) != static_cast<ssize_t>(size)) {
    close(fd);
    return 0;
  }
  close(fd);
  baton::FlightSnapshot s;
  if (baton::ReadFlightFile(path, &s) && s.last.size() > (1u << 20)) __builtin_trap();
  unlink(path.c_str());
  return 0;
}
