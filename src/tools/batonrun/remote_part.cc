// The wire between the launching batonrun and the hosts' batonruns, and the remote side of it.
#include <fcntl.h>
#include <poll.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "base/settings.h"
#include "tools/batonrun/remote_launch.h"

namespace batonrun {
namespace {

// The launching batonrun writes the environment right after starting the agent, but the agent
// (ssh) may first have to connect and log in.
constexpr auto kEnvironmentDeadline = std::chrono::seconds(60);
// An environment is a few kilobytes; this bounds what a confused peer can make us hold.
constexpr size_t kMaxEnvironmentBytes = 1 << 20;

}  // namespace

std::string EncodeEnvironment(const std::vector<std::string>& assignments) {
  std::string wire;
  for (const std::string& assignment : assignments) {
    wire += assignment;
    wire += '\0';
  }
  wire += '\0';
  return wire;
}

std::string ShellQuote(std::string_view word) {
  std::string quoted = "'";
  for (char c : word) {
    if (c == '\'') {
      quoted += "'\\''";
    } else {
      quoted += c;
    }
  }
  quoted += '\'';
  return quoted;
}

std::vector<std::string> SplitAgent(std::string_view agent) {
  std::vector<std::string> words;
  size_t i = 0;
  while (i < agent.size()) {
    while (i < agent.size() && isspace(static_cast<unsigned char>(agent[i]))) ++i;
    size_t start = i;
    while (i < agent.size() && !isspace(static_cast<unsigned char>(agent[i]))) ++i;
    if (i > start) words.emplace_back(agent.substr(start, i - start));
  }
  return words;
}

bool ReceiveJobEnvironment(baton::Fd* launcher, std::string* rendezvous_var, std::string* error) {
  // Byte by byte: the requests that may follow the environment are read later, by the job.
  const auto deadline = std::chrono::steady_clock::now() + kEnvironmentDeadline;
  std::vector<std::string> assignments;
  std::string current;
  size_t total = 0;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now())
                    .count();
    pollfd pfd = {STDIN_FILENO, POLLIN, 0};
    int ready = left > 0 ? poll(&pfd, 1, static_cast<int>(left)) : 0;
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {
      *error = "no job environment from the launching batonrun on stdin within 60 s";
      return false;
    }
    char c = 0;
    ssize_t n = ready < 0 ? -1 : read(STDIN_FILENO, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      *error =
          "stdin closed before the job environment was complete (--remote-host is for "
          "the launching batonrun only)";
      return false;
    }
    if (++total > kMaxEnvironmentBytes) {
      *error = "job environment on stdin larger than 1 MiB";
      return false;
    }
    if (c != '\0') {
      current += c;
      continue;
    }
    if (current.empty()) break;  // The end marker.
    assignments.push_back(std::move(current));
    current.clear();
  }
  for (const std::string& assignment : assignments) {
    size_t eq = assignment.find('=');
    if (eq == 0 || eq == std::string::npos) {
      *error = "malformed job environment entry on stdin";
      return false;
    }
    setenv(assignment.substr(0, eq).c_str(), assignment.c_str() + eq + 1, /*overwrite=*/1);
  }
  const char* id = getenv(baton::SettingName::unique_id);
  if (id == nullptr) {
    *error = "the job environment on stdin has no BATON_UNIQUE_ID";
    return false;
  }
  *rendezvous_var = std::string(baton::SettingName::unique_id) + "=" + id;

  int copy = fcntl(STDIN_FILENO, F_DUPFD_CLOEXEC, 3);
  int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (copy < 0 || null < 0 || dup2(null, STDIN_FILENO) < 0) {
    *error = std::string("cannot set up stdin: ") + strerror(errno);
    if (copy >= 0) close(copy);
    if (null >= 0) close(null);
    return false;
  }
  close(null);
  fcntl(copy, F_SETFL, fcntl(copy, F_GETFL) | O_NONBLOCK);
  launcher->reset(copy);
  return true;
}

}  // namespace batonrun
