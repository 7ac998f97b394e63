// The launching side of a multi-host job: one batonrun per host, started through the launch
// agent and supervised like the ranks of a single-host job (see job.cc).
#include "tools/batonrun/remote_launch.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <poll.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "base/settings.h"
#include "baton.h"
#include "bootstrap/unique_id.h"
#include "tools/batonrun/hosts.h"
#include "tools/batonrun/job.h"
#include "tools/batonrun/output_relay.h"

extern char** environ;

namespace batonrun {
namespace {

using baton::SettingName;

// Time a host's batonrun gets to stop its ranks (its own --kill-grace) and exit after being asked
// to, before its agent is sent SIGTERM.
constexpr double kHostStopSlackS = 3;

// BATON_* variables that describe one host's part of the job: each host's batonrun sets its own.
constexpr std::string_view kPerHostVariables[] = {SettingName::rank,       SettingName::world_size,
                                                  SettingName::local_rank, SettingName::local_size,
                                                  SettingName::unique_id,  SettingName::root};

// Every BATON_* variable of batonrun's environment (as mpirun forwards OMPI_*), then the -x
// exports, which win over them.
std::vector<std::string> ForwardedEnvironment(const Options& options) {
  std::vector<std::string> env;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    std::string_view assignment = *entry;
    std::string_view name = assignment.substr(0, assignment.find('='));
    if (!name.starts_with("BATON_") ||
        std::find(std::begin(kPerHostVariables), std::end(kPerHostVariables), name) !=
            std::end(kPerHostVariables))
      continue;
    env.emplace_back(assignment);
  }
  env.insert(env.end(), options.exports.begin(), options.exports.end());
  return env;
}

// The interface through which this host reaches HOST (the route's source address), or "" when
// HOST does not resolve here. No packet is sent: connect() on a UDP socket only picks the route.
std::string InterfaceTowards(std::string host) {
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  addrinfo hints = {};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), "9", &hints, &found) != 0) return "";
  std::string ifname;
  baton::Fd sock(socket(found->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  sockaddr_storage local = {};
  socklen_t len = sizeof(local);
  const bool routed = sock.valid() && connect(sock.get(), found->ai_addr, found->ai_addrlen) == 0 &&
                      getsockname(sock.get(), reinterpret_cast<sockaddr*>(&local), &len) == 0;
  freeaddrinfo(found);
  ifaddrs* list = nullptr;
  if (!routed || getifaddrs(&list) != 0) return "";
  for (ifaddrs* it = list; it != nullptr && ifname.empty(); it = it->ifa_next) {
    if (it->ifa_addr == nullptr || it->ifa_addr->sa_family != local.ss_family) continue;
    if (local.ss_family == AF_INET) {
      auto* a = reinterpret_cast<sockaddr_in*>(it->ifa_addr);
      auto* b = reinterpret_cast<sockaddr_in*>(&local);
      if (a->sin_addr.s_addr == b->sin_addr.s_addr) ifname = it->ifa_name;
    } else if (local.ss_family == AF_INET6) {
      auto* a = reinterpret_cast<sockaddr_in6*>(it->ifa_addr);
      auto* b = reinterpret_cast<sockaddr_in6*>(&local);
      if (memcmp(&a->sin6_addr, &b->sin6_addr, sizeof(in6_addr)) == 0) ifname = it->ifa_name;
    }
  }
  freeifaddrs(list);
  return ifname;
}

std::string DescribeStatus(int status) {
  if (WIFSIGNALED(status)) {
    const char* name = strsignal(WTERMSIG(status));
    return "killed by signal " + std::to_string(WTERMSIG(status)) + " (" + (name ? name : "?") +
           ")";
  }
  return "exited with status " + std::to_string(WEXITSTATUS(status));
}

// One host's batonrun: the agent process that runs it (or, for this host, the batonrun itself).
struct HostProcess {
  HostRanks host;
  bool local = false;
  pid_t pid = -1;
  bool running = false;
  baton::Fd requests;  // The write end of the agent's stdin.
  std::vector<LineRelay> relays;
  std::vector<std::string> argv;
};

class MultiHostJob {
 public:
  MultiHostJob(const Options& options, SignalWatcher* signals, std::vector<HostRanks> placement,
               std::string wire_environment)
      : options_(options),
        signals_(signals),
        environment_(std::move(wire_environment)),
        stdout_sink_(STDOUT_FILENO),
        stderr_sink_(STDERR_FILENO) {
    for (HostRanks& host : placement) {
      world_size_ += host.num_ranks;
      hosts_.push_back({});
      hosts_.back().local = IsLocalHost(host.name);
      hosts_.back().host = std::move(host);
    }
  }

  int Run();

 private:
  void BuildCommand(HostProcess& h) const;
  bool Start(HostProcess& h);
  void WaitForEvents();
  int PollTimeoutMs() const;
  void HandleSignals();
  void Reap();
  void OnHostExit(HostProcess& h, int status);
  void CheckDeadlines();
  void Stop(char request);
  void SendAll(char request);
  void SignalAll(int sig);
  std::string Describe(const HostProcess& h) const;

  static Clock::duration Seconds(double s) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  }

  const Options& options_;
  SignalWatcher* signals_;
  const std::string environment_;
  Sink stdout_sink_;
  Sink stderr_sink_;
  std::vector<HostProcess> hosts_;
  int world_size_ = 0;
  int running_count_ = 0;
  Clock::time_point start_time_;
  bool stopping_ = false;
  Clock::time_point term_deadline_;  // SIGTERM to the agents still running.
  bool termed_ = false;
  Clock::time_point kill_deadline_;  // Then SIGKILL.
  bool killed_ = false;
  bool timed_out_ = false;
  bool launch_failed_ = false;
  int interrupted_by_ = 0;
  std::optional<int> failure_status_;
};

std::string MultiHostJob::Describe(const HostProcess& h) const {
  const HostRanks& r = h.host;
  std::string ranks = r.num_ranks == 1 ? "rank " + std::to_string(r.first_rank)
                                       : "ranks " + std::to_string(r.first_rank) + "-" +
                                             std::to_string(r.first_rank + r.num_ranks - 1);
  return "host " + r.name + " (" + ranks + ")";
}

void MultiHostJob::BuildCommand(HostProcess& h) const {
  char self[PATH_MAX] = {};
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  std::vector<std::string> args = {n > 0 ? std::string(self, static_cast<size_t>(n)) : "batonrun",
                                   "--remote-host",
                                   h.host.name,
                                   "-n",
                                   std::to_string(h.host.num_ranks),
                                   "--world-size",
                                   std::to_string(world_size_),
                                   "--rank-offset",
                                   std::to_string(h.host.first_rank),
                                   "--kill-grace",
                                   std::to_string(options_.kill_grace_s)};
  if (options_.prefix) args.push_back("--prefix");
  if (options_.report_bindings) args.push_back("--report-bindings");
  if (!options_.bind_to.empty()) args.insert(args.end(), {"--bind-to", options_.bind_to});
  args.push_back("--");
  args.insert(args.end(), options_.command.begin(), options_.command.end());
  if (h.local) {
    h.argv = std::move(args);
    return;
  }
  // One word for the agent, run by the remote shell (ssh joins its arguments for it anyway).
  // Like mpirun, the ranks start in this directory when the host has it.
  char cwd[PATH_MAX] = {};
  std::string remote;
  // Appended, not concatenated: GCC 12 warns falsely (-Wrestrict) on " " + std::string.
  if (getcwd(cwd, sizeof(cwd)) != nullptr) {
    remote += "cd ";
    remote += ShellQuote(cwd);
    remote += " 2>/dev/null; ";
  }
  remote += "exec";
  for (const std::string& arg : args) {
    remote += ' ';
    remote += ShellQuote(arg);
  }
  h.argv = SplitAgent(options_.launch_agent);
  h.argv.push_back(h.host.name);
  h.argv.push_back(std::move(remote));
}

bool MultiHostJob::Start(HostProcess& h) {
  BuildCommand(h);
  std::vector<char*> argv;
  for (std::string& word : h.argv) argv.push_back(word.data());
  argv.push_back(nullptr);
  // Output comes through pipes read here and is passed on whole lines at a time, so lines of
  // different hosts never mix; the hosts' batonruns put the prefixes on.
  int in[2], out[2], err[2];
  if (pipe2(in, O_CLOEXEC) != 0) return false;
  baton::Fd in_read(in[0]);
  h.requests.reset(in[1]);
  baton::Fd child_out, child_err;
  for (int stream = 0; stream < 2; ++stream) {
    int* fds = stream == 0 ? out : err;
    if (pipe2(fds, O_CLOEXEC) != 0) return false;
    baton::Fd read_end(fds[0]);
    (stream == 0 ? child_out : child_err).reset(fds[1]);
    fcntl(read_end.get(), F_SETFL, fcntl(read_end.get(), F_GETFL) | O_NONBLOCK);
    h.relays.emplace_back(std::move(read_end), stream == 0 ? &stdout_sink_ : &stderr_sink_, "");
  }
  std::string exec_error = "batonrun: cannot run " +
                           std::string(h.local ? "batonrun" : "the launch agent") + " '" +
                           h.argv[0] + "' for " + Describe(h) + ": ";
  fflush(nullptr);
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    fprintf(stderr, "batonrun: cannot start %s: fork: %s\n", Describe(h).c_str(), strerror(errno));
    return false;
  }
  if (pid == 0) {
    // As for ranks (job.cc): the agent must not outlive batonrun. When it dies, ssh's connection
    // closes and the remote batonrun stops its ranks.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(kExitLauncherError);
    if (dup2(in_read.get(), STDIN_FILENO) < 0 || dup2(child_out.get(), STDOUT_FILENO) < 0 ||
        dup2(child_err.get(), STDERR_FILENO) < 0)
      _exit(kExitLauncherError);
    signals_->RestoreInChild();
    execvp(argv[0], argv.data());
    // strerrordesc_np returns a static string; strerror may allocate for unknown codes.
    const char* reason = strerrordesc_np(errno);
    if (reason == nullptr) reason = "unknown error";
    iovec parts[] = {{exec_error.data(), exec_error.size()},
                     {const_cast<char*>(reason), strlen(reason)},
                     {const_cast<char*>("\n"), 1}};
    ssize_t ignored = writev(STDERR_FILENO, parts, 3);
    (void)ignored;
    _exit(kExitCannotRun);
  }
  h.pid = pid;
  h.running = true;
  ++running_count_;
  // The environment fits the pipe (64 KiB): a short write is an environment to refuse, not to
  // wait for.
  fcntl(h.requests.get(), F_SETFL, fcntl(h.requests.get(), F_GETFL) | O_NONBLOCK);
  ssize_t written = write(h.requests.get(), environment_.data(), environment_.size());
  if (written != static_cast<ssize_t>(environment_.size())) {
    fprintf(stderr, "batonrun: cannot send the job's environment to %s: %s\n", Describe(h).c_str(),
            written < 0 ? strerror(errno) : "larger than a pipe holds");
    return false;
  }
  return true;
}

int MultiHostJob::Run() {
  start_time_ = Clock::now();
  for (HostProcess& h : hosts_) {
    if (stopping_) break;
    if (!Start(h)) {
      launch_failed_ = true;
      Stop(kStopRequest);
    }
  }
  while (running_count_ > 0) WaitForEvents();
  for (HostProcess& h : hosts_) {
    for (LineRelay& relay : h.relays) relay.Finish();
  }
  if (timed_out_) return kExitTimeout;
  if (failure_status_) return *failure_status_;
  if (interrupted_by_ != 0) return 128 + interrupted_by_;
  return launch_failed_ ? kExitLauncherError : 0;
}

void MultiHostJob::WaitForEvents() {
  std::vector<pollfd> fds = {{signals_->fd(), POLLIN, 0}};
  std::vector<LineRelay*> relays;
  for (HostProcess& h : hosts_) {
    for (LineRelay& relay : h.relays) {
      if (!relay.open()) continue;
      fds.push_back({relay.fd(), POLLIN, 0});
      relays.push_back(&relay);
    }
  }
  int n = poll(fds.data(), fds.size(), PollTimeoutMs());
  if (n < 0 && errno != EINTR) {
    perror("batonrun: poll");
    sleep(1);
  }
  if (n > 0) {
    for (size_t k = 1; k < fds.size(); ++k) {
      if (fds[k].revents != 0) relays[k - 1]->Pump();
    }
    if (fds[0].revents != 0) HandleSignals();
  }
  CheckDeadlines();
}

int MultiHostJob::PollTimeoutMs() const {
  std::optional<Clock::time_point> deadline;
  if (stopping_ && !termed_) {
    deadline = term_deadline_;
  } else if (stopping_ && !killed_) {
    deadline = kill_deadline_;
  } else if (!stopping_ && options_.timeout_s > 0) {
    deadline = start_time_ + Seconds(options_.timeout_s);
  }
  if (!deadline) return -1;
  auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<decltype(left)>(left, 0, INT_MAX));
}

void MultiHostJob::HandleSignals() {
  for (int sig : signals_->Drain()) {
    if (sig == SIGCHLD) {
      Reap();
    } else if (sig == kDumpSignal) {
      // The flight recorders are files on the hosts: their batonruns print them.
      SendAll(kDumpRequest);
    } else if (!stopping_) {
      interrupted_by_ = sig;
      const char* name = strsignal(sig);
      stderr_sink_.Write("batonrun: got signal " + std::to_string(sig) + " (" +
                         (name ? name : "?") + "); stopping the job on every host\n");
      Stop(kStopRequest);
    }
  }
}

void MultiHostJob::Reap() {
  for (;;) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid < 0 && errno == EINTR) continue;
    if (pid <= 0) return;
    for (HostProcess& h : hosts_) {
      if (h.running && h.pid == pid) OnHostExit(h, status);
    }
  }
}

void MultiHostJob::OnHostExit(HostProcess& h, int status) {
  h.running = false;
  --running_count_;
  h.requests.reset();
  for (LineRelay& relay : h.relays) relay.Finish();
  const bool failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  if (!failed || stopping_) return;
  // The host's batonrun has said which rank failed; this names the host, or the agent.
  failure_status_ = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
  std::string message = "batonrun: " + Describe(h) + " " + DescribeStatus(status);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 255 && !h.local)
    message += " (255: the launch agent may have failed to reach it)";
  if (running_count_ > 0) message += "; stopping the job on the other hosts";
  stderr_sink_.Write(message + "\n");
  Stop(kStopRequest);
}

void MultiHostJob::CheckDeadlines() {
  const Clock::time_point now = Clock::now();
  if (!stopping_ && options_.timeout_s > 0 && now >= start_time_ + Seconds(options_.timeout_s)) {
    timed_out_ = true;
    char message[128];
    snprintf(message, sizeof(message),
             "batonrun: job timed out after %g s; stopping all ranks on every host\n",
             options_.timeout_s);
    stderr_sink_.Write(message);
    Stop(kTimeoutRequest);
  }
  if (stopping_ && !termed_ && now >= term_deadline_) {
    termed_ = true;
    SignalAll(SIGTERM);
  }
  if (stopping_ && termed_ && !killed_ && now >= kill_deadline_) {
    killed_ = true;
    SignalAll(SIGKILL);
  }
}

void MultiHostJob::Stop(char request) {
  if (stopping_) return;
  stopping_ = true;
  SendAll(request);
  // Closing stdin is the request too, for a host whose pipe was full or that missed the byte.
  for (HostProcess& h : hosts_) h.requests.reset();
  term_deadline_ = Clock::now() + Seconds(options_.kill_grace_s + kHostStopSlackS);
  kill_deadline_ = term_deadline_ + Seconds(options_.kill_grace_s);
}

void MultiHostJob::SendAll(char request) {
  for (HostProcess& h : hosts_) {
    if (h.running && h.requests.valid()) {
      ssize_t ignored = write(h.requests.get(), &request, 1);
      (void)ignored;
    }
  }
}

void MultiHostJob::SignalAll(int sig) {
  for (const HostProcess& h : hosts_) {
    if (h.running) kill(h.pid, sig);
  }
}

}  // namespace

bool ServeRendezvous(std::string* assignment) {
  batonUniqueId id;
  const batonResult_t result = batonGetUniqueId(&id);
  if (result != batonSuccess) {
    fprintf(stderr, "batonrun: cannot create the rendezvous: batonGetUniqueId failed (%d): %s\n",
            static_cast<int>(result), batonGetLastError(nullptr));
    return false;
  }
  *assignment = std::string(SettingName::unique_id) + "=" + baton::UniqueIdToHex(id);
  return true;
}

int RunMultiHostJob(const Options& options, SignalWatcher* signals) {
  std::vector<HostSlots> hosts;
  std::vector<HostRanks> placement;
  std::string error;
  const bool parsed = options.hostfile.empty() ? ParseHostList(options.host_list, &hosts, &error)
                                               : ReadHostfile(options.hostfile, &hosts, &error);
  if (!parsed || !PlaceRanks(hosts, options.num_ranks, &placement, &error)) {
    fprintf(stderr, "batonrun: %s\n", error.c_str());
    return kExitUsage;
  }
  if (SplitAgent(options.launch_agent).empty()) {
    fprintf(stderr, "batonrun: --launch-agent is blank\n");
    return kExitUsage;
  }
  // The forwarded environment is taken before the interface is chosen for the rendezvous below:
  // that choice is this host's, the other hosts make their own.
  std::vector<std::string> env = ForwardedEnvironment(options);
  auto remote = std::find_if(placement.begin(), placement.end(),
                             [](const HostRanks& h) { return !IsLocalHost(h.name); });
  if (remote == placement.end()) {
    setenv(SettingName::socket_ifname, "lo", /*overwrite=*/0);
  } else if (getenv(SettingName::socket_ifname) == nullptr) {
    std::string ifname = InterfaceTowards(remote->name);
    if (!ifname.empty()) setenv(SettingName::socket_ifname, ifname.c_str(), /*overwrite=*/0);
  }
  std::string rendezvous_var;
  if (!ServeRendezvous(&rendezvous_var)) return kExitLauncherError;
  env.push_back(std::move(rendezvous_var));
  MultiHostJob job(options, signals, std::move(placement), EncodeEnvironment(env));
  return job.Run();
}

}  // namespace batonrun
