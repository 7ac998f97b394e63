// The four collectives of the peer perf binaries; see peer_collectives.h.
//
// GetCounts, AlgBytes, BusBwFactor and InitData repeat, deliberately line for line, those of
// perf/all_reduce_perf.cc, broadcast_perf.cc, all_gather_perf.cc and reduce_scatter_perf.cc:
// the comparison is only fair if both sides move and check exactly the same data.
//
// SPDX-License-Identifier: BSD-3-Clause
#include "peer_collectives.h"

#include <sys/stat.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string_view>

namespace baton_perf {
namespace {

// The first of `names` set in the environment, as a non-negative integer; *which: its name.
std::optional<int> IntFromEnv(std::initializer_list<const char*> names, std::string* which) {
  for (const char* name : names) {
    const char* value = std::getenv(name);
    if (!value || !*value) continue;
    char* end = nullptr;
    const long v = std::strtol(value, &end, 10);
    if (*end != '\0' || v < 0 || v > INT_MAX) continue;
    *which = name;
    return static_cast<int>(v);
  }
  return std::nullopt;
}

// Calls PeerLibrary's collective; Run translates the driver's arguments into a PeerCall.
class PeerCollective : public Collective {
 public:
  explicit PeerCollective(PeerLibrary& library) : library_(library) {}

 protected:
  PeerCall MakeCall(const RunArgs& args, bool in_place) const {
    return PeerCall{.send = args.send,
                    .recv = args.recv,
                    .count = args.count,
                    .type = args.type,
                    .op = args.op,
                    .root = args.root,
                    .in_place = in_place};
  }
  // Offset, in bytes, of a rank's block of `count` elements.
  static size_t BlockBytes(const RunArgs& args) {
    return args.count * TypeSize(args.type) * static_cast<size_t>(args.rank);
  }

  PeerLibrary& library_;
};

// As perf/all_reduce_perf.cc.
class PeerAllReduce : public PeerCollective {
 public:
  using PeerCollective::PeerCollective;
  const char* Name() const override { return "AllReduce"; }
  bool UsesOp() const override { return true; }
  bool UsesRoot() const override { return false; }
  CollCounts GetCounts(size_t count, size_t /*type_size*/, int /*nranks*/) const override {
    return {.send_count = count, .recv_count = count, .param_count = count};
  }
  double BusBwFactor(int nranks) const override { return 2.0 * (nranks - 1) / nranks; }
  void InitData(const InitArgs& args) const override {
    args.pattern.FillInput(args.input, args.counts.send_count, 0, args.rank);
    args.pattern.FillReduced(args.expected, args.counts.recv_count, 0);
  }
  batonResult_t Run(const RunArgs& args) const override {
    return library_.AllReduce(MakeCall(args, args.send == args.recv));
  }
};

// As perf/broadcast_perf.cc.
class PeerBroadcast : public PeerCollective {
 public:
  using PeerCollective::PeerCollective;
  const char* Name() const override { return "Broadcast"; }
  bool UsesOp() const override { return false; }
  bool UsesRoot() const override { return true; }
  CollCounts GetCounts(size_t count, size_t /*type_size*/, int /*nranks*/) const override {
    return {.send_count = count, .recv_count = count, .param_count = count};
  }
  double BusBwFactor(int /*nranks*/) const override { return 1.0; }
  void InitData(const InitArgs& args) const override {
    if (args.rank == args.root) {
      args.pattern.FillInput(args.input, args.counts.send_count, 0, args.root);
    }
    args.pattern.FillInput(args.expected, args.counts.recv_count, 0, args.root);
  }
  batonResult_t Run(const RunArgs& args) const override {
    return library_.Broadcast(MakeCall(args, args.send == args.recv));
  }
};

// As perf/all_gather_perf.cc.
class PeerAllGather : public PeerCollective {
 public:
  using PeerCollective::PeerCollective;
  const char* Name() const override { return "AllGather"; }
  bool UsesOp() const override { return false; }
  bool UsesRoot() const override { return false; }
  CollCounts GetCounts(size_t count, size_t type_size, int nranks) const override {
    const size_t share = RankShare(count, type_size, nranks);
    return {.send_count = share,
            .recv_count = share * nranks,
            .param_count = share,
            .send_inplace_offset = share};
  }
  double AlgBytes(const CollCounts& counts, size_t type_size, int nranks) const override {
    return static_cast<double>(counts.param_count * type_size) * nranks;
  }
  double BusBwFactor(int nranks) const override { return (nranks - 1.0) / nranks; }
  void InitData(const InitArgs& args) const override {
    const size_t share = args.counts.send_count;
    args.pattern.FillInput(args.input, share, args.rank * share, args.rank);
    for (int r = 0; r < args.nranks; ++r) {
      args.pattern.FillInput(ElementAt(args.expected, r * share, args.pattern.type()), share,
                             r * share, r);
    }
  }
  batonResult_t Run(const RunArgs& args) const override {
    const bool in_place = static_cast<const std::byte*>(args.send) ==
                          static_cast<const std::byte*>(args.recv) + BlockBytes(args);
    return library_.AllGather(MakeCall(args, in_place));
  }
};

// As perf/reduce_scatter_perf.cc.
class PeerReduceScatter : public PeerCollective {
 public:
  using PeerCollective::PeerCollective;
  const char* Name() const override { return "ReduceScatter"; }
  bool UsesOp() const override { return true; }
  bool UsesRoot() const override { return false; }
  CollCounts GetCounts(size_t count, size_t type_size, int nranks) const override {
    const size_t share = RankShare(count, type_size, nranks);
    return {.send_count = share * nranks,
            .recv_count = share,
            .param_count = share,
            .recv_inplace_offset = share};
  }
  double AlgBytes(const CollCounts& counts, size_t type_size, int nranks) const override {
    return static_cast<double>(counts.param_count * type_size) * nranks;
  }
  double BusBwFactor(int nranks) const override { return (nranks - 1.0) / nranks; }
  void InitData(const InitArgs& args) const override {
    args.pattern.FillInput(args.input, args.counts.send_count, 0, args.rank);
    const size_t share = args.counts.recv_count;
    args.pattern.FillReduced(args.expected, share, args.rank * share);
  }
  batonResult_t Run(const RunArgs& args) const override {
    const bool in_place = static_cast<const std::byte*>(args.recv) ==
                          static_cast<const std::byte*>(args.send) + BlockBytes(args);
    return library_.ReduceScatter(MakeCall(args, in_place));
  }
};

}  // namespace

int PeerMain(int argc, char** argv, const char* collective, PeerLibrary& library) {
  if (std::strcmp(collective, "all_reduce") == 0) {
    return PerfMain(argc, argv, PeerAllReduce(library), library);
  }
  if (std::strcmp(collective, "broadcast") == 0) {
    return PerfMain(argc, argv, PeerBroadcast(library), library);
  }
  if (std::strcmp(collective, "all_gather") == 0) {
    return PerfMain(argc, argv, PeerAllGather(library), library);
  }
  if (std::strcmp(collective, "reduce_scatter") == 0) {
    return PerfMain(argc, argv, PeerReduceScatter(library), library);
  }
  std::fprintf(stderr, "unknown collective '%s'\n", collective);
  return EXIT_FAILURE;
}

batonResult_t PeerJobFromEnv(const char* store_var, const char* prefix, const char* store_use,
                             PeerJob* job, std::string* detail) {
  std::string size_var;
  const auto rank = IntFromEnv(
      {"BATON_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID", "RANK"}, &job->rank_var);
  const auto size = IntFromEnv(
      {"BATON_WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS", "WORLD_SIZE"},
      &size_var);
  if (!rank || !size || *size < 1 || *rank >= *size) {
    *detail =
        "no rank and world size in the environment: start under batonrun, mpirun, mpiexec or "
        "srun, or set RANK and WORLD_SIZE";
    return batonInvalidUsage;
  }
  job->rank = *rank;
  job->size = *size;
  if (const char* dir = std::getenv(store_var); dir && *dir) {
    job->store_path = dir;
  } else if (const char* id = std::getenv("BATON_UNIQUE_ID"); id && *id) {
    // batonrun's id is new for each job and the same in all its ranks.
    char name[96];
    std::snprintf(name, sizeof(name), "/tmp/%s-%016zx", prefix,
                  std::hash<std::string_view>()(std::string_view(id)));
    job->store_path = name;
    job->owns_store = true;
  } else {
    *detail = std::string("set ") + store_var + " to a new directory that every rank sees (" +
              store_use + ")";
    return batonInvalidUsage;
  }
  mkdir(job->store_path.c_str(), 0700);  // several ranks race to create it: EEXIST is fine
  return batonSuccess;
}

}  // namespace baton_perf
