#include "common/mp_harness.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

extern char** environ;

namespace baton_test {
namespace {

// Record kinds on the child -> parent pipe.
constexpr char kFailure = 'F';
constexpr char kLog = 'L';

// A child that sends this many failures is probably repeating one bug; the
// rest are counted but not sent so the log stays readable.
constexpr int kMaxReportedFailures = 40;

bool WriteAll(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

struct Record {
  char kind;
  std::string file;
  int line;
  std::string message;
};

struct Child {
  int rank = 0;
  pid_t pid = -1;
  int fd = -1;  // read end of the report pipe; -1 once at EOF
  bool reaped = false;
  int status = 0;
  std::string pending;  // bytes read but not yet parsed into records
  std::vector<Record> records;
  std::string killed_because;  // non-empty when the parent killed it
};

// Owns the children so that any way out of RunRanks (including a gtest fatal
// assertion or an exception in the parent) kills and reaps them: leftover rank
// processes would hold ports and shared memory and confuse the next test.
class ChildSet {
 public:
  ChildSet() = default;
  ChildSet(const ChildSet&) = delete;
  ChildSet& operator=(const ChildSet&) = delete;
  ~ChildSet() {
    for (Child& c : children) {
      if (!c.reaped && c.pid > 0) {
        kill(c.pid, SIGKILL);
        while (waitpid(c.pid, &c.status, 0) < 0 && errno == EINTR) {
        }
      }
      if (c.fd >= 0) close(c.fd);
    }
  }
  std::vector<Child> children;
};

// Parses complete records out of c.pending. Wire format: kind, then three
// native-endian uint32 lengths (file, message) and line, then the bytes.
void ParseRecords(Child& c) {
  constexpr size_t kHeader = 1 + 3 * sizeof(uint32_t);
  while (c.pending.size() >= kHeader) {
    uint32_t file_len, msg_len, line;
    memcpy(&file_len, c.pending.data() + 1, 4);
    memcpy(&msg_len, c.pending.data() + 5, 4);
    memcpy(&line, c.pending.data() + 9, 4);
    size_t total = kHeader + file_len + msg_len;
    if (c.pending.size() < total) return;
    Record r;
    r.kind = c.pending[0];
    r.file = c.pending.substr(kHeader, file_len);
    r.line = static_cast<int>(line);
    r.message = c.pending.substr(kHeader + file_len, msg_len);
    c.records.push_back(std::move(r));
    c.pending.erase(0, total);
  }
}

// Reads whatever is available on c.fd without blocking.
void Drain(Child& c) {
  char buf[4096];
  while (c.fd >= 0) {
    ssize_t n = read(c.fd, buf, sizeof(buf));
    if (n > 0) {
      c.pending.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    close(c.fd);  // EOF or a real error: nothing more will come
    c.fd = -1;
  }
  ParseRecords(c);
}

std::string DescribeStatus(int status) {
  std::ostringstream os;
  if (WIFEXITED(status)) {
    os << "exited with status " << WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    os << "was killed by signal " << WTERMSIG(status) << " (" << strsignal(WTERMSIG(status)) << ")";
  } else {
    os << "ended with wait status " << status;
  }
  return os.str();
}

// Crash reporting. A signal handler may not allocate or format, so the step
// text and the record header live in static storage, prepared in advance.
constexpr size_t kMaxStep = 1024;
char g_step[kMaxStep] = "(no step recorded)";
size_t g_step_len = 18;
int g_crash_fd = -1;

size_t AppendRaw(char* dst, size_t pos, size_t cap, const char* src, size_t len) {
  if (pos + len > cap) len = cap - pos;
  memcpy(dst + pos, src, len);
  return pos + len;
}

void CrashHandler(int sig) {
  static char rec[kMaxStep + 256];
  static const char kFile[] = __FILE__;
  char msg[kMaxStep + 64];
  size_t n = 0;
  static const char kPrefix[] = "crashed with signal ";
  n = AppendRaw(msg, n, sizeof(msg), kPrefix, sizeof(kPrefix) - 1);
  char digits[4] = {static_cast<char>('0' + sig / 10 % 10), static_cast<char>('0' + sig % 10)};
  n = AppendRaw(msg, n, sizeof(msg), sig >= 10 ? digits : digits + 1, sig >= 10 ? 2 : 1);
  static const char kWhile[] = " during: ";
  n = AppendRaw(msg, n, sizeof(msg), kWhile, sizeof(kWhile) - 1);
  n = AppendRaw(msg, n, sizeof(msg), g_step, g_step_len);
  uint32_t lens[3] = {static_cast<uint32_t>(sizeof(kFile) - 1), static_cast<uint32_t>(n), 0};
  size_t r = 0;
  rec[r++] = kFailure;
  r = AppendRaw(rec, r, sizeof(rec), reinterpret_cast<const char*>(lens), sizeof(lens));
  r = AppendRaw(rec, r, sizeof(rec), kFile, sizeof(kFile) - 1);
  r = AppendRaw(rec, r, sizeof(rec), msg, n);
  if (g_crash_fd >= 0) WriteAll(g_crash_fd, rec, r);
  // Die from the same signal so the parent sees how the rank ended.
  signal(sig, SIG_DFL);
  raise(sig);
}

void InstallCrashHandlers(int report_fd) {
  g_crash_fd = report_fd;
  // An alternate stack, so a stack overflow is reported too.
  static std::vector<char> alt_stack(size_t{64} << 10);
  stack_t ss = {};
  ss.ss_sp = alt_stack.data();
  ss.ss_size = alt_stack.size();
  sigaltstack(&ss, nullptr);
  struct sigaction sa = {};
  sa.sa_handler = CrashHandler;
  sa.sa_flags = SA_ONSTACK | SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) sigaction(sig, &sa, nullptr);
}

// Exec mode: each rank is the test binary started afresh for this one test
// (fork, then exec of /proc/self/exe with a gtest filter), not a copy of the
// threaded gtest process: ASan hangs in such copies and TSan cannot follow
// them. The child runs the test until its RunRanks call, which then serves
// the rank named in kChildVar instead of starting ranks. On by default in
// sanitizer builds; BATON_TEST_EXEC=1 or 0 forces it.
constexpr const char* kChildVar = "BATON_TEST_CHILD";  // call,rank,report fd,shared fd,parent
constexpr const char* kIdsVar = "BATON_TEST_IDS";      // the unique ids, hex, comma separated

bool ExecMode() {
  if (const char* v = getenv("BATON_TEST_EXEC")) return strcmp(v, "0") != 0;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return true;
#else
  return false;
#endif
}

// RunRanks calls so far in the current test: a child serves the one it was
// started for and passes over the others.
int g_run_ranks_calls = 0;

std::string ToHex(const batonUniqueId& id) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (char c : id.internal) {
    out += kDigits[(static_cast<unsigned char>(c) >> 4) & 15];
    out += kDigits[static_cast<unsigned char>(c) & 15];
  }
  return out;
}

bool FromHex(const std::string& hex, batonUniqueId* id) {
  if (hex.size() != 2 * sizeof(id->internal)) return false;
  for (size_t i = 0; i < sizeof(id->internal); ++i)
    id->internal[i] = static_cast<char>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  return true;
}

[[noreturn]] void RunChild(int rank, int nranks, const batonUniqueId& id,
                           const std::vector<batonUniqueId>& extra_ids, int report_fd, void* shared,
                           pid_t parent, const std::function<void(RankContext&)>& body,
                           const Options& options) {
  // If the test binary dies, the ranks must not linger as orphans.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(3);
  InstallCrashHandlers(report_fd);
  for (const auto& [name, value] : options.env) setenv(name.c_str(), value.c_str(), 1);

  RankContext ctx(rank, nranks, id, extra_ids, report_fd, shared);
  if (options.init_comm) {
    ctx.SetStep("batonCommInitRank (by the harness)");
    batonComm_t comm = nullptr;
    batonResult_t r = batonCommInitRank(&comm, nranks, id, rank);
    if (r != batonSuccess) {
      ctx.FatalFailure(
          __FILE__, __LINE__,
          "batonCommInitRank failed: " + ResultName(r) + ": " + batonGetLastError(nullptr));
    }
    if (comm == nullptr) ctx.FatalFailure(__FILE__, __LINE__, "batonCommInitRank gave NULL");
    ctx.set_comm(comm);
  }
  ctx.SetStep("test body (no step set)");
  try {
    body(ctx);
  } catch (const std::exception& e) {
    ctx.AddFailure(__FILE__, __LINE__, std::string("uncaught exception: ") + e.what());
  } catch (...) {
    ctx.AddFailure(__FILE__, __LINE__, "uncaught exception of unknown type");
  }
  if (batonComm_t comm = ctx.TakeComm(); comm != nullptr) {
    ctx.SetStep("batonCommDestroy (by the harness)");
    batonResult_t r = batonCommDestroy(comm);
    if (r != batonSuccess) {
      ctx.AddFailure(
          __FILE__, __LINE__,
          "batonCommDestroy failed: " + ResultName(r) + ": " + batonGetLastError(nullptr));
    }
  }
  bool leaked = false;
#if defined(__SANITIZE_ADDRESS__)
  // _exit skips LeakSanitizer's check at exit: run it here (its report
  // goes to stderr).
  leaked = __lsan_do_recoverable_leak_check() != 0;
  if (leaked) ctx.AddFailure(__FILE__, __LINE__, "LeakSanitizer found leaks in this rank");
#endif
  fflush(stdout);
  fflush(stderr);
  // _exit: the child is a copy of the gtest process; running its atexit
  // handlers and static destructors here would be wrong.
  _exit(ctx.failed() || leaked ? 1 : 0);
}

// Baton's shared-memory segments in /dev/shm named for process `pid`
// ("baton-<comm id>-<rank>-<pid>", src/base/shm_names.h): what a rank
// leaves behind once its peers and it have gone.
std::vector<std::string> SegmentsLeftBy(pid_t pid) {
  std::vector<std::string> names;
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return names;
  const std::regex segment("baton-[0-9a-f]{16}-[0-9]+-" + std::to_string(pid));
  while (const dirent* entry = readdir(dir))
    if (std::regex_match(entry->d_name, segment)) names.push_back(entry->d_name);
  closedir(dir);
  return names;
}

}  // namespace

RankContext::RankContext(int rank, int nranks, const batonUniqueId& id,
                         std::vector<batonUniqueId> extra_ids, int report_fd, void* shared)
    : rank_(rank),
      nranks_(nranks),
      id_(id),
      extra_ids_(std::move(extra_ids)),
      report_fd_(report_fd),
      shared_(shared) {}

void RankContext::Send(char kind, const std::string& message) {
  // The file name comes from __FILE__ via AddFailure; Log has none.
  Send(kind, "", 0, message);
}

void RankContext::Send(char kind, const std::string& file, int line, const std::string& message) {
  std::string rec(1, kind);
  uint32_t lens[3] = {static_cast<uint32_t>(file.size()), static_cast<uint32_t>(message.size()),
                      static_cast<uint32_t>(line)};
  rec.append(reinterpret_cast<const char*>(lens), sizeof(lens));
  rec += file;
  rec += message;
  WriteAll(report_fd_, rec.data(), rec.size());
}

void RankContext::AddFailure(const char* file, int line, const std::string& message) {
  ++failures_;
  if (failures_ <= kMaxReportedFailures) {
    Send(kFailure, file, line, message);
  } else if (failures_ == kMaxReportedFailures + 1) {
    Send(kFailure, file, line, "too many failures; the rest of this rank's are not shown");
  }
}

void RankContext::FatalFailure(const char* file, int line, const std::string& message) {
  failures_ = std::max(failures_, kMaxReportedFailures - 1);  // always send this one
  AddFailure(file, line, message + " (fatal: rank stopped here)");
  fflush(stdout);
  fflush(stderr);
  _exit(1);
}

void RankContext::Log(const std::string& message) {
  Send(kLog, message);
}

void RankContext::SetStep(std::string_view step) {
  // Written before the handler can read it (same thread, or the rank is
  // already broken); a torn read would only garble the message.
  g_step_len = std::min(step.size(), kMaxStep);
  memcpy(g_step, step.data(), g_step_len);
}

std::string RankContext::LastError() const {
  const char* msg = batonGetLastError(comm_);
  return msg != nullptr ? msg : "(batonGetLastError returned NULL)";
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string ResultName(batonResult_t r) {
  static const char* const kNames[] = {
      "batonSuccess",       "batonUnhandledCudaError", "batonSystemError",
      "batonInternalError", "batonInvalidArgument",    "batonInvalidUsage",
      "batonRemoteError",   "batonInProgress",         "batonTimeout",
  };
  std::ostringstream os;
  if (r >= 0 && r < batonNumResults) {
    os << kNames[r];
  } else {
    os << "result";
  }
  os << " (" << static_cast<int>(r) << ")";
  return os.str();
}

void RunRanks(int nranks, const std::function<void(RankContext&)>& body, const Options& options) {
  ASSERT_GE(nranks, 1);
  // Counted per test: a child runs its test alone.
  static const ::testing::TestInfo* counted_for = nullptr;
  if (::testing::UnitTest::GetInstance()->current_test_info() != counted_for) {
    counted_for = ::testing::UnitTest::GetInstance()->current_test_info();
    g_run_ranks_calls = 0;
  }
  const int call = g_run_ranks_calls++;
  if (const char* child = getenv(kChildVar)) {
    // A rank started by exec: serve it (this call's), or pass.
    int child_call = -1, rank = -1, report_fd = -1, shared_fd = -1;
    long parent = 0;
    if (sscanf(child, "%d,%d,%d,%d,%ld", &child_call, &rank, &report_fd, &shared_fd, &parent) != 5)
      _exit(4);
    if (child_call != call) return;
    std::vector<batonUniqueId> ids;
    std::string list = getenv(kIdsVar) ? getenv(kIdsVar) : "";
    for (size_t pos = 0; pos <= list.size();) {
      const size_t comma = std::min(list.find(',', pos), list.size());
      batonUniqueId id = {};
      if (comma > pos && FromHex(list.substr(pos, comma - pos), &id)) ids.push_back(id);
      pos = comma + 1;
    }
    if (ids.empty()) ids.push_back(batonUniqueId{});
    void* shared =
        mmap(nullptr, RankContext::kSharedBytes, PROT_READ | PROT_WRITE, MAP_SHARED, shared_fd, 0);
    if (shared == MAP_FAILED) _exit(5);
    const std::vector<batonUniqueId> extra(ids.begin() + 1, ids.end());
    RunChild(rank, nranks, ids[0], extra, report_fd, shared, static_cast<pid_t>(parent), body,
             options);
  }
  batonUniqueId id = {};
  if (options.unique_id || options.init_comm) {
    ASSERT_EQ(batonGetUniqueId(&id), batonSuccess) << batonGetLastError(nullptr);
  }
  std::vector<batonUniqueId> extra_ids(static_cast<size_t>(options.extra_ids));
  for (batonUniqueId& extra : extra_ids) {
    ASSERT_EQ(batonGetUniqueId(&extra), batonSuccess) << batonGetLastError(nullptr);
  }

  // Shared mapping: inherited by every child (by fork, or by its fd across
  // exec), gone with the last user.
  const bool exec_mode = ExecMode();
  int shared_fd = -1;
  void* mapping = MAP_FAILED;
  if (exec_mode) {
    shared_fd = memfd_create("baton-test-shared", 0);
    ASSERT_GE(shared_fd, 0) << strerror(errno);
    ASSERT_EQ(ftruncate(shared_fd, RankContext::kSharedBytes), 0) << strerror(errno);
    mapping =
        mmap(nullptr, RankContext::kSharedBytes, PROT_READ | PROT_WRITE, MAP_SHARED, shared_fd, 0);
  } else {
    mapping = mmap(nullptr, RankContext::kSharedBytes, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  }
  ASSERT_NE(mapping, MAP_FAILED) << strerror(errno);
  struct FdCloser {
    int fd;
    ~FdCloser() {
      if (fd >= 0) close(fd);
    }
  } shared_fd_closer{shared_fd};
  // Exec mode: what the children run (the binary, this test alone) and the
  // environment that tells them which rank they are.
  std::vector<std::string> exec_args, exec_env_base;
  if (exec_mode) {
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    ASSERT_NE(info, nullptr);
    exec_args = {"/proc/self/exe",
                 std::string("--gtest_filter=") + info->test_suite_name() + "." + info->name()};
    std::string ids = ToHex(id);
    for (const batonUniqueId& extra : extra_ids) {
      // Appended in two steps: GCC 12 warns (-Wrestrict, a false positive)
      // about the inlined `"," + std::string&&`.
      ids += ',';
      ids += ToHex(extra);
    }
    for (char** e = environ; *e != nullptr; ++e)
      if (strncmp(*e, kChildVar, strlen(kChildVar)) != 0 &&
          strncmp(*e, kIdsVar, strlen(kIdsVar)) != 0)
        exec_env_base.push_back(*e);
    exec_env_base.push_back(std::string(kIdsVar) + "=" + ids);
  }
  const auto unmap = [](void* p) { munmap(p, RankContext::kSharedBytes); };
  std::unique_ptr<void, decltype(unmap)> shared(mapping, unmap);

  const auto start = std::chrono::steady_clock::now();
  const pid_t parent = getpid();
  ChildSet set;
  set.children.resize(static_cast<size_t>(nranks));
  for (int rank = 0; rank < nranks; ++rank) {
    int fds[2];
    ASSERT_EQ(pipe(fds), 0) << strerror(errno);
    // Built before fork: the child of a threaded process may only exec.
    std::vector<std::string> env = exec_env_base;
    std::vector<char*> argv, envp;
    if (exec_mode) {
      env.push_back(std::string(kChildVar) + "=" + std::to_string(call) + "," +
                    std::to_string(rank) + "," + std::to_string(fds[1]) + "," +
                    std::to_string(shared_fd) + "," + std::to_string(getpid()));
      for (std::string& a : exec_args) argv.push_back(a.data());
      argv.push_back(nullptr);
      for (std::string& e : env) envp.push_back(e.data());
      envp.push_back(nullptr);
    }
    // Buffered output would otherwise be written once per process.
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
      close(fds[0]);
      close(fds[1]);
      FAIL() << "fork: " << strerror(errno);
    }
    if (pid == 0) {
      close(fds[0]);
      // Earlier ranks' read ends: a child must not hold them.
      for (int r = 0; r < rank; ++r) close(set.children[static_cast<size_t>(r)].fd);
      if (exec_mode) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        execve(argv[0], argv.data(), envp.data());
        _exit(127);
      }
      RunChild(rank, nranks, id, extra_ids, fds[1], shared.get(), parent, body, options);
    }
    close(fds[1]);
    fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK);
    Child& c = set.children[static_cast<size_t>(rank)];
    c.rank = rank;
    c.pid = pid;
    c.fd = fds[0];
  }

  const auto deadline = start + options.deadline;
  std::optional<std::chrono::steady_clock::time_point> kill_at;
  int first_failed_rank = -1;
  int running = nranks;
  while (running > 0) {
    std::vector<pollfd> pfds;
    for (const Child& c : set.children) {
      if (c.fd >= 0) pfds.push_back({c.fd, POLLIN, 0});
    }
    // Short timeout: child exits are noticed by polling waitpid.
    poll(pfds.data(), pfds.size(), 20);
    for (Child& c : set.children) Drain(c);

    for (Child& c : set.children) {
      if (c.reaped) continue;
      pid_t w = waitpid(c.pid, &c.status, WNOHANG);
      if (w != c.pid) continue;
      c.reaped = true;
      --running;
      auto expected = options.expected_signal.find(c.rank);
      bool ok = expected != options.expected_signal.end()
                    ? WIFSIGNALED(c.status) && WTERMSIG(c.status) == expected->second
                    : WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0;
      if (!ok && c.killed_because.empty() && !kill_at) {
        // The others are probably blocked on this rank; give them a while to
        // notice (and report how), then stop them.
        kill_at = std::chrono::steady_clock::now() + options.grace_after_failure;
        first_failed_rank = c.rank;
      }
    }

    const auto now = std::chrono::steady_clock::now();
    std::string reason;
    if (now >= deadline) {
      std::ostringstream os;
      os << "still running at the harness deadline of "
         << std::chrono::duration<double>(options.deadline).count() << " s (hang?)";
      reason = os.str();
    } else if (kill_at && now >= *kill_at) {
      std::ostringstream os;
      os << "still running " << std::chrono::duration<double>(options.grace_after_failure).count()
         << " s after rank " << first_failed_rank << " failed";
      reason = os.str();
    }
    if (!reason.empty()) {
      for (Child& c : set.children) {
        if (c.reaped || !c.killed_because.empty()) continue;
        c.killed_because = reason;
        kill(c.pid, SIGKILL);
      }
    }
  }
  for (Child& c : set.children) Drain(c);

  for (const Child& c : set.children) {
    int failures = 0;
    for (const Record& r : c.records) {
      if (r.kind == kLog) {
        printf("[rank %d] %s\n", c.rank, r.message.c_str());
        continue;
      }
      ++failures;
      ADD_FAILURE_AT(r.file.c_str(), r.line) << "rank " << c.rank << ": " << r.message;
    }
    if (!c.pending.empty()) {
      ADD_FAILURE() << "rank " << c.rank << ": truncated report (" << c.pending.size() << " bytes)";
    }
    if (!c.killed_because.empty()) {
      ADD_FAILURE() << "rank " << c.rank << " was killed by the harness: " << c.killed_because;
      continue;
    }
    // Killed on purpose or not, every rank's segments are gone once its
    // peers have finished: survivors remove a failed peer's names.
    for (const std::string& name : SegmentsLeftBy(c.pid))
      ADD_FAILURE() << "rank " << c.rank << " (pid " << c.pid << ") left /dev/shm/" << name
                    << " behind";
    auto expected = options.expected_signal.find(c.rank);
    if (expected != options.expected_signal.end()) {
      if (!WIFSIGNALED(c.status) || WTERMSIG(c.status) != expected->second) {
        ADD_FAILURE() << "rank " << c.rank << " " << DescribeStatus(c.status)
                      << ", expected death by signal " << expected->second;
      }
    } else if (!WIFEXITED(c.status) || WEXITSTATUS(c.status) != 0) {
      // A failing child normally explains itself; an unexplained exit or a
      // crash must still fail the test.
      if (failures == 0 || !WIFEXITED(c.status)) {
        ADD_FAILURE() << "rank " << c.rank << " " << DescribeStatus(c.status);
      }
    } else if (failures > 0) {
      ADD_FAILURE() << "rank " << c.rank << " reported failures but exited with status 0";
    }
  }
}

}  // namespace baton_test
