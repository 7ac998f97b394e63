// batonrun: starts the ranks of a Baton job on one host, like `mpirun -n N` or `torchrun`.
//
//   batonrun [options] -n N prog [args...]
//
// Every rank is a child process started with fork + execvp. It finds its place in the job in its
// environment (read by batonCommInitFromEnv):
//
//   BATON_RANK, BATON_WORLD_SIZE         global rank and number of ranks of the job
//   BATON_LOCAL_RANK, BATON_LOCAL_SIZE   rank and number of ranks on this host
//   BATON_UNIQUE_ID                      single-host jobs: the batonUniqueId made by batonrun,
//                                        as 256 lowercase hex digits
//   BATON_ROOT                           multi-host jobs (--root): HOST:PORT of the rendezvous,
//                                        hosted by global rank 0
//
// A job spanning hosts is started by one batonrun per host, each with the same --world-size and
// --root and its own --rank-offset.
//
// The job fails as a whole: when a rank exits non-zero or dies of a signal, batonrun stops the
// others (SIGTERM, then SIGKILL after a grace period) and exits with that rank's status, encoded
// like a shell does (128 + signal number for a signal).
//
// SPDX-License-Identifier: BSD-3-Clause

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "baton.h"

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kExitLauncherError = 1;  // batonrun itself failed (fork, pipe, unique id...).
constexpr int kExitUsage = 2;          // Bad command line, as for most Unix tools.
constexpr int kExitTimeout = 124;      // --timeout expired, as for timeout(1).
constexpr int kExitCannotRun = 127;    // exec failed, as for shells.

// Signals that batonrun passes on to every running rank. Children share batonrun's process group,
// so a terminal's Ctrl-C reaches them directly; forwarding covers signals sent to batonrun alone
// (kill, a batch scheduler, a parent launcher).
constexpr int kForwardedSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};

// Launch variables batonrun sets. Inherited copies are removed first, so that a batonrun started
// from inside a rank (or a shell left with stale values) cannot leak them into the new job.
constexpr std::string_view kLaunchVariables[] = {"BATON_RANK",       "BATON_WORLD_SIZE",
                                                 "BATON_LOCAL_RANK", "BATON_LOCAL_SIZE",
                                                 "BATON_UNIQUE_ID",  "BATON_ROOT"};

constexpr char kUsage[] =
    "Usage: batonrun [options] -n N prog [args...]\n"
    "Starts N ranks of a Baton program on this host.\n"
    "\n"
    "Options:\n"
    "  -n, --np N             number of ranks to start on this host (required)\n"
    "  -p, --prefix           prefix each output line with \"[R] \", R the global rank\n"
    "  -x NAME[=VALUE]        export NAME (with VALUE, or batonrun's own value) to the ranks;\n"
    "                         may be repeated\n"
    "  --timeout SECONDS      stop the job and exit with 124 if it runs longer\n"
    "  --kill-grace SECONDS   time between SIGTERM and SIGKILL when stopping ranks (default 5)\n"
    "  --world-size W         multi-host jobs: total number of ranks\n"
    "  --rank-offset K        multi-host jobs: global rank of this host's first rank\n"
    "  --root HOST:PORT       multi-host jobs: rendezvous address, hosted by global rank 0\n"
    "  -h, --help             show this help and exit\n"
    "  --version              show the version and exit\n"
    "\n"
    "Each rank gets BATON_RANK, BATON_WORLD_SIZE, BATON_LOCAL_RANK, BATON_LOCAL_SIZE, and\n"
    "either BATON_UNIQUE_ID (single host: batonrun hosts the rendezvous) or BATON_ROOT\n"
    "(with --root). If a rank fails, the others are stopped and batonrun exits with the\n"
    "failed rank's status (128+N for signal N).\n";

// Owns a file descriptor and closes it when destroyed, so no early return can leak one.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.Release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) Reset(other.Release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { Reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int Release() { return std::exchange(fd_, -1); }
  void Reset(int fd = -1) {
    // close() is not retried on EINTR: on Linux the descriptor is gone either way.
    if (fd_ >= 0) close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

// The command line, parsed and checked.
struct Options {
  int num_ranks = 0;  // 0 until -n is seen.
  bool prefix = false;
  double timeout_s = 0;  // 0: no time limit.
  double kill_grace_s = 5;
  std::optional<int> world_size;
  std::optional<int> rank_offset;
  std::string root;                  // Empty: single-host job with a unique id made here.
  std::vector<std::string> exports;  // NAME=VALUE pairs from -x, in order.
  std::vector<std::string> command;  // The program and its arguments.

  int WorldSize() const { return world_size.value_or(num_ranks); }
  int RankOffset() const { return rank_offset.value_or(0); }
};

enum class ParseOutcome { kRun, kHelp, kVersion, kUsageError };

std::optional<int> ParseInt(std::string_view text, int min, int max) {
  int value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end || value < min || value > max) return std::nullopt;
  return value;
}

// Seconds as a non-negative decimal number ("10", "0.5"). The upper bound keeps the later
// conversion to a Clock duration far from overflow.
std::optional<double> ParseSeconds(const std::string& text) {
  if (text.empty() || text[0] == '-' || text[0] == '+' ||
      isspace(static_cast<unsigned char>(text[0])))
    return std::nullopt;
  char* end = nullptr;
  errno = 0;
  double value = strtod(text.c_str(), &end);
  if (errno != 0 || *end != '\0' || !std::isfinite(value) || value < 0 || value > 1e9) {
    return std::nullopt;
  }
  return value;
}

// HOST:PORT, HOST possibly a bracketed IPv6 address. Only the shape is checked here: the ranks
// resolve the name, and a typo should fail fast there with the library's own message.
bool ValidRoot(std::string_view root) {
  size_t colon = root.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return false;
  if (!ParseInt(root.substr(colon + 1), 1, 65535)) return false;
  std::string_view host = root.substr(0, colon);
  if (host.front() == '[') return host.size() > 2 && host.back() == ']';
  return host.find(':') == std::string_view::npos;
}

bool ValidEnvName(std::string_view name) {
  if (name.empty() || isdigit(static_cast<unsigned char>(name[0]))) return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

// Parses argv into *options. Options come first; the first argument that is not an option (or
// whatever follows "--") is the program, and everything after it is passed to the program
// untouched, as with mpirun, so `batonrun -n 2 prog -n 5` gives "-n 5" to prog.
ParseOutcome ParseArgs(int argc, char** argv, Options* options, std::string* error) {
  int i = 1;
  for (; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') break;  // The program.

    // Split "--name=value" and the attached short forms "-n4" and "-xNAME=VALUE".
    std::string_view name = arg;
    std::optional<std::string> inline_value;
    if (arg.starts_with("--")) {
      size_t eq = arg.find('=');
      if (eq != std::string_view::npos) {
        name = arg.substr(0, eq);
        inline_value = std::string(arg.substr(eq + 1));
      }
    } else if (arg.size() > 2 && (arg[1] == 'n' || arg[1] == 'x') && arg != "-np") {
      name = arg.substr(0, 2);
      inline_value = std::string(arg.substr(2));
    }
    auto take_value = [&]() -> std::optional<std::string> {
      if (inline_value) return inline_value;
      if (i + 1 < argc) return std::string(argv[++i]);
      *error = "option '" + std::string(name) + "' needs a value";
      return std::nullopt;
    };
    auto bad_value = [&](const std::string& value, const char* what) {
      *error = "invalid value '" + value + "' for " + std::string(name) + ": expected " + what;
      return ParseOutcome::kUsageError;
    };
    if (name == "-h" || name == "--help") return ParseOutcome::kHelp;
    if (name == "--version") return ParseOutcome::kVersion;
    if (name == "-p" || name == "--prefix") {
      if (inline_value) {
        *error = "option '" + std::string(name) + "' takes no value";
        return ParseOutcome::kUsageError;
      }
      options->prefix = true;
      continue;
    }

    if (name == "-n" || name == "--np" || name == "-np") {
      std::optional<std::string> value = take_value();
      if (!value) return ParseOutcome::kUsageError;
      std::optional<int> n = ParseInt(*value, 1, 1 << 20);
      if (!n) return bad_value(*value, "a number of ranks >= 1");
      options->num_ranks = *n;
    } else if (name == "--timeout" || name == "--kill-grace") {
      std::optional<std::string> value = take_value();
      if (!value) return ParseOutcome::kUsageError;
      std::optional<double> seconds = ParseSeconds(*value);
      if (!seconds) return bad_value(*value, "a number of seconds");
      if (name == "--timeout") {
        if (*seconds <= 0) return bad_value(*value, "a number of seconds > 0");
        options->timeout_s = *seconds;
      } else {
        options->kill_grace_s = *seconds;
      }
    } else if (name == "--world-size" || name == "--rank-offset") {
      std::optional<std::string> value = take_value();
      if (!value) return ParseOutcome::kUsageError;
      bool is_size = name == "--world-size";
      std::optional<int> n = ParseInt(*value, is_size ? 1 : 0, INT_MAX);
      if (!n) return bad_value(*value, is_size ? "a number >= 1" : "a number >= 0");
      (is_size ? options->world_size : options->rank_offset) = *n;
    } else if (name == "--root") {
      std::optional<std::string> value = take_value();
      if (!value) return ParseOutcome::kUsageError;
      if (!ValidRoot(*value)) return bad_value(*value, "HOST:PORT");
      options->root = *value;
    } else if (name == "-x") {
      std::optional<std::string> value = take_value();
      if (!value) return ParseOutcome::kUsageError;
      size_t eq = value->find('=');
      std::string var = value->substr(0, eq);
      if (!ValidEnvName(var)) return bad_value(*value, "NAME or NAME=VALUE");
      if (eq != std::string::npos) {
        options->exports.push_back(*value);
      } else if (const char* current = getenv(var.c_str())) {
        options->exports.push_back(var + "=" + current);
      } else {
        // Like mpirun: a missing variable is worth a warning, not a failed job.
        fprintf(stderr, "batonrun: warning: -x %s: not set in the environment, not exported\n",
                var.c_str());
      }
    } else {
      *error = "unknown option '" + std::string(arg) + "'";
      return ParseOutcome::kUsageError;
    }
  }

  options->command.assign(argv + i, argv + argc);
  if (options->num_ranks == 0) {
    *error = "missing -n N (the number of ranks)";
    return ParseOutcome::kUsageError;
  }
  if (options->command.empty()) {
    *error = "missing the program to run";
    return ParseOutcome::kUsageError;
  }
  if (static_cast<long long>(options->RankOffset()) + options->num_ranks > options->WorldSize()) {
    *error = "--rank-offset " + std::to_string(options->RankOffset()) + " + -n " +
             std::to_string(options->num_ranks) + " exceeds --world-size " +
             std::to_string(options->WorldSize());
    return ParseOutcome::kUsageError;
  }
  // Ranks on other hosts cannot receive a unique id made here, so a job that does not fit on
  // this host must say where its rendezvous is.
  bool spans_hosts = options->WorldSize() != options->num_ranks;
  if (spans_hosts && options->root.empty()) {
    *error = "a job with --world-size larger than -n needs --root HOST:PORT";
    return ParseOutcome::kUsageError;
  }
  return ParseOutcome::kRun;
}

std::string HexEncode(const batonUniqueId& id) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * sizeof(id.internal));
  for (char c : id.internal) {
    auto byte = static_cast<unsigned char>(c);
    hex.push_back(kDigits[byte >> 4]);
    hex.push_back(kDigits[byte & 0xf]);
  }
  return hex;
}

// Turns SIGCHLD and the forwarded signals into readable events on a signalfd, so the main loop
// waits for child exits, signals and rank output in one poll() and never misses a wakeup (a
// self-pipe would need handlers; a plain waitpid() loop could not watch output at the same time).
class SignalWatcher {
 public:
  // Blocks the watched signals and opens the signalfd. Must run before any thread exists: threads
  // inherit the mask, so the rendezvous thread that batonGetUniqueId starts keeps the signals
  // blocked too, and none can be delivered to it with its default action (killing batonrun).
  bool Init(std::string* error) {
    // Children must be reaped by us: an inherited SIGCHLD = SIG_IGN would make the kernel reap
    // them and hide their exit status.
    struct sigaction dfl = {};
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGCHLD, &dfl, &old_sigchld_);
    // A closed stdout (`batonrun ... | head`) must not kill batonrun before it has stopped the
    // ranks; writes then fail with EPIPE and the output is dropped.
    struct sigaction ign = {};
    ign.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &ign, &old_sigpipe_);

    sigset_t watched;
    sigemptyset(&watched);
    sigaddset(&watched, SIGCHLD);
    for (int sig : kForwardedSignals) {
      // A signal ignored on entry (nohup, a shell's background job) stays ignored, as shells
      // do: whoever started batonrun chose that, for the ranks too.
      struct sigaction current = {};
      sigaction(sig, nullptr, &current);
      if (current.sa_handler != SIG_IGN) sigaddset(&watched, sig);
    }
    if (sigprocmask(SIG_BLOCK, &watched, &old_mask_) != 0) {
      *error = std::string("cannot block signals: ") + strerror(errno);
      return false;
    }
    fd_.Reset(signalfd(-1, &watched, SFD_NONBLOCK | SFD_CLOEXEC));
    if (!fd_.valid()) {
      *error = std::string("cannot create a signalfd: ") + strerror(errno);
      return false;
    }
    return true;
  }

  int fd() const { return fd_.get(); }

  // Returns the signals received since the last call, without blocking.
  std::vector<int> Drain() {
    std::vector<int> signals;
    signalfd_siginfo info[16];
    for (;;) {
      ssize_t n = read(fd_.get(), info, sizeof(info));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      for (size_t k = 0; k < static_cast<size_t>(n) / sizeof(info[0]); ++k) {
        signals.push_back(static_cast<int>(info[k].ssi_signo));
      }
    }
    return signals;
  }

  // In a forked child before exec: gives the program the signal state batonrun was started with.
  // Only async-signal-safe calls, since batonrun has other threads.
  void RestoreInChild() const {
    sigaction(SIGCHLD, &old_sigchld_, nullptr);
    sigaction(SIGPIPE, &old_sigpipe_, nullptr);
    sigprocmask(SIG_SETMASK, &old_mask_, nullptr);
  }

 private:
  UniqueFd fd_;
  sigset_t old_mask_{};
  struct sigaction old_sigchld_ = {};
  struct sigaction old_sigpipe_ = {};
};

// One of batonrun's own output streams (stdout or stderr). Remembers a broken pipe so output
// for a reader that went away is dropped instead of failing again for every line.
class Sink {
 public:
  explicit Sink(int fd) : fd_(fd) {}

  void Write(std::string_view data) {
    while (!broken_ && !data.empty()) {
      ssize_t n = write(fd_, data.data(), data.size());
      if (n > 0) {
        data.remove_prefix(static_cast<size_t>(n));
      } else if (n < 0 && errno == EAGAIN) {
        // Inherited O_NONBLOCK stream: wait until it drains rather than losing lines.
        pollfd pfd = {fd_, POLLOUT, 0};
        poll(&pfd, 1, -1);
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else {
        broken_ = true;
      }
    }
  }

 private:
  int fd_;
  bool broken_ = false;
};

// Copies one output stream of a rank (the read end of its pipe) to a Sink, putting "[R] " in
// front of every line. Lines are gathered and written whole, so lines of different ranks never
// interleave mid-line, and each is passed on as soon as it is complete (line buffering).
class LineRelay {
 public:
  // A line this long with no newline is passed on anyway, so one rank printing without newlines
  // cannot make batonrun hold an unbounded amount of its output.
  static constexpr size_t kMaxLine = 64 * 1024;

  LineRelay(UniqueFd source, Sink* sink, std::string prefix)
      : source_(std::move(source)), sink_(sink), prefix_(std::move(prefix)) {}

  int fd() const { return source_.get(); }
  bool open() const { return source_.valid(); }

  // Reads what is available without blocking and passes on the complete lines. Closes the source
  // at end of file, passing on an unterminated last line as a line of its own.
  void Pump() {
    char buffer[16 * 1024];
    while (source_.valid()) {
      ssize_t n = read(source_.get(), buffer, sizeof(buffer));
      if (n > 0) {
        Consume(std::string_view(buffer, static_cast<size_t>(n)));
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else if (n < 0 && errno == EAGAIN) {
        return;
      } else {  // End of file, or an error that would only repeat.
        Close();
      }
    }
  }

  // The rank exited: passes on what it wrote and stops reading. Nothing later is waited for:
  // a background process the rank left behind may hold the pipe open for a long time.
  void Finish() {
    Pump();
    Close();
  }

 private:
  void Consume(std::string_view data) {
    std::string out;
    for (;;) {
      size_t newline = data.find('\n');
      if (newline == std::string_view::npos) break;
      out += prefix_;
      out += partial_;
      out += data.substr(0, newline + 1);
      partial_.clear();
      data.remove_prefix(newline + 1);
    }
    partial_ += data;
    if (partial_.size() >= kMaxLine) {
      out += prefix_;
      out += partial_;
      out += '\n';
      partial_.clear();
    }
    sink_->Write(out);
  }

  void Close() {
    if (!partial_.empty()) {
      sink_->Write(prefix_ + partial_ + "\n");
      partial_.clear();
    }
    source_.Reset();
  }

  UniqueFd source_;
  Sink* sink_;
  std::string prefix_;
  std::string partial_;  // Start of a line whose newline has not arrived yet.
};

// One rank of the job: its process and, with --prefix, the relays of its stdout and stderr.
struct Rank {
  int global_rank = 0;
  pid_t pid = -1;
  bool running = false;
  std::vector<LineRelay> relays;
};

std::string DescribeStatus(int status) {
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    const char* name = strsignal(sig);
    return "killed by signal " + std::to_string(sig) + " (" + (name ? name : "?") + ")";
  }
  return "exited with status " + std::to_string(WEXITSTATUS(status));
}

// Exit status a shell would report for a child with this wait status.
int ShellStatus(int status) {
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

// Runs one job: starts the ranks, relays their output, forwards signals, reaps the ranks, stops
// them all when one fails or time runs out, and works out batonrun's exit status.
class Job {
 public:
  // rendezvous_var is "BATON_UNIQUE_ID=..." or "BATON_ROOT=...", the same for every rank.
  Job(const Options& options, SignalWatcher* signals, std::string rendezvous_var)
      : options_(options),
        signals_(signals),
        rendezvous_var_(std::move(rendezvous_var)),
        stdout_sink_(STDOUT_FILENO),
        stderr_sink_(STDERR_FILENO) {}

  // Returns batonrun's exit status once every rank has been reaped.
  int Run() {
    start_time_ = Clock::now();
    BuildSharedParts();
    ranks_.resize(static_cast<size_t>(options_.num_ranks));
    for (int local = 0; local < options_.num_ranks && !stopping_; ++local) {
      if (!StartRank(local)) {
        launch_failed_ = true;
        Stop("");
      }
    }
    while (running_count_ > 0) WaitForEvents();
    // Output that arrived after the last exit (the loop ends as soon as the last rank is
    // reaped, and a rank's own output is flushed before that).
    for (Rank& rank : ranks_) {
      for (LineRelay& relay : rank.relays) relay.Finish();
    }
    if (timed_out_) return kExitTimeout;
    if (failure_status_) return *failure_status_;
    return launch_failed_ ? kExitLauncherError : 0;
  }

 private:
  // Everything the children need that does not depend on the rank, prepared once: after fork
  // the child may only make async-signal-safe calls (no allocation), since batonrun has threads.
  void BuildSharedParts() {
    std::vector<std::string> overridden(std::begin(kLaunchVariables), std::end(kLaunchVariables));
    for (const std::string& assignment : options_.exports) {
      overridden.push_back(assignment.substr(0, assignment.find('=')));
    }
    for (char** entry = environ; *entry != nullptr; ++entry) {
      std::string_view assignment = *entry;
      std::string_view name = assignment.substr(0, assignment.find('='));
      if (std::find(overridden.begin(), overridden.end(), name) == overridden.end()) {
        base_env_.emplace_back(assignment);
      }
    }
    base_env_.insert(base_env_.end(), options_.exports.begin(), options_.exports.end());
    base_env_.push_back(rendezvous_var_);
    base_env_.push_back("BATON_WORLD_SIZE=" + std::to_string(options_.WorldSize()));
    base_env_.push_back("BATON_LOCAL_SIZE=" + std::to_string(options_.num_ranks));

    for (const std::string& word : options_.command)
      argv_.push_back(const_cast<char*>(word.c_str()));
    argv_.push_back(nullptr);
    exec_error_prefix_ = "batonrun: cannot run '" + options_.command[0] + "': ";
  }

  // Forks and execs one rank. Returns false (after saying why) if it could not be started; a
  // failing exec is reported by the child itself and seen as exit status 127.
  bool StartRank(int local_rank) {
    Rank& rank = ranks_[static_cast<size_t>(local_rank)];
    rank.global_rank = options_.RankOffset() + local_rank;

    std::vector<std::string> own_env = {
        "BATON_RANK=" + std::to_string(rank.global_rank),
        "BATON_LOCAL_RANK=" + std::to_string(local_rank),
    };
    std::vector<char*> envp;
    envp.reserve(base_env_.size() + own_env.size() + 1);
    for (const std::string& s : base_env_) envp.push_back(const_cast<char*>(s.c_str()));
    for (const std::string& s : own_env) envp.push_back(const_cast<char*>(s.c_str()));
    envp.push_back(nullptr);

    // With --prefix, the child's stdout and stderr are pipes read by this process. Both ends are
    // close-on-exec so no rank (nor the program) inherits another's pipe and keeps it open.
    UniqueFd child_out, child_err;
    if (options_.prefix) {
      // Appended, not concatenated: GCC 12 warns falsely (-Wrestrict) on "[" + std::string.
      std::string prefix = "[";
      prefix += std::to_string(rank.global_rank);
      prefix += "] ";
      for (int stream = 0; stream < 2; ++stream) {
        int fds[2];
        if (pipe2(fds, O_CLOEXEC) != 0) {
          fprintf(stderr, "batonrun: cannot create a pipe for rank %d: %s\n", rank.global_rank,
                  strerror(errno));
          rank.relays.clear();
          return false;
        }
        UniqueFd read_end(fds[0]);
        (stream == 0 ? child_out : child_err).Reset(fds[1]);
        fcntl(read_end.get(), F_SETFL, fcntl(read_end.get(), F_GETFL) | O_NONBLOCK);
        rank.relays.emplace_back(std::move(read_end), stream == 0 ? &stdout_sink_ : &stderr_sink_,
                                 prefix);
      }
    }

    // Anything buffered in stdio would otherwise be written again by the child.
    fflush(nullptr);
    const pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
      fprintf(stderr, "batonrun: cannot start rank %d: fork: %s\n", rank.global_rank,
              strerror(errno));
      rank.relays.clear();
      return false;
    }
    if (pid == 0) ExecChild(parent, child_out.get(), child_err.get(), envp.data());

    rank.pid = pid;
    rank.running = true;
    ++running_count_;
    return true;
  }

  // Runs in the forked child; never returns. Async-signal-safe calls only.
  [[noreturn]] void ExecChild(pid_t parent, int out_fd, int err_fd, char** envp) {
    // The rank must not outlive batonrun, even when batonrun is SIGKILLed and cannot stop it.
    // If batonrun died before prctl took effect, the signal will never come: leave now.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(kExitLauncherError);
    // dup2 clears close-on-exec on the copies, so only fds 1 and 2 survive the exec.
    if (out_fd >= 0 && dup2(out_fd, STDOUT_FILENO) < 0) _exit(kExitLauncherError);
    if (err_fd >= 0 && dup2(err_fd, STDERR_FILENO) < 0) _exit(kExitLauncherError);
    signals_->RestoreInChild();

    execvpe(argv_[0], argv_.data(), envp);

    // strerrordesc_np returns a static string; strerror may allocate for unknown codes.
    const char* reason = strerrordesc_np(errno);
    if (reason == nullptr) reason = "unknown error";
    iovec parts[] = {
        {const_cast<char*>(exec_error_prefix_.data()), exec_error_prefix_.size()},
        {const_cast<char*>(reason), strlen(reason)},
        {const_cast<char*>("\n"), 1},
    };
    ssize_t ignored = writev(STDERR_FILENO, parts, 3);
    (void)ignored;
    _exit(kExitCannotRun);
  }

  // Sleeps until a signal, output or a deadline, then handles whatever happened.
  void WaitForEvents() {
    std::vector<pollfd> fds;
    std::vector<LineRelay*> relays;
    fds.push_back({signals_->fd(), POLLIN, 0});
    for (Rank& rank : ranks_) {
      for (LineRelay& relay : rank.relays) {
        if (!relay.open()) continue;
        fds.push_back({relay.fd(), POLLIN, 0});
        relays.push_back(&relay);
      }
    }

    int n = poll(fds.data(), fds.size(), PollTimeoutMs());
    if (n < 0 && errno != EINTR) {
      // Cannot happen with valid arguments; avoid spinning if it somehow does.
      perror("batonrun: poll");
      sleep(1);
    }
    if (n > 0) {
      // Output first, so a rank's last lines come before the message about its exit.
      for (size_t k = 1; k < fds.size(); ++k) {
        if (fds[k].revents != 0) relays[k - 1]->Pump();
      }
      if (fds[0].revents != 0) HandleSignals();
    }
    CheckDeadlines();
  }

  int PollTimeoutMs() const {
    std::optional<Clock::time_point> deadline;
    if (stopping_ && !killed_) {
      deadline = kill_deadline_;
    } else if (!stopping_ && options_.timeout_s > 0) {
      deadline = start_time_ + Seconds(options_.timeout_s);
    }
    if (!deadline) return -1;
    auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline - Clock::now()).count();
    return static_cast<int>(std::clamp<decltype(left)>(left, 0, INT_MAX));
  }

  static Clock::duration Seconds(double s) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  }

  void HandleSignals() {
    for (int sig : signals_->Drain()) {
      if (sig == SIGCHLD) {
        ReapChildren();
      } else {
        SignalAll(sig);
      }
    }
  }

  void ReapChildren() {
    // SIGCHLD is not queued per child: one notification may stand for several exits.
    for (;;) {
      int status = 0;
      pid_t pid = waitpid(-1, &status, WNOHANG);
      if (pid < 0 && errno == EINTR) continue;
      if (pid <= 0) return;
      auto it = std::find_if(ranks_.begin(), ranks_.end(),
                             [pid](const Rank& r) { return r.running && r.pid == pid; });
      if (it != ranks_.end()) OnRankExit(*it, status);
    }
  }

  void OnRankExit(Rank& rank, int status) {
    rank.running = false;
    --running_count_;
    for (LineRelay& relay : rank.relays) relay.Finish();
    bool failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    // Only the first failure is reported: later ones are usually ranks we stopped, or peers
    // reacting to the first, and would bury the cause.
    if (!failed || stopping_) return;
    failure_status_ = ShellStatus(status);
    std::string message = "batonrun: rank " + std::to_string(rank.global_rank) + " (pid " +
                          std::to_string(rank.pid) + ") " + DescribeStatus(status);
    if (running_count_ > 0) message += "; stopping the other ranks";
    stderr_sink_.Write(message + "\n");
    Stop("");
  }

  void CheckDeadlines() {
    Clock::time_point now = Clock::now();
    if (!stopping_ && options_.timeout_s > 0 && now >= start_time_ + Seconds(options_.timeout_s)) {
      timed_out_ = true;
      char message[128];
      snprintf(message, sizeof(message), "batonrun: job timed out after %g s; stopping all ranks\n",
               options_.timeout_s);
      Stop(message);
    }
    if (stopping_ && !killed_ && now >= kill_deadline_) {
      killed_ = true;
      SignalAll(SIGKILL);
    }
  }

  // Asks every running rank to terminate, and schedules SIGKILL for those still running after
  // the grace period, which gives them a chance to flush output and release resources.
  void Stop(const std::string& message) {
    if (stopping_) return;
    if (!message.empty()) stderr_sink_.Write(message);
    stopping_ = true;
    kill_deadline_ = Clock::now() + Seconds(options_.kill_grace_s);
    SignalAll(SIGTERM);
  }

  void SignalAll(int sig) {
    for (const Rank& rank : ranks_) {
      // A rank reaped already must not be signaled: its pid may belong to another process now.
      if (rank.running) kill(rank.pid, sig);
    }
  }

  const Options& options_;
  SignalWatcher* signals_;
  const std::string rendezvous_var_;
  Sink stdout_sink_;
  Sink stderr_sink_;

  // Prepared before forking (see BuildSharedParts).
  std::vector<std::string> base_env_;
  std::vector<char*> argv_;
  std::string exec_error_prefix_;

  std::vector<Rank> ranks_;
  int running_count_ = 0;
  Clock::time_point start_time_;
  bool stopping_ = false;  // SIGTERM sent to all ranks.
  bool killed_ = false;    // SIGKILL sent to all ranks.
  Clock::time_point kill_deadline_;
  bool timed_out_ = false;
  bool launch_failed_ = false;
  std::optional<int> failure_status_;  // Exit status of the first rank that failed.
};

}  // namespace

int main(int argc, char** argv) {
  Options options;
  std::string error;
  switch (ParseArgs(argc, argv, &options, &error)) {
    case ParseOutcome::kHelp:
      fputs(kUsage, stdout);
      return 0;
    case ParseOutcome::kVersion:
      printf("batonrun (Baton) %d.%d.%d\n", BATON_MAJOR, BATON_MINOR, BATON_PATCH);
      return 0;
    case ParseOutcome::kUsageError:
      fprintf(stderr, "batonrun: %s\nTry 'batonrun --help' for more information.\n", error.c_str());
      return kExitUsage;
    case ParseOutcome::kRun:
      break;
  }

  // Before batonGetUniqueId, which starts a thread (see SignalWatcher::Init).
  SignalWatcher signals;
  if (!signals.Init(&error)) {
    fprintf(stderr, "batonrun: %s\n", error.c_str());
    return kExitLauncherError;
  }

  std::string rendezvous_var;
  if (!options.root.empty()) {
    // Global rank 0, wherever it runs, listens on --root; every rank connects there.
    rendezvous_var = "BATON_ROOT=" + options.root;
  } else {
    // The listener lives in this process, served by a library thread, for as long as batonrun
    // runs: no port is picked here and handed over, so no other process can take it meanwhile.
    // A single-host job needs no network at all: unless the user chose an interface, the
    // rendezvous and every rank's sockets stay on loopback (the ranks inherit this variable).
    setenv("BATON_SOCKET_IFNAME", "lo", /*overwrite=*/0);
    batonUniqueId id;
    batonResult_t result = batonGetUniqueId(&id);
    if (result != batonSuccess) {
      fprintf(stderr, "batonrun: cannot create the rendezvous: batonGetUniqueId failed (%d): %s\n",
              static_cast<int>(result), batonGetLastError(nullptr));
      return kExitLauncherError;
    }
    rendezvous_var = "BATON_UNIQUE_ID=" + HexEncode(id);
  }

  Job job(options, &signals, std::move(rendezvous_var));
  int status = job.Run();
  fflush(stdout);
  return status;
}
