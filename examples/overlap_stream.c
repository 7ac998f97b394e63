/*
 * Overlapping communication with computation on a host stream, the way a
 * data-parallel trainer reduces one layer's gradients while the next layer's
 * backward pass runs.
 *
 *   batonrun -n 2 build/examples/overlap_stream
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <baton.h>
#include <stdio.h>
#include <stdlib.h>

#define LAYERS 4
#define PARAMS (1 << 20)

static void backward(float* grad, int layer, int rank) {
  for (int i = 0; i < PARAMS; ++i) grad[i] = (float)(layer + rank);
}

int main(void) {
  batonComm_t comm;
  batonStream_t stream;
  if (batonCommInitFromEnv(&comm) != batonSuccess || batonStreamCreate(&stream) != batonSuccess) {
    fprintf(stderr, "init: %s\n", batonGetLastError(NULL));
    return 1;
  }
  int rank = 0, n = 0;
  batonCommUserRank(comm, &rank);
  batonCommCount(comm, &n);
  float* grads[LAYERS];
  for (int l = LAYERS - 1; l >= 0; --l) { /* backward runs from the last layer */
    grads[l] = malloc(sizeof(float) * PARAMS);
    backward(grads[l], l, rank);
    /* Returns at once: the average runs while the next layer computes. */
    batonAllReduce(grads[l], grads[l], PARAMS, batonFloat, batonAvg, comm, stream);
  }
  batonResult_t r = batonStreamSynchronize(stream);
  int ok = r == batonSuccess;
  for (int l = 0; l < LAYERS; ++l) {
    float want = (float)l + (float)(n - 1) / 2.0f;
    ok &= grads[l][0] == want && grads[l][PARAMS - 1] == want;
    free(grads[l]);
  }
  if (rank == 0) printf("%s\n", ok ? "gradients averaged" : batonGetLastError(comm));
  batonStreamDestroy(stream);
  batonCommDestroy(comm);
  return !ok;
}
