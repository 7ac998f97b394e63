#!/usr/bin/env bash
# Every power-of-two size from 8 B to 64 MiB through allreduce and
# broadcast with 4 ranks, in each transport configuration: shared memory,
# shared memory with Cross Memory Attach, TCP, and TCP striped over three
# sockets per peer. The perf binaries check every result (#wrong) and exit
# non-zero on any error.
# Usage: tests/perf_sweep_test.sh BATONRUN ALL_REDUCE_PERF BROADCAST_PERF
set -u
batonrun=$1
shift
configs=("BATON_TRANSPORT=shm"
         "BATON_TRANSPORT=shm BATON_CMA=1"
         "BATON_TRANSPORT=tcp"
         "BATON_TRANSPORT=tcp BATON_NSOCKS_PERPEER=3")
passed=0
failed=0
for config in "${configs[@]}"; do
  for bin in "$@"; do
    name="$(basename "$bin") $config"
    # shellcheck disable=SC2086 # the config is a list of assignments
    out=$(env $config timeout 300 "$batonrun" -n 4 "$bin" -b 8 -e 64M -f 2 -n 2 -w 1 2>&1)
    rc=$?
    if [[ $rc -eq 0 ]] && grep -q "Out of bounds values : 0 OK" <<<"$out" &&
       ! awk '/^ +[0-9]/ { if ($9 != 0 || ($13 != 0 && $13 != "N/A")) bad = 1 } END { exit !bad }' <<<"$out"; then
      echo "ok - $name"
      passed=$((passed + 1))
    else
      echo "not ok - $name (exit $rc)"
      echo "$out" | tail -40
      failed=$((failed + 1))
    fi
  done
done
echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
