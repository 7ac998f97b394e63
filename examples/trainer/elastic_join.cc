#include "elastic_join.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "util.h"

namespace trainer {
namespace {

constexpr char kFinished[] = "finished";

// Writes `text` to dir/name through a temporary name, so that readers see all of it or nothing.
// The grant holds the job's secret (in the id): 0600.
void WriteWhole(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string tmp = dir + "/." + name + ".tmp";
  const std::string path = dir + "/" + name;
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) throw TrainError("cannot write " + tmp + ": " + std::strerror(errno));
  fchmod(fileno(f), 0600);
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !written || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    unlink(tmp.c_str());
    throw TrainError("cannot write " + path + ": " + std::strerror(err));
  }
}

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

std::string Hex(const batonUniqueId& id) {
  static const char kDigits[] = "0123456789abcdef";
  std::string text;
  for (char c : id.internal) {
    const auto b = static_cast<unsigned char>(c);
    text += kDigits[b >> 4];
    text += kDigits[b & 15];
  }
  return text;
}

bool FromHex(const std::string& text, batonUniqueId* id) {
  if (text.size() != 2 * sizeof(id->internal)) return false;
  auto digit = [](char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
  };
  for (size_t i = 0; i < sizeof(id->internal); ++i) {
    const int hi = digit(text[2 * i]), lo = digit(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    id->internal[i] = static_cast<char>(hi * 16 + lo);
  }
  return true;
}

}  // namespace

std::vector<pid_t> JoinDesk::Requests() {
  std::vector<pid_t> pids;
  if (dir_.empty()) return pids;
  struct stat st;
  if (stat(dir_.c_str(), &st) != 0) return pids;
  if (st.st_mtim.tv_sec == seen_.tv_sec && st.st_mtim.tv_nsec == seen_.tv_nsec) return pids;
  // Read before the listing: a request that lands meanwhile changes the time again.
  seen_ = st.st_mtim;
  DIR* d = opendir(dir_.c_str());
  if (d == nullptr) return pids;
  while (dirent* entry = readdir(d)) {
    const std::string name = entry->d_name;
    if (name.rfind("join.", 0) != 0) continue;
    char* end = nullptr;
    const long pid = std::strtol(name.c_str() + 5, &end, 10);
    if (*end == '\0' && pid > 0) pids.push_back(static_cast<pid_t>(pid));
  }
  closedir(d);
  std::sort(pids.begin(), pids.end());
  // Seen again at the next look if it is not answered now.
  if (!pids.empty()) seen_ = timespec{};
  return pids;
}

void JoinDesk::Grant(const std::vector<pid_t>& pids, const batonUniqueId& id, int nranks,
                     int first_rank) {
  for (size_t i = 0; i < pids.size(); ++i) {
    const std::string pid = std::to_string(pids[i]);
    WriteWhole(dir_, "grant." + pid,
               std::to_string(nranks) + " " + std::to_string(first_rank + static_cast<int>(i)) +
                   " " + Hex(id) + "\n");
    unlink((dir_ + "/join." + pid).c_str());
  }
}

void JoinDesk::CloseDesk() {
  if (dir_.empty()) return;
  try {
    WriteWhole(dir_, kFinished, "\n");
  } catch (const TrainError&) {
    // Nobody can be told; a replacement then gives up at its own deadline.
  }
}

JoinGrant AskToJoin(const std::string& dir, double timeout_s) {
  const std::string pid = std::to_string(getpid());
  const std::string grant_path = dir + "/grant." + pid;
  WriteWhole(dir, "join." + pid, pid + "\n");
  const auto start = std::chrono::steady_clock::now();
  JoinGrant grant;
  for (;;) {
    std::ifstream in(grant_path);
    if (in) {
      std::string hex;
      in >> grant.nranks >> grant.rank >> hex;
      const bool parsed = !in.fail();
      in.close();
      // It holds the job's secret: gone as soon as it is read.
      unlink(grant_path.c_str());
      if (!parsed || grant.nranks < 2 || grant.rank < 0 || grant.rank >= grant.nranks ||
          !FromHex(hex, &grant.id)) {
        throw TrainError("malformed answer in " + grant_path);
      }
      return grant;
    }
    if (Exists(dir + "/" + kFinished)) {
      unlink((dir + "/join." + pid).c_str());
      grant.finished = true;
      return grant;
    }
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (waited > timeout_s) {
      unlink((dir + "/join." + pid).c_str());
      std::ostringstream why;
      why << "no rank of the job answered the request to join within " << timeout_s
          << " s (BATON_TIMEOUT; rank 0 looks at every step)";
      throw TrainError(why.str());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace trainer
