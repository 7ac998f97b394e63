// The launcher's environment: where batonCommInitFromEnv finds its rank, the
// number of ranks and the rendezvous, whichever launcher started the job
// (batonrun, mpirun, srun, torchrun). batonrun exports the BATON_* names of
// base/settings.h; the others are the launchers' own.
#pragma once

#include "base/settings.h"
#include "base/status.h"
#include "bootstrap/unique_id.h"

namespace baton {

// One rank's place in a launched job.
struct LauncherJob {
  int rank = -1;
  int size = -1;
  const char* source = nullptr;  // the variable the rank came from
  int local_rank = -1;           // rank on this host, -1 when the launcher does not say
  int local_size = -1;           // ranks on this host, likewise
  UniqueIdData id{};
};

// Reads the job from the environment:
//  - rank and size from the first complete pair of BATON_RANK/
//    BATON_WORLD_SIZE, OMPI_COMM_WORLD_RANK/_SIZE, PMI_RANK/_SIZE,
//    PMIX_RANK/_SIZE, SLURM_PROCID/SLURM_NTASKS, RANK/WORLD_SIZE;
//  - the rank and number of ranks on this host, when the launcher exports
//    them: BATON_LOCAL_RANK/_SIZE, OMPI_COMM_WORLD_LOCAL_RANK/_SIZE,
//    MPI_LOCALRANKID/MPI_LOCALNRANKS, SLURM_LOCALID/SLURM_NTASKS_PER_NODE,
//    LOCAL_RANK/LOCAL_WORLD_SIZE;
//  - the unique id from BATON_UNIQUE_ID (hex, batonrun's single-host jobs),
//    else derived from the rendezvous address BATON_ROOT (or MASTER_ADDR and
//    MASTER_PORT) and the job's identity, in which case rank 0 starts the
//    rendezvous server at that address;
//  - with none of those (and no BATON_RANK) under a PMIx launcher: rank,
//    size, local rank and size and the unique id from PMIx (pmix_job.h).
// batonInvalidUsage when no launcher variable is set, batonInvalidArgument
// when they are malformed.
Status JobFromEnvironment(const Settings& settings, LauncherJob* out);

}  // namespace baton
