#!/usr/bin/env bash
# Every power-of-two size from 8 B to 64 MiB through allreduce and
# broadcast with 4 ranks, in each transport configuration: shared memory,
# shared memory with Cross Memory Attach, TCP, and TCP striped over three
# sockets per peer. The perf binaries check every result (#wrong) and exit
# non-zero on any error.
# Usage: tests/scripts/perf_sweep_test.sh BATONRUN ALL_REDUCE_PERF BROADCAST_PERF
set -u
batonrun=$1
shift
configs=("BATON_TRANSPORT=shm"
         "BATON_TRANSPORT=shm BATON_CMA=1"
         "BATON_TRANSPORT=tcp"
         "BATON_TRANSPORT=tcp BATON_NSOCKS_PERPEER=3")
source "$(dirname "$0")/perf_check.sh"
for config in "${configs[@]}"; do
  for bin in "$@"; do
    # shellcheck disable=SC2086 # the config is a list of assignments
    perf_check "$(basename "$bin") $config" \
      env $config "$batonrun" -n 4 "$bin" -b 8 -e 64M -f 2 -n 2 -w 1
  done
done
perf_summary
