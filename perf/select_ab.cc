// The automatic algorithm choice against forced algorithms in the same processes: one
// communicator per variant, each split from one parent (the automatic one with BATON_ALGO
// unset, the others with BATON_ALGO=allreduce:<name>), timed in turns within each size, the
// order rotated every round. Separate launches of one schedule differ by more than what is
// compared here (where the kernel places ranks, what else runs), so comparing separate runs
// cannot tell a few percent; blocks that alternate inside one run see the same placement and the
// same load.
//
//   batonrun -n 4 select_ab [-b 8] [-e 32M] [-f 4] [-v auto,ring,rhd,tree,hier]
//                           [-r rounds] [-t seconds per block] [-i] [-k buffers] [-J file.jsonl]
//
// Prints, per size, the median time per call (us) of each variant over the rounds, the
// algorithm the automatic communicator chose (its table, BATON_TOPO_DUMP_FILE), auto over the
// forced run of that algorithm (the ratio of the medians, and the median of the ratios of each
// round's two blocks), and auto over the best forced one. Allreduce of float sum, out of
// place (-i: in place), on one pair of buffers or, with -k N, each call on the next of N
// (buffers the cache no longer holds, where N x 2 x the size overflow it); the result is
// checked once per variant and size, out of place.
#include <baton.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void Die(const char* what, batonResult_t r) {
  std::fprintf(stderr, "select_ab: %s: %s\n", what, batonGetErrorString(r));
  std::exit(1);
}

void Check(batonResult_t r, const char* what) {
  if (r != batonSuccess) Die(what, r);
}

size_t ParseSize(const char* s) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  switch (*end) {
    case 'K':
    case 'k':
      v *= 1 << 10;
      break;
    case 'M':
    case 'm':
      v *= 1 << 20;
      break;
    case 'G':
    case 'g':
      v *= 1 << 30;
      break;
    default:
      break;
  }
  return static_cast<size_t>(v);
}

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t comma = s.find(',', start);
    const std::string item = s.substr(start, comma == std::string::npos ? comma : comma - start);
    if (!item.empty()) out.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

// The allreduce float32 choice per power-of-two size from a BATON_TOPO_DUMP_FILE (one table
// entry per line: {"collective": "allreduce", "datatype": "float32", "bytes": N, "algorithm":
// "rhd", ...}).
std::vector<std::pair<size_t, std::string>> ReadChoices(const std::string& path) {
  std::vector<std::pair<size_t, std::string>> out;
  FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return out;
  char line[4096];
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    if (std::strstr(line, "\"collective\": \"allreduce\"") == nullptr) continue;
    const char* b = std::strstr(line, "\"bytes\": ");
    const char* a = std::strstr(line, "\"algorithm\": \"");
    if (b == nullptr || a == nullptr) continue;
    const size_t bytes = std::strtoull(b + 9, nullptr, 10);
    a += 14;
    const char* q = std::strchr(a, '"');
    if (q != nullptr) out.emplace_back(bytes, std::string(a, q));
  }
  std::fclose(f);
  return out;
}

std::string ChoiceFor(const std::vector<std::pair<size_t, std::string>>& table, size_t bytes) {
  std::string best;
  for (const auto& [at, name] : table)
    if (at <= bytes) best = name;  // classes are decided at their lower end
  return best;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  size_t min_bytes = 8, max_bytes = 32 << 20, factor = 4;
  int rounds = 15;
  double block_s = 0.02;
  std::string variants_arg = "auto,ring,rhd,tree,hier", json_path;
  bool in_place = false;
  int nbuffers = 1;
  int opt;
  while ((opt = getopt(argc, argv, "b:e:f:v:r:t:ik:J:h")) != -1) {
    switch (opt) {
      case 'b':
        min_bytes = ParseSize(optarg);
        break;
      case 'e':
        max_bytes = ParseSize(optarg);
        break;
      case 'f':
        factor = std::max<size_t>(2, ParseSize(optarg));
        break;
      case 'v':
        variants_arg = optarg;
        break;
      case 'r':
        rounds = std::max(1, std::atoi(optarg));
        break;
      case 't':
        block_s = std::atof(optarg);
        break;
      case 'i':
        in_place = true;
        break;
      case 'k':
        nbuffers = std::clamp(std::atoi(optarg), 1, 64);
        break;
      case 'J':
        json_path = optarg;
        break;
      default:
        std::fprintf(stderr,
                     "usage: select_ab [-b 8] [-e 32M] [-f 4] [-v auto,ring,rhd,tree,hier] "
                     "[-r rounds] [-t seconds per block] [-i] [-k buffers] [-J file.jsonl]\n");
        return opt == 'h' ? 0 : 2;
    }
  }
  const std::vector<std::string> variants = Split(variants_arg);
  if (variants.empty() || variants[0] != "auto") {
    std::fprintf(stderr, "select_ab: -v must start with auto\n");
    return 2;
  }
  unsetenv("BATON_ALGO");
  batonComm_t parent;
  Check(batonCommInitFromEnv(&parent), "batonCommInitFromEnv");
  int rank = 0, nranks = 1;
  Check(batonCommUserRank(parent, &rank), "batonCommUserRank");
  Check(batonCommCount(parent, &nranks), "batonCommCount");

  // One child per variant, created alike; the automatic one dumps its table.
  char dump[] = "/tmp/select_ab_XXXXXX";
  if (rank == 0) {
    const int fd = mkstemp(dump);
    if (fd >= 0) close(fd);
  }
  std::vector<batonComm_t> comms(variants.size());
  for (size_t v = 0; v < variants.size(); ++v) {
    unsetenv("BATON_TOPO_DUMP_FILE");
    if (v == 0) {
      unsetenv("BATON_ALGO");
      if (rank == 0) setenv("BATON_TOPO_DUMP_FILE", dump, 1);
    } else {
      setenv("BATON_ALGO", ("allreduce:" + variants[v]).c_str(), 1);
    }
    Check(batonCommSplit(parent, 0, rank, &comms[v], nullptr), "batonCommSplit");
  }
  unsetenv("BATON_ALGO");
  unsetenv("BATON_TOPO_DUMP_FILE");
  std::vector<std::pair<size_t, std::string>> table;
  if (rank == 0) {
    table = ReadChoices(dump);
    std::remove(dump);
  }

  const size_t max_count = std::max<size_t>(max_bytes / sizeof(float), 1);
  std::vector<float> send(max_count), recv(max_count);
  for (size_t i = 0; i < max_count; ++i) send[i] = static_cast<float>((rank + 1) * (i % 7 + 1));
  // The timed calls' buffers: -k pairs, in place the first of each (sums that grow to
  // infinity cost what others do).
  std::vector<std::vector<float>> ins(nbuffers, send), outs(nbuffers, recv);
  size_t next = 0;
  auto timed_call = [&](size_t count, batonComm_t comm) {
    next = (next + 1) % ins.size();
    float* in = ins[next].data();
    return batonAllReduce(in, in_place ? in : outs[next].data(), count, batonFloat32, batonSum,
                          comm, nullptr);
  };
  FILE* json = rank == 0 && !json_path.empty() ? std::fopen(json_path.c_str(), "w") : nullptr;
  if (rank == 0) {
    std::printf("# %d ranks, allreduce float sum, median of %d rounds (us per call)\n", nranks,
                rounds);
    std::printf("%10s", "bytes");
    for (const std::string& v : variants) std::printf(" %9s", v.c_str());
    std::printf("  chose  auto/chosen  paired  auto/best\n");
  }
  for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= factor) {
    const size_t count = std::max<size_t>(bytes / sizeof(float), 1);
    std::vector<bool> usable(variants.size(), true);
    for (size_t v = 0; v < variants.size(); ++v) {
      // BATON_ALGO may leave nothing for this size and rank count (hier on hosts of
      // different sizes): the same error on every rank, so every rank skips the variant.
      const batonResult_t r = batonAllReduce(send.data(), recv.data(), count, batonFloat32,
                                             batonSum, comms[v], nullptr);
      if (r == batonInvalidUsage) {
        usable[v] = false;
        continue;
      }
      Check(r, "batonAllReduce");
      const float want0 = static_cast<float>(nranks * (nranks + 1) / 2);
      if (recv[0] != want0 || recv[count - 1] != want0 * static_cast<float>((count - 1) % 7 + 1)) {
        std::fprintf(stderr, "select_ab: %s %zu B: wrong result\n", variants[v].c_str(), bytes);
        return 1;
      }
    }
    int iters = 1;  // calls per block, from a first timing of the automatic variant
    {
      Check(batonBarrier(parent, nullptr), "batonBarrier");
      // A fixed number of calls (every rank makes the same ones), then rank 0's figure.
      const int n = bytes <= (size_t{1} << 20) ? 20 : 3;
      const auto t0 = Clock::now();
      for (int i = 0; i < n; ++i) Check(timed_call(count, comms[0]), "batonAllReduce");
      double per_call = std::chrono::duration<double>(Clock::now() - t0).count() / n;
      Check(batonBroadcast(&per_call, &per_call, 1, batonFloat64, 0, parent, nullptr),
            "batonBroadcast");
      iters = static_cast<int>(std::clamp(block_s / per_call, 1.0, 100000.0));
    }
    std::vector<std::vector<double>> us(variants.size());
    for (int round = 0; round < rounds; ++round) {
      for (size_t k = 0; k < variants.size(); ++k) {
        const size_t v = (k + static_cast<size_t>(round)) % variants.size();
        if (!usable[v]) continue;
        Check(batonBarrier(parent, nullptr), "batonBarrier");
        const auto t0 = Clock::now();
        for (int i = 0; i < iters; ++i) Check(timed_call(count, comms[v]), "batonAllReduce");
        us[v].push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() /
                        iters);
      }
    }
    if (rank != 0) continue;
    const std::string chose = ChoiceFor(table, count * sizeof(float));
    double best = 0, auto_us = Median(us[0]), chosen_us = 0;
    // auto over the chosen variant round by round (their blocks ran within one round, close in
    // time): the median of these ratios follows load that changes between rounds less than the
    // ratio of the medians does.
    std::vector<double> paired;
    std::printf("%10zu", count * sizeof(float));
    for (size_t v = 0; v < variants.size(); ++v) {
      if (!usable[v]) {
        std::printf(" %9s", "-");
        continue;
      }
      const double m = Median(us[v]);
      std::printf(" %9.3f", m);
      if (v > 0 && (best == 0 || m < best)) best = m;
      if (v > 0 && variants[v] == chose) {
        chosen_us = m;
        for (size_t i = 0; i < us[v].size() && i < us[0].size(); ++i)
          paired.push_back(us[0][i] / us[v][i]);
      }
    }
    const double paired_ratio = paired.empty() ? NAN : Median(paired);
    std::printf("  %5s  %11.3f  %6.3f  %9.3f\n", chose.c_str(),
                chosen_us > 0 ? auto_us / chosen_us : NAN, paired_ratio,
                best > 0 ? auto_us / best : NAN);
    if (json != nullptr) {
      std::fprintf(json, "{\"bytes\": %zu, \"ranks\": %d, \"rounds\": %d, \"chose\": \"%s\"",
                   count * sizeof(float), nranks, rounds, chose.c_str());
      for (size_t v = 0; v < variants.size(); ++v)
        if (usable[v]) std::fprintf(json, ", \"%s\": %.6g", variants[v].c_str(), Median(us[v]));
      if (!paired.empty()) std::fprintf(json, ", \"paired\": %.6g", paired_ratio);
      std::fprintf(json, "}\n");
    }
    std::fflush(stdout);
  }
  if (json != nullptr) std::fclose(json);
  for (batonComm_t c : comms) Check(batonCommDestroy(c), "batonCommDestroy");
  Check(batonCommDestroy(parent), "batonCommDestroy");
  return 0;
}
