// Segment names and their removal; see shm_names.h.
#include "base/shm_names.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>

namespace baton {
namespace {

constexpr char kPrefix[] = "baton-";

struct ExitList {
  std::mutex mu;
  std::set<std::string> names;  // guarded by mu
  pid_t owner = 0;              // the process that registered them
};

// Never destroyed: the handler runs after static destructors may have.
ExitList& TheExitList() {
  static auto* list = new ExitList;  // NOLINT: intentionally leaked singleton
  return *list;
}

void UnlinkListed() {
  ExitList& list = TheExitList();
  std::lock_guard<std::mutex> lock(list.mu);
  if (list.owner != getpid()) return;  // a forked child: the names are its parent's
  for (const std::string& name : list.names) shm_unlink(name.c_str());
  list.names.clear();
}

// "baton-<16 hex>-<rank>-<pid>": the pid part, or -1 where `name` is not
// a segment's name.
long long PidOf(const char* name) {
  if (strncmp(name, kPrefix, sizeof(kPrefix) - 1) != 0) return -1;
  const char* p = name + sizeof(kPrefix) - 1;
  for (int i = 0; i < 16; ++i, ++p)
    if (!isxdigit(static_cast<unsigned char>(*p))) return -1;
  for (int field = 0; field < 2; ++field) {
    if (*p++ != '-') return -1;
    const char* digits = p;
    long long value = 0;
    while (*p >= '0' && *p <= '9' && p - digits < 10) value = value * 10 + (*p++ - '0');
    if (p == digits) return -1;
    if (field == 1) return *p == '\0' ? value : -1;
  }
  return -1;
}

}  // namespace

std::string ShmSegmentName(uint64_t comm_id, int rank, int32_t pid) {
  char name[80];
  snprintf(name, sizeof(name), "/%s%016llx-%d-%d", kPrefix,
           static_cast<unsigned long long>(comm_id), rank, static_cast<int>(pid));
  return name;
}

int RemoveShmSegmentsOf(int32_t pid) {
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return 0;
  int removed = 0;
  while (const dirent* entry = readdir(dir)) {
    if (PidOf(entry->d_name) != pid) continue;
    struct stat st {};
    if (fstatat(dirfd(dir), entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) ||
        st.st_uid != geteuid())
      continue;
    if (shm_unlink((std::string("/") + entry->d_name).c_str()) == 0) ++removed;
  }
  closedir(dir);
  return removed;
}

void UnlinkAtExit(const std::string& name) {
  static std::once_flag registered;
  std::call_once(registered, [] { std::atexit(UnlinkListed); });
  ExitList& list = TheExitList();
  std::lock_guard<std::mutex> lock(list.mu);
  if (list.owner != getpid()) {  // first use, or first use in a forked child
    list.names.clear();
    list.owner = getpid();
  }
  list.names.insert(name);
}

void ForgetAtExit(const std::string& name) {
  ExitList& list = TheExitList();
  std::lock_guard<std::mutex> lock(list.mu);
  if (list.owner == getpid()) list.names.erase(name);
}

}  // namespace baton
