#include "tools/batonrun/trace_merge.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "base/files.h"
#include "base/settings.h"
#include "base/trace_file.h"

namespace batonrun {
namespace {

bool ReadWhole(const std::string& path, std::string* text) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream buffer;
  buffer << in.rdbuf();
  *text = buffer.str();
  return !in.bad();
}

size_t SkipSpace(const std::string& s, size_t i) {
  while (i < s.size() && isspace(static_cast<unsigned char>(s[i]))) ++i;
  return i;
}

// The index just past the JSON array or object opening at `open`, or npos.
size_t PastValue(const std::string& s, size_t open) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = open; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      ++depth;
    } else if ((c == ']' || c == '}') && --depth == 0) {
      return i + 1;
    }
  }
  return std::string::npos;
}

// A relative path as the ranks see it (they run where batonrun runs).
std::string Absolute(const std::string& path) {
  if (path.empty() || path[0] == '/') return path;
  char cwd[4096];
  return getcwd(cwd, sizeof(cwd)) != nullptr ? std::string(cwd) + "/" + path : path;
}

// The BATON_TRACE_FILE the ranks see: the last -x that sets it, else ours.
std::string JobTraceFile(const Options& options) {
  const std::string name = std::string(baton::SettingName::trace_file);
  std::string value = baton::ReadSettings(/*log=*/false).trace_file;
  for (const std::string& e : options.exports)
    if (e.size() > name.size() && e.compare(0, name.size() + 1, name + "=") == 0)
      value = e.substr(name.size() + 1);
  return value;
}

}  // namespace

std::vector<std::string> RankTraceFiles(const std::string& base, int first_rank, int count,
                                        double since) {
  std::vector<std::string> files;
  for (int r = first_rank; r < first_rank + count; ++r) {
    const std::string prefix = baton::TraceRankPrefix(base, r);
    const size_t slash = prefix.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : prefix.substr(0, slash + 1);
    const std::string stem = slash == std::string::npos ? prefix : prefix.substr(slash + 1);
    DIR* d = opendir(dir.c_str());
    if (d == nullptr) continue;
    std::vector<std::string> mine;
    while (const dirent* e = readdir(d)) {
      const std::string file = e->d_name;
      // stem ends with the dot of ".json" for the untagged file.
      if (file.size() < stem.size() + 4 || file.compare(0, stem.size(), stem) != 0 ||
          file.compare(file.size() - 5, 5, ".json") != 0)
        continue;
      const std::string path = slash == std::string::npos ? file : dir + file;
      struct stat st;
      if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      const double modified =
          static_cast<double>(st.st_mtim.tv_sec) + static_cast<double>(st.st_mtim.tv_nsec) * 1e-9;
      if (modified >= since) mine.push_back(path);
    }
    closedir(d);
    std::sort(mine.begin(), mine.end());
    files.insert(files.end(), mine.begin(), mine.end());
  }
  return files;
}

bool TraceEventsOf(const std::string& json, std::string* events, std::string* error) {
  size_t open = SkipSpace(json, 0);
  if (open < json.size() && json[open] != '[') {
    const size_t key = json.find("\"traceEvents\"");
    open = key == std::string::npos ? key : SkipSpace(json, key + strlen("\"traceEvents\""));
    if (open != std::string::npos && open < json.size() && json[open] == ':')
      open = SkipSpace(json, open + 1);
  }
  if (open == std::string::npos || open >= json.size() || json[open] != '[') {
    *error = "no traceEvents array";
    return false;
  }
  const size_t end = PastValue(json, open);
  if (end == std::string::npos) {
    *error = "the traceEvents array does not end (a truncated file?)";
    return false;
  }
  size_t first = SkipSpace(json, open + 1);
  size_t last = end - 1;  // the ']'
  while (last > first && isspace(static_cast<unsigned char>(json[last - 1]))) --last;
  *events = json.substr(first, last - first);
  return true;
}

bool MergeTraceFiles(const std::vector<std::string>& inputs, const std::string& out,
                     std::string* error) {
  std::string merged = "{\"traceEvents\":[\n";
  bool any = false;
  std::string sources;
  for (const std::string& path : inputs) {
    std::string text, events, why;
    if (!ReadWhole(path, &text)) {
      *error = "cannot read " + path + ": " + strerror(errno);
      return false;
    }
    if (!TraceEventsOf(text, &events, &why)) {
      *error = path + ": " + why;
      return false;
    }
    if (!events.empty()) {
      merged += (any ? ",\n" : "") + events;
      any = true;
    }
    sources += std::string(sources.empty() ? "" : ",") + "\"";
    for (const char c : path) {
      if (c == '"' || c == '\\') sources += '\\';
      sources += c;
    }
    sources += "\"";
  }
  merged +=
      "\n],\n\"displayTimeUnit\":\"ns\",\n\"otherData\":{\"producer\":\"batonrun\","
      "\"clock\":\"CLOCK_REALTIME\",\"merged\":[" +
      sources + "]}}\n";
  if (const baton::Status st = baton::WriteFileAtomically(out, merged); !st.ok()) {
    *error = "cannot write " + out + ": " + st.message();
    return false;
  }
  return true;
}

namespace {

// One BATON_TRACE_FILE of the job (see MergeJobTrace).
void MergeJobTraceOf(const Options& options, double job_start, const std::string& base) {
  const int first = options.RankOffset();
  const int count = options.num_ranks;
  const std::vector<std::string> inputs = RankTraceFiles(base, first, count, job_start);
  if (inputs.empty()) {
    fprintf(stderr, "batonrun: BATON_TRACE_FILE=%s: no rank wrote a timeline\n", base.c_str());
    return;
  }
  // A part of a multi-host job merges into a file of its own; merge the
  // hosts' files with --merge-trace.
  const std::string out = count == options.WorldSize()
                              ? base
                              : baton::TraceStem(base) + ".ranks" + std::to_string(first) + "-" +
                                    std::to_string(first + count - 1) + ".json";
  std::string error;
  if (!MergeTraceFiles(inputs, out, &error)) {
    fprintf(stderr, "batonrun: BATON_TRACE_FILE: %s (the ranks' files are left as they are)\n",
            error.c_str());
    return;
  }
  for (const std::string& path : inputs) unlink(path.c_str());
  fprintf(stderr, "batonrun: timeline of %d rank%s (%zu file%s) in %s\n", count,
          count == 1 ? "" : "s", inputs.size(), inputs.size() == 1 ? "" : "s", out.c_str());
}

}  // namespace

std::string PrepareTraceList() {
  const char* tmp = getenv("TMPDIR");
  const std::string path = std::string(tmp != nullptr && tmp[0] == '/' ? tmp : "/tmp") +
                           "/batonrun-traces." + std::to_string(getpid());
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return "";
  close(fd);
  setenv(baton::SettingName::trace_list, path.c_str(), 1);
  return path;
}

void MergeJobTrace(const Options& options, double job_start, const std::string& list) {
  std::vector<std::string> bases;
  if (std::string base = JobTraceFile(options); !base.empty()) bases.push_back(Absolute(base));
  if (!list.empty()) {
    std::ifstream in(list);
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) bases.push_back(line);
    unlink(list.c_str());
  }
  std::sort(bases.begin(), bases.end());
  bases.erase(std::unique(bases.begin(), bases.end()), bases.end());
  for (const std::string& base : bases) MergeJobTraceOf(options, job_start, base);
}

}  // namespace batonrun
