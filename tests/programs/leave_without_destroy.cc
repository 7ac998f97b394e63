// A rank that leaves without batonCommDestroy: one small ring allreduce
// (with connections made on first use, ranks that are not neighbours on
// the ring never connect, so segments keep their names), then argv[1] says
// how it goes: "exit" (exit(0), atexit handlers run) or "kill" (SIGKILL,
// nothing runs). Writes "pid P linked L" to argv[2]/report.RANK first: its
// pid, and whether its segment still has its name after its last call.
// Ranks wait for each other before leaving through files in argv[2] (a
// Baton barrier would connect more pairs). For tests/scripts/shm_cleanup_test.sh.
#include <baton.h>
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

// Whether /dev/shm holds a segment named for this process.
bool OwnSegmentLinked() {
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return false;
  char suffix_text[32];
  snprintf(suffix_text, sizeof(suffix_text), "-%d", static_cast<int>(getpid()));
  const std::string suffix = suffix_text;
  bool found = false;
  while (const dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    found = found || (name.rfind("baton-", 0) == 0 && name.size() > suffix.size() &&
                      name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0);
  }
  closedir(dir);
  return found;
}

}  // namespace

int main(int argc, char** argv) {
  const bool kill_self = argc > 1 && strcmp(argv[1], "kill") == 0;
  batonComm_t comm = nullptr;
  if (batonCommInitFromEnv(&comm) != batonSuccess) {
    fprintf(stderr, "init: %s\n", batonGetLastError(nullptr));
    return 1;
  }
  std::vector<float> v(16, 1.0f);
  if (batonAllReduce(v.data(), v.data(), v.size(), batonFloat, batonSum, comm, nullptr) !=
      batonSuccess) {
    fprintf(stderr, "allreduce: %s\n", batonGetLastError(comm));
    return 1;
  }
  int nranks = 0;
  batonCommCount(comm, &nranks);
  if (v[0] != static_cast<float>(nranks)) {
    fprintf(stderr, "allreduce: %g, expected %d\n", v[0], nranks);
    return 1;
  }
  // Nobody leaves before every rank has its result.
  int rank = 0;
  batonCommUserRank(comm, &rank);
  const std::string dir = argc > 2 ? argv[2] : ".";
  if (FILE* f = fopen((dir + "/report." + std::to_string(rank)).c_str(), "w")) {
    fprintf(f, "pid %d linked %d\n", static_cast<int>(getpid()), OwnSegmentLinked() ? 1 : 0);
    fclose(f);
  }
  if (FILE* f = fopen((dir + "/done." + std::to_string(rank)).c_str(), "w")) fclose(f);
  for (int waited_ms = 0; waited_ms < 30000; waited_ms += 10) {
    int done = 0;
    for (int r = 0; r < nranks; ++r)
      done += access((dir + "/done." + std::to_string(r)).c_str(), F_OK) == 0;
    if (done == nranks) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (kill_self) raise(SIGKILL);
  exit(0);
}
