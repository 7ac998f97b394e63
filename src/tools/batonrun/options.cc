#include "tools/batonrun/options.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "topology/binding.h"

namespace batonrun {

const char kUsage[] =
    "Usage: batonrun [options] -n N prog [args...]\n"
    "       batonrun -H HOST[:SLOTS],... | --hostfile FILE [-n N] [options] prog [args...]\n"
    "Starts N ranks of a Baton program on this host, or on several hosts over ssh.\n"
    "\n"
    "Options:\n"
    "  -n, --np N             number of ranks to start on this host (required without -H);\n"
    "                         with -H or --hostfile: of the job (default: one per slot)\n"
    "  -H, --host LIST        hosts to run on, \"host0:2,host1:2\" (slots per host, default 1);\n"
    "                         ranks fill each host's slots in order\n"
    "  --hostfile FILE        hosts to run on, one \"HOST slots=N\" a line ('#' comments)\n"
    "  --launch-agent CMD     start the ranks of another host with \"CMD HOST COMMAND\"\n"
    "                         (default ssh; may have arguments, \"ssh -p 2222\"); ranks of\n"
    "                         localhost or this host's name start directly\n"
    "  -p, --prefix           prefix each output line with \"[R] \", R the global rank\n"
    "                         (\"[R@HOST] \" in a job started with -H or --hostfile)\n"
    "  -x NAME[=VALUE]        export NAME (with VALUE, or batonrun's own value) to the ranks;\n"
    "                         may be repeated; other hosts get these and every BATON_*\n"
    "  --timeout SECONDS      stop the job and exit with 124 if it runs longer\n"
    "  --kill-grace SECONDS   time between SIGTERM and SIGKILL when stopping ranks (default 5)\n"
    "  --world-size W         one batonrun per host by hand: total number of ranks\n"
    "  --rank-offset K        one batonrun per host by hand: global rank of this host's\n"
    "                         first rank\n"
    "  --root HOST:PORT       one batonrun per host by hand: rendezvous address, hosted by\n"
    "                         global rank 0\n"
    "  --bind-to POLICY       core, numa, none or auto (default, or BATON_BIND): auto binds\n"
    "                         each rank to a core of its own, spread over NUMA nodes, when\n"
    "                         there are enough cores, else to a NUMA node (one NUMA\n"
    "                         node: the cores shared round robin)\n"
    "  --report-bindings      print each rank's CPUs to stderr\n"
    "  --elastic              a rank killed by a signal does not stop the job: the others\n"
    "                         go on without it (batonCommShrink); a rank that exits with a\n"
    "                         non-zero status still stops it (one host only)\n"
    "  --replace              with --elastic: start a replacement for each rank killed (at\n"
    "                         most -n in all); it joins the running job with batonCommGrow\n"
    "  --dump PID             print the flight recorders (last calls, and where the ranks\n"
    "                         diverge) of the ranks of batonrun PID, or of rank PID, and exit\n"
    "  --merge-trace OUT IN...  merge timelines (BATON_TRACE_FILE files) into OUT and exit\n"
    "  -h, --help             show this help and exit\n"
    "  --version              show the version and exit\n"
    "\n"
    "Each rank gets BATON_RANK, BATON_WORLD_SIZE, BATON_LOCAL_RANK, BATON_LOCAL_SIZE, and\n"
    "either BATON_UNIQUE_ID (single host: batonrun hosts the rendezvous) or BATON_ROOT\n"
    "(with --root). If a rank fails, the others are stopped and batonrun exits with the\n"
    "failed rank's status (128+N for signal N).\n"
    "\n"
    "With -H or --hostfile, batonrun runs itself (the same path) on every host through the\n"
    "launch agent, with --world-size, --rank-offset and the job's environment (given on the\n"
    "agent's stdin, so the rendezvous secret is on no command line); the rendezvous is served\n"
    "here, on BATON_SOCKET_IFNAME or the interface of the route to the first other host. A rank\n"
    "that fails, or a host whose agent dies, stops the job on every host.\n"
    "\n"
    "Signals: SIGINT, SIGTERM, SIGHUP, SIGQUIT and SIGUSR2 sent to batonrun are passed on\n"
    "to every rank. SIGUSR1 is not: it makes batonrun print the flight recorders of its\n"
    "ranks to stderr (as --dump) and the job goes on; `kill -USR1 PID` from another\n"
    "terminal shows where a hung job waits.\n";

namespace {

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

}  // namespace

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
    } else if (arg.size() > 2 && (arg[1] == 'n' || arg[1] == 'x' || arg[1] == 'H') &&
               arg != "-np") {
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
    if (name == "-p" || name == "--prefix" || name == "--report-bindings" || name == "--elastic" ||
        name == "--replace") {
      if (inline_value) {
        *error = "option '" + std::string(name) + "' takes no value";
        return ParseOutcome::kUsageError;
      }
      bool* flag = name == "--report-bindings" ? &options->report_bindings
                   : name == "--elastic"       ? &options->elastic
                   : name == "--replace"       ? &options->replace
                                               : &options->prefix;
      *flag = true;
      continue;
    }

    if (name == "--dump") {
      std::optional<std::string> value = take_value();
      if (!value) return ParseOutcome::kUsageError;
      char* end = nullptr;
      const long pid = strtol(value->c_str(), &end, 10);
      if (value->empty() || *end != '\0' || pid <= 0 || pid > INT32_MAX)
        return bad_value(*value, "a process id");
      options->dump_pid = static_cast<int>(pid);
      return ParseOutcome::kDump;
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
    } else if (name == "-H" || name == "--host" || name == "--hostfile" ||
               name == "--launch-agent" || name == "--remote-host") {
      std::optional<std::string> value = take_value();
      if (!value) return ParseOutcome::kUsageError;
      if (value->empty()) return bad_value(*value, "a non-empty value");
      if (name == "--hostfile") {
        options->hostfile = *value;
      } else if (name == "--launch-agent") {
        options->launch_agent = *value;
      } else if (name == "--remote-host") {
        options->remote_host = *value;
      } else {
        // Repeated -H add up, as in mpirun.
        options->host_list += (options->host_list.empty() ? "" : ",") + *value;
      }
    } else if (name == "--bind-to") {
      std::optional<std::string> value = take_value();
      if (!value) return ParseOutcome::kUsageError;
      baton::BindPolicy policy;
      if (!baton::ParseBindPolicy(*value, &policy))
        return bad_value(*value, "core, numa, none or auto");
      options->bind_to = *value;
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
  if (options->replace && !options->elastic) {
    *error = "--replace needs --elastic (a job that stops when a rank dies has nothing to replace)";
    return ParseOutcome::kUsageError;
  }
  // A host's batonrun stops its ranks when one fails and the launcher stops every host when one
  // does: the multi-host paths would have to learn the elastic rules first.
  if (options->elastic && (options->MultiHost() || !options->remote_host.empty() ||
                           options->world_size || !options->root.empty())) {
    *error = "--elastic runs jobs of one host (no -H, --hostfile, --world-size or --root)";
    return ParseOutcome::kUsageError;
  }
  if (options->MultiHost()) {
    if (!options->host_list.empty() && !options->hostfile.empty()) {
      *error = "-H and --hostfile cannot be combined";
      return ParseOutcome::kUsageError;
    }
    if (options->world_size || options->rank_offset || !options->root.empty() ||
        !options->remote_host.empty()) {
      *error =
          "-H and --hostfile place every rank: --world-size, --rank-offset and --root "
          "are for jobs started by hand, one batonrun per host";
      return ParseOutcome::kUsageError;
    }
    if (options->command.empty()) {
      *error = "missing the program to run";
      return ParseOutcome::kUsageError;
    }
    return ParseOutcome::kRun;  // -n is checked against the hosts' slots once they are read.
  }
  if (!options->remote_host.empty() && (!options->world_size || !options->root.empty())) {
    *error = "--remote-host is batonrun's own: it needs --world-size and no --root";
    return ParseOutcome::kUsageError;
  }
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
  if (spans_hosts && options->root.empty() && options->remote_host.empty()) {
    *error = "a job with --world-size larger than -n needs --root HOST:PORT";
    return ParseOutcome::kUsageError;
  }
  return ParseOutcome::kRun;
}

}  // namespace batonrun
