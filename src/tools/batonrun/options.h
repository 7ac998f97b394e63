// batonrun's command line: what it accepts and how it is checked.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace batonrun {

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
  std::string bind_to;               // --bind-to; empty: BATON_BIND, else auto.
  bool report_bindings = false;      // --report-bindings
  int dump_pid = 0;                  // --dump PID: print its ranks' flight recorders and exit
  // --elastic: a rank that dies of a signal does not stop the job (the others must go on without
  // it, batonCommShrink); --replace: and a replacement rank is started in its place, which joins
  // the running job with batonCommGrow (docs/reliability.md, "Elastic jobs").
  bool elastic = false;
  bool replace = false;
  // Multi-host jobs started from here (-H or --hostfile); both empty: the ranks run on this host.
  std::string host_list;             // -H, --host: "host0:2,host1:2"
  std::string hostfile;              // --hostfile FILE
  std::string launch_agent = "ssh";  // --launch-agent: runs "AGENT HOST COMMAND"
  // Internal (--remote-host LABEL): this batonrun runs one host's part of a job that a launching
  // batonrun started; it reads the job's environment from stdin and stops when stdin closes.
  std::string remote_host;

  bool MultiHost() const { return !host_list.empty() || !hostfile.empty(); }

  int WorldSize() const { return world_size.value_or(num_ranks); }
  int RankOffset() const { return rank_offset.value_or(0); }
};

enum class ParseOutcome { kRun, kHelp, kVersion, kDump, kUsageError };

// The text of --help.
extern const char kUsage[];

// Parses argv into *options. Options come first; the first argument that is not an option (or
// whatever follows "--") is the program, and everything after it is passed to the program
// untouched, as with mpirun, so `batonrun -n 2 prog -n 5` gives "-n 5" to prog.
ParseOutcome ParseArgs(int argc, char** argv, Options* options, std::string* error);

}  // namespace batonrun
