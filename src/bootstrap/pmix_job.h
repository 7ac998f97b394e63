// Jobs started by a PMIx launcher (Open MPI's mpirun, srun --mpi=pmix,
// prrte): rank 0 makes the unique id and publishes it through the
// launcher's PMIx server (put, commit, fence), every other rank reads it,
// so nobody sets a rendezvous address. libpmix is opened at run time
// (dlopen), so libbaton has no hard dependency on it; the build only needs
// its headers (Debian: libpmix-dev), and without them this path reports
// that it is missing.
#pragma once

#include "base/settings.h"
#include "base/status.h"
#include "bootstrap/launcher_env.h"

namespace baton {

// Whether this process was started by a PMIx server (it exported
// PMIX_NAMESPACE and PMIX_RANK).
bool UnderPmix();

// The job through PMIx: rank and size, the local rank and size, and the
// unique id rank 0 published (it serves the rendezvous). Every wait has the
// settings' timeout. batonSystemError when libpmix cannot be loaded or a
// PMIx call fails, naming the call.
Status PmixJob(const Settings& settings, LauncherJob* job);

}  // namespace baton
