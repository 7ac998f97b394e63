#!/usr/bin/env bash
# Every perf binary with every algorithm its collective has (-A), under
# batonrun with 5 ranks (a rank count that is not a power of two, so the
# folding and odd-tree paths run): every row must report #wrong 0.
# Usage: tests/scripts/perf_algorithms_test.sh BATONRUN PERF_DIR
set -u
batonrun=$1
dir=$2
ranks=${RANKS:-5}
declare -A algos=(
  [all_reduce_perf]="ring rhd tree hier"
  [broadcast_perf]="ring tree binomial hier"
  [reduce_perf]="ring tree binomial hier"
  [all_gather_perf]="ring rhd hier"
  [reduce_scatter_perf]="ring rhd"
  [alltoall_perf]="pairwise"
  [sendrecv_perf]="ring"
  [gather_perf]="direct binomial"
  [scatter_perf]="direct binomial"
  [all_gather_v_perf]="ring rhd"
  [alltoallv_perf]="pairwise"
)
source "$(dirname "$0")/perf_check.sh"
for bin in all_reduce_perf broadcast_perf reduce_perf all_gather_perf reduce_scatter_perf \
           alltoall_perf sendrecv_perf gather_perf scatter_perf all_gather_v_perf alltoallv_perf; do
  for algo in ${algos[$bin]}; do
    perf_check "$bin -A $algo, $ranks ranks" \
      "$batonrun" -n "$ranks" "$dir/$bin" -b 8 -e 1M -f 8 -n 2 -w 1 -A "$algo"
  done
done
perf_summary
