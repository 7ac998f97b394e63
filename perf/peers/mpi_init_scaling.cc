// mpi_init_scaling: the peer curve for perf/init_scaling.cc. MPI_Init, one
// 8-byte allreduce (checked), MPI_Finalize; perf/init_scaling.py times the
// whole `mpirun` job around it, launch included, as the fair comparison
// with Baton's forked ranks is the job's wall time.
//
// SPDX-License-Identifier: BSD-3-Clause
#include <mpi.h>

#include <cstdio>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, nranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  double value = rank, sum = 0;
  MPI_Allreduce(&value, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  const double want = 0.5 * nranks * (nranks - 1);
  const int bad = sum != want;
  if (bad) fprintf(stderr, "rank %d: allreduce gave %g, want %g\n", rank, sum, want);
  MPI_Finalize();
  return bad;
}
