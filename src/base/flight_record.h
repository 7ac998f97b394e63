// The flight recorder's file: the last calls of one communicator on one
// rank, in a small file in /dev/shm that another process (batonrun, on a
// failure or SIGUSR1, or `batonrun --dump PID`) reads while the rank runs,
// is stopped, hangs or after it died. The writer is comm/flight_recorder.h;
// this header is the layout and a reader, header-only so that batonrun
// needs no internals.
//
// Layout: a 256-byte header, then `capacity` 64-byte entries; call i of
// the communicator is entry i % capacity. An entry's `lock` is odd while
// its call is being written; a reader that sees it odd, or changed across
// its read, skips the entry.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "base/call_descriptor.h"

namespace baton {

inline constexpr uint32_t kFlightMagic = 0x46544e42;  // "BNTF"
inline constexpr uint32_t kFlightVersion = 1;
inline constexpr const char* kFlightDir = "/dev/shm";
inline constexpr const char* kFlightPrefix = "baton-fr-";

enum class FlightState : uint32_t { kEmpty = 0, kRunning = 1, kDone = 2, kFailed = 3 };

struct FlightHeader {
  uint32_t magic;
  uint32_t version;
  int32_t pid;
  int32_t rank;
  int32_t nranks;
  uint32_t capacity;
  uint64_t comm_id;
  char host[64];
  std::atomic<uint64_t> calls;  // entries written so far
  char name[64];                // batonConfig_t.commName, NUL-terminated ("": none)
  uint8_t reserved[256 - 168];
};
static_assert(sizeof(FlightHeader) == 256, "the header is 256 bytes");

struct FlightEntry {
  std::atomic<uint32_t> lock;
  std::atomic<uint32_t> state;     // FlightState
  std::atomic<uint64_t> words[3];  // the CallDescriptor, numbered
  std::atomic<int64_t> start_ns;   // CLOCK_REALTIME_COARSE (a few ms of resolution)
  std::atomic<int32_t> result;     // batonResult_t once done
  uint8_t reserved[64 - 44];
};
static_assert(sizeof(FlightEntry) == 64, "an entry is one cache line");

inline size_t FlightFileBytes(uint32_t capacity) {
  return sizeof(FlightHeader) + size_t{capacity} * sizeof(FlightEntry);
}

// "/dev/shm/baton-fr-<pid>-<comm id in hex>-<rank>" (one process may hold
// several ranks of a communicator: batonCommInitAll).
inline std::string FlightFilePath(int pid, uint64_t comm_id, int rank) {
  char name[112];
  snprintf(name, sizeof(name), "%s/%s%d-%016llx-%d", kFlightDir, kFlightPrefix, pid,
           static_cast<unsigned long long>(comm_id), rank);
  return name;
}

// The flight files of process `pid` (its communicators).
inline std::vector<std::string> FlightFilesOf(int pid) {
  std::vector<std::string> out;
  const std::string prefix = std::string(kFlightPrefix) + std::to_string(pid) + "-";
  DIR* dir = opendir(kFlightDir);
  if (dir == nullptr) return out;
  while (dirent* e = readdir(dir))
    if (strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0)
      out.push_back(std::string(kFlightDir) + "/" + e->d_name);
  closedir(dir);
  return out;
}

// One call as a reader saw it.
struct FlightCall {
  CallDescriptor call;
  FlightState state = FlightState::kEmpty;
  int64_t start_ns = 0;
  int32_t result = 0;
};

struct FlightSnapshot {
  int pid = 0, rank = -1, nranks = 0;
  uint64_t comm_id = 0;
  std::string host;
  std::string name;              // batonConfig_t.commName ("": none)
  uint64_t calls = 0;            // calls the communicator made
  std::vector<FlightCall> last;  // the last ones it holds, oldest first
};

// Reads a flight file; false if it is not one (or is gone).
inline bool ReadFlightFile(const std::string& path, FlightSnapshot* out) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_size < static_cast<off_t>(sizeof(FlightHeader))) {
    close(fd);
    return false;
  }
  void* map = mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (map == MAP_FAILED) return false;
  const auto* h = static_cast<const FlightHeader*>(map);
  bool ok = h->magic == kFlightMagic && h->version == kFlightVersion && h->capacity > 0 &&
            h->capacity <= (1u << 20) &&
            FlightFileBytes(h->capacity) <= static_cast<size_t>(st.st_size);
  if (ok) {
    out->pid = h->pid;
    out->rank = h->rank;
    out->nranks = h->nranks;
    out->comm_id = h->comm_id;
    out->host.assign(h->host, strnlen(h->host, sizeof(h->host)));
    out->name.assign(h->name, strnlen(h->name, sizeof(h->name)));
    out->calls = h->calls.load(std::memory_order_acquire);
    out->last.clear();
    const auto* entries = reinterpret_cast<const FlightEntry*>(static_cast<const uint8_t*>(map) +
                                                               sizeof(FlightHeader));
    const uint64_t first = out->calls > h->capacity ? out->calls - h->capacity : 0;
    for (uint64_t i = first; i < out->calls; ++i) {
      const FlightEntry& e = entries[i % h->capacity];
      const uint32_t lock = e.lock.load(std::memory_order_acquire);
      if (lock & 1) continue;
      FlightCall c;
      uint64_t w[3];
      for (int k = 0; k < 3; ++k) w[k] = e.words[k].load(std::memory_order_relaxed);
      memcpy(&c.call, w, sizeof(w));
      c.state = static_cast<FlightState>(e.state.load(std::memory_order_relaxed));
      c.start_ns = e.start_ns.load(std::memory_order_relaxed);
      c.result = e.result.load(std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_acquire);
      if (e.lock.load(std::memory_order_relaxed) != lock) continue;
      out->last.push_back(c);
    }
  }
  munmap(map, static_cast<size_t>(st.st_size));
  return ok;
}

}  // namespace baton
