#include "util.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

namespace trainer {

void CheckBaton(batonResult_t result, batonComm_t comm, const std::string& what) {
  if (result == batonSuccess) return;
  std::string message = what + " failed: " + batonGetErrorString(result);
  const char* detail = batonGetLastError(comm);
  if (detail != nullptr && detail[0] != '\0') message += std::string(": ") + detail;
  throw TrainError(message);
}

uint64_t Rng::Next() {
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

double Rng::Normal() {
  double u1 = Uniform();
  double u2 = Uniform();
  if (u1 < 1e-300) u1 = 1e-300;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

uint64_t MixSeed(uint64_t a, uint64_t b, uint64_t c) {
  Rng rng(a * 0x9E3779B97F4A7C15ULL ^ (b + 0x632BE59BD9B4E019ULL) ^ (c * 0xD6E8FEB86659FD93ULL));
  rng.Next();
  return rng.Next();
}

uint64_t HashBytes(const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < bytes; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

double NowSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

std::string FirstRankProblem(const std::string& problem, batonComm_t comm,
                             const std::string& what) {
  int rank = 0, world = 1;
  CheckBaton(batonCommUserRank(comm, &rank), comm, what);
  CheckBaton(batonCommCount(comm, &world), comm, what);
  int first = problem.empty() ? world : rank;
  CheckBaton(batonAllReduce(&first, &first, 1, batonInt32, batonMin, comm, nullptr), comm,
             what + " allreduce");
  if (first == world) return "";
  char text[512] = {};
  if (rank == first) std::snprintf(text, sizeof text, "%s", problem.c_str());
  CheckBaton(batonBroadcast(text, text, sizeof text, batonChar, first, comm, nullptr), comm,
             what + " broadcast");
  if (rank == first) return problem;
  return std::string(text) + " (reported by rank " + std::to_string(first) + ")";
}

std::string CannotWrite(const std::string& path) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd >= 0) {
    close(fd);
    unlink(path.c_str());
    return "";
  }
  if (errno == EEXIST) fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return std::strerror(errno);
  close(fd);
  return "";
}

double BatonTimeoutSeconds() {
  const char* v = std::getenv("BATON_TIMEOUT");
  if (v == nullptr || v[0] == '\0') return 300;
  char* end = nullptr;
  const long s = std::strtol(v, &end, 10);
  if (*end != '\0' || s < 0) return 300;
  return s == 0 ? 1e9 : static_cast<double>(s);
}

}  // namespace trainer
