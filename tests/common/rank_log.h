// What the single-pass tests (single-copy, copy-in) need around a rank: its
// log captured to tell which path a call took, and a process its peers may
// not read (the kernel's refusal, forced).
#pragma once

#include <linux/capability.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <string>

namespace baton_test {

// Runs `body` with this rank's stderr (where the log goes) in a file, and
// returns what was written there; echoed afterwards, so a failure can be read.
template <typename Body>
std::string CaptureLog(Body body) {
  std::fflush(stderr);
  FILE* file = std::tmpfile();
  const int saved = dup(2);
  dup2(fileno(file), 2);
  body();
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  std::string text;
  std::rewind(file);
  char buf[4096];
  for (size_t got; (got = std::fread(buf, 1, sizeof(buf), file)) > 0;) text.append(buf, got);
  std::fclose(file);
  std::fputs(text.c_str(), stderr);
  return text;
}

// Drops CAP_SYS_PTRACE from this process: root keeps reading a
// non-dumpable process (process_vm_readv, /proc/<pid>/fd) with it, as ptrace does.
inline bool DropPtraceCapability() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (syscall(SYS_capget, &header, data) != 0) return false;
  for (auto& d : data) {
    d.effective &= ~(1u << CAP_SYS_PTRACE);
    d.permitted &= ~(1u << CAP_SYS_PTRACE);
  }
  return syscall(SYS_capset, &header, data) == 0;
}

}  // namespace baton_test
