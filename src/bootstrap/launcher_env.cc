#include "bootstrap/launcher_env.h"

#include <cstring>

#include "base/log.h"
#include "bootstrap/host_id.h"
#include "bootstrap/pmix_job.h"
#include "bootstrap/rendezvous.h"

namespace baton {
namespace {

// -1 when unset or malformed (reported as a bad rank or size).
int ParseRankVariable(const std::optional<std::string>& text) {
  int64_t value = -1;
  if (!text || !ParseInt(*text, &value) || value < INT32_MIN || value > INT32_MAX) return -1;
  return static_cast<int>(value);
}

std::optional<std::string> NonEmpty(const std::string& value) {
  if (value.empty()) return std::nullopt;
  return value;
}

// The first launcher whose rank and size variables are both set.
void RankFromEnvironment(const Settings& settings, LauncherJob* job) {
  static const char* kForeignPairs[][2] = {{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                           {"PMI_RANK", "PMI_SIZE"},
                                           {"PMIX_RANK", "PMIX_SIZE"},
                                           {"SLURM_PROCID", "SLURM_NTASKS"},
                                           {"RANK", "WORLD_SIZE"}};
  if (!settings.rank.empty() && !settings.world_size.empty()) {
    job->rank = ParseRankVariable(settings.rank);
    job->size = ParseRankVariable(settings.world_size);
    job->source = "BATON_RANK";
    return;
  }
  for (auto& pair : kForeignPairs) {
    auto rank = ForeignVariable(pair[0]), size = ForeignVariable(pair[1]);
    if (rank && size) {
      job->rank = ParseRankVariable(rank);
      job->size = ParseRankVariable(size);
      job->source = pair[0];
      return;
    }
  }
}

// The first launcher whose local rank and local size variables are both set.
void LocalRankFromEnvironment(const Settings& settings, LauncherJob* job) {
  static const char* kForeignPairs[][2] = {
      {"OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
      {"MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
      {"SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
      {"LOCAL_RANK", "LOCAL_WORLD_SIZE"}};
  if (!settings.local_rank.empty() && !settings.local_size.empty()) {
    job->local_rank = ParseRankVariable(settings.local_rank);
    job->local_size = ParseRankVariable(settings.local_size);
    return;
  }
  for (auto& pair : kForeignPairs) {
    auto rank = ForeignVariable(pair[0]), size = ForeignVariable(pair[1]);
    if (rank && size) {
      job->local_rank = ParseRankVariable(rank);
      job->local_size = ParseRankVariable(size);
      return;
    }
  }
}

// The unique id of a job launched without one (mpirun, srun, torchrun):
// everyone derives the same id from the root address and job identity;
// rank 0 serves the rendezvous at that address.
Status IdFromRootAddress(const Settings& settings, const std::string& root, int rank,
                         UniqueIdData* data) {
  SockAddr addr;
  BATON_RETURN_IF_ERROR(ParseHostPort(root, &addr));
  memset(data, 0, sizeof(*data));
  data->magic = kUniqueIdMagic;
  data->version = kBootstrapVersion;
  data->root = ToWire(addr);
  std::string seed = "baton:" + root;
  const std::pair<const char*, std::optional<std::string>> job_identity[] = {
      {"BATON_SECRET", NonEmpty(settings.secret)},
      {"SLURM_JOB_ID", ForeignVariable("SLURM_JOB_ID")},
      {"OMPI_MCA_ess_base_jobid", ForeignVariable("OMPI_MCA_ess_base_jobid")},
      {"PMIX_NAMESPACE", ForeignVariable("PMIX_NAMESPACE")},
      {"TORCHELASTIC_RUN_ID", ForeignVariable("TORCHELASTIC_RUN_ID")}};
  for (const auto& [name, value] : job_identity)
    if (value) seed += std::string(":") + name + "=" + *value;
  for (int i = 0; i < kSecretBytes / 8; ++i) {
    uint64_t h =
        Fnv1a64(seed.data(), seed.size(), 0xcbf29ce484222325ull + i * 0x9e3779b97f4a7c15ull);
    memcpy(data->secret + 8 * i, &h, 8);
  }
  data->comm_id = Fnv1a64(seed.data(), seed.size(), 0x1234567887654321ull);
  if (rank == 0) {
    Fd listener;
    SockAddr bound;
    Status st = ListenOn(addr, &listener, &bound);
    if (!st.ok()) {
      // The name may resolve to an address this host cannot bind (NAT,
      // /etc/hosts quirks): listen on all interfaces at that port instead.
      SockAddr any;
      any.storage.ss_family = addr.family();
      any.len = addr.len;
      any.set_port(addr.port());
      BATON_RETURN_IF_ERROR(ListenOn(any, &listener, &bound).WithContext("BATON_ROOT=" + root));
    }
    BATON_RETURN_IF_ERROR(
        StartRendezvousServer(std::move(listener), *data, TimeoutSeconds(settings)));
  }
  return Status::Ok();
}

}  // namespace

Status JobFromEnvironment(const Settings& settings, LauncherJob* out) {
  LauncherJob job;
  // A PMIx launcher (mpirun, srun --mpi=pmix) with no address given: the
  // unique id travels through its PMIx server.
  const bool address_given = !settings.unique_id.empty() || !settings.root.empty() ||
                             ForeignVariable("MASTER_ADDR").has_value();
  if (!address_given && settings.rank.empty() && UnderPmix()) {
    BATON_RETURN_IF_ERROR(PmixJob(settings, &job));
    *out = job;
    return Status::Ok();
  }
  RankFromEnvironment(settings, &job);
  if (job.source == nullptr)
    return InvalidUsage(
        "no rank in the environment: set BATON_RANK and BATON_WORLD_SIZE, or launch with "
        "batonrun, mpirun, srun or torchrun");
  if (job.size < 1 || job.rank < 0 || job.rank >= job.size)
    return InvalidArgument(std::string("bad rank/size from ") + job.source + ": rank " +
                           std::to_string(job.rank) + " of " + std::to_string(job.size));
  LocalRankFromEnvironment(settings, &job);
  if (!settings.unique_id.empty()) {
    std::optional<batonUniqueId> id = UniqueIdFromHex(settings.unique_id);
    if (!id) return InvalidArgument("BATON_UNIQUE_ID is not 256 hex digits");
    BATON_RETURN_IF_ERROR(DecodeUniqueId(*id, &job.id));
  } else {
    std::string root;
    if (!settings.root.empty()) {
      root = settings.root;
    } else if (auto addr = ForeignVariable("MASTER_ADDR")) {
      root = *addr + ":" + ForeignVariable("MASTER_PORT").value_or("29500");
    } else {
      return InvalidUsage(
          "no rendezvous address: set BATON_ROOT=host:port (or MASTER_ADDR/MASTER_PORT), or "
          "launch with batonrun or a PMIx launcher (mpirun, srun --mpi=pmix)");
    }
    BATON_RETURN_IF_ERROR(IdFromRootAddress(settings, root, job.rank, &job.id));
  }
  BATON_INFO(kLogInit, "rank %d of %d from %s", job.rank, job.size, job.source);
  *out = job;
  return Status::Ok();
}

}  // namespace baton
