#include "bootstrap/host_id.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

namespace baton {

uint64_t Fnv1a64(const void* data, size_t len, uint64_t seed) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = seed;
  for (size_t i = 0; i < len; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string HostIdentity(const std::string& override_id) {
  if (!override_id.empty()) return "hostid=" + override_id;
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  std::string boot_id;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot_id;
  struct stat st {};
  unsigned long long netns = 0;
  if (stat("/proc/self/ns/net", &st) == 0) netns = static_cast<unsigned long long>(st.st_ino);
  return std::string("host=") + host + " boot=" + boot_id + " netns=" + std::to_string(netns);
}

uint64_t MachineHash() {
  std::string boot_id;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot_id;
  if (boot_id.empty()) {  // no /proc: the hostname is the best guess
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    boot_id = host;
  }
  return Fnv1a64(boot_id.data(), boot_id.size());
}

uint64_t HostHash(const std::string& override_id) {
  std::string id = HostIdentity(override_id);
  return Fnv1a64(id.data(), id.size());
}

}  // namespace baton
