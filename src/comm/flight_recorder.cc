#include "comm/flight_recorder.h"

#include <sys/file.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/fd.h"
#include "base/log.h"

namespace baton {
namespace {

// Files of processes that are gone (SIGKILL, a crash): nothing else removes
// them. Every live recorder holds a shared flock on its file, and the kernel
// drops it when the process dies, so an exclusive lock that succeeds means
// the owner is gone. (A pid test would be wrong across pid namespaces, where
// the name's pid means another process or none, and after pid reuse.)
void RemoveStaleFiles() {
  DIR* dir = opendir(kFlightDir);
  if (dir == nullptr) return;
  const size_t prefix = strlen(kFlightPrefix);
  while (dirent* e = readdir(dir)) {
    if (strncmp(e->d_name, kFlightPrefix, prefix) != 0) continue;
    const std::string path = std::string(kFlightDir) + "/" + e->d_name;
    const Fd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (fd.valid() && flock(fd.get(), LOCK_EX | LOCK_NB) == 0) unlink(path.c_str());
  }
  closedir(dir);
}

// Creates `path` holding a shared lock before anyone can see it: made under
// a name RemoveStaleFiles skips, locked, then renamed into place.
Fd CreateLocked(const std::string& path, size_t bytes) {
  const std::string temp = std::string(kFlightDir) + "/.baton-fr-new-" + std::to_string(getpid()) +
                           "-" + std::to_string(reinterpret_cast<uintptr_t>(&path));
  Fd fd(open(temp.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600));
  if (!fd.valid()) return fd;
  if (flock(fd.get(), LOCK_SH) != 0 || ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0 ||
      rename(temp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    unlink(temp.c_str());
    errno = err;
    return Fd();
  }
  return fd;
}

}  // namespace

int64_t FlightRecorder::CoarseNowNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME_COARSE, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

std::unique_ptr<FlightRecorder> FlightRecorder::Create(uint32_t capacity, bool to_file, int rank,
                                                       int nranks, uint64_t comm_id,
                                                       const std::string& host,
                                                       const std::string& name) {
  std::unique_ptr<FlightRecorder> r(new FlightRecorder());
  r->capacity_ = std::max<uint32_t>(capacity, 1);
  r->bytes_ = FlightFileBytes(r->capacity_);
  if (to_file) {
    RemoveStaleFiles();
    const std::string path = FlightFilePath(getpid(), comm_id, rank);
    Fd fd = CreateLocked(path, r->bytes_);
    if (fd.valid()) {
      void* map = mmap(nullptr, r->bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
      if (map != MAP_FAILED) {
        r->map_ = map;
        r->path_ = path;
        r->lock_ = std::move(fd);  // held while the file lives: see RemoveStaleFiles
      }
    }
    if (r->map_ == nullptr) {
      BATON_WARN(kLogInit, "flight recorder: cannot use %s (%s); keeping it in memory",
                 path.c_str(), strerror(errno));
      unlink(path.c_str());
    }
  }
  if (r->map_ == nullptr) {
    void* map =
        mmap(nullptr, r->bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) return nullptr;
    r->map_ = map;
  }
  // Every page's first store now, not on the call that first reaches it:
  // that store faults, and the call that took the fault (the 61st of a
  // communicator, with the default 64 entries) ran 20-30x slower than its
  // neighbours. (The file reads zero anyway.)
  const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  for (size_t offset = 0; offset < r->bytes_; offset += page) {
    static_cast<volatile uint8_t*>(r->map_)[offset] = 0;
  }
  r->header_ = static_cast<FlightHeader*>(r->map_);
  r->entries_ =
      reinterpret_cast<FlightEntry*>(static_cast<uint8_t*>(r->map_) + sizeof(FlightHeader));
  FlightHeader& h = *r->header_;
  h.pid = getpid();
  h.rank = rank;
  h.nranks = nranks;
  h.capacity = r->capacity_;
  h.comm_id = comm_id;
  snprintf(h.host, sizeof(h.host), "%s", host.c_str());
  snprintf(h.name, sizeof(h.name), "%s", name.c_str());
  h.calls.store(0, std::memory_order_relaxed);
  h.version = kFlightVersion;
  // Last: a reader that sees the magic sees the rest.
  std::atomic_thread_fence(std::memory_order_release);
  h.magic = kFlightMagic;
  return r;
}

FlightRecorder::~FlightRecorder() {
  if (!path_.empty()) unlink(path_.c_str());
  if (map_ != nullptr) munmap(map_, bytes_);
}

CallState FlightRecorder::Latest() const {
  CallState state;
  const uint64_t calls = header_->calls.load(std::memory_order_acquire);
  if (calls == 0) return state;
  const FlightEntry& e = entries_[(calls - 1) % capacity_];
  for (;;) {
    const uint32_t lock = e.lock.load(std::memory_order_acquire);
    if (lock & 1) continue;
    uint64_t w[3];
    for (int k = 0; k < 3; ++k) w[k] = e.words[k].load(std::memory_order_relaxed);
    const auto s = static_cast<FlightState>(e.state.load(std::memory_order_relaxed));
    std::atomic_thread_fence(std::memory_order_acquire);
    if (e.lock.load(std::memory_order_relaxed) != lock) continue;
    memcpy(&state.call, w, sizeof(w));
    state.in_call = s == FlightState::kRunning;
    return state;
  }
}

}  // namespace baton
