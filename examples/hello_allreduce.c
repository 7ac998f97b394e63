/*
 * The quick start from README.md: every rank contributes its rank number and
 * prints the sum. Plain C11, so it also checks that baton.h compiles as C.
 *
 *   batonrun -n 4 build/examples/hello_allreduce
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <baton.h>
#include <stdio.h>

int main(void) {
  batonComm_t comm;
  if (batonCommInitFromEnv(&comm) != batonSuccess) { /* batonrun, mpirun, srun or torchrun */
    fprintf(stderr, "init: %s\n", batonGetLastError(NULL));
    return 1;
  }
  int rank = 0, n = 0;
  batonCommUserRank(comm, &rank);
  batonCommCount(comm, &n);
  float x[4] = {(float)rank, (float)rank, (float)rank, (float)rank};
  batonResult_t r = batonAllReduce(x, x, 4, batonFloat, batonSum, comm, NULL); /* in place */
  if (r != batonSuccess) {
    fprintf(stderr, "allreduce: %s\n", batonGetLastError(comm));
  } else {
    printf("rank %d of %d: %g (expected %d)\n", rank, n, x[0], n * (n - 1) / 2);
  }
  batonCommDestroy(comm);
  return r != batonSuccess || x[0] != (float)(n * (n - 1) / 2);
}
