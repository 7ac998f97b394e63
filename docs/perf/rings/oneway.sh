#!/bin/bash
# Interleaved A/B of libraries on one-way rings (docs/performance.md, "One-way rings time their
# own round trips"): 4 ranks (select_ab: auto, ring and rhd forced, 128 KiB-8 MiB) and 2 ranks
# (all_reduce_perf, 64 KiB-16 MiB), each library in turn, for SECONDS.
#   docs/perf/rings/oneway.sh SECONDS NAME=LIBDIR [NAME=LIBDIR...]   (LIBDIR "" : this build)
# SLOW_ONLY=1 runs a round only when the latency floor says the slow mode (else waits 10 s).
# Every round starts and ends with the latency floor (fast ~0.04 us, slow ~0.2 us);
# docs/perf/rings/oneway_summary.py FILE NAME,NAME... groups rounds by it.
cd "$(dirname "$0")/../../.."
end=$(( $(date +%s) + $1 )); shift
floor() { build/perf/shm_latency_floor 2 300000 3 2>&1 | tail -1 | sed 's/.*median \([0-9.]*\).*/\1/'; }
while [ "$(date +%s)" -lt $end ]; do
  fl=$(floor)
  if [ -n "$SLOW_ONLY" ] && awk "BEGIN{exit !($fl < 0.12)}"; then sleep 10; continue; fi
  for c in "$@"; do
    name=${c%%=*} lib=${c#*=}
    LD_LIBRARY_PATH=$lib build/src/batonrun -n 4 build/perf/select_ab -b 128K -e 8M -f 4 \
      -v auto,ring,rhd -r 11 -t 0.02 2>&1 | grep -E '^ +[0-9]' | sed "s/^/floor=$fl lib=$name /"
    printf "floor=$fl lib=$name nr=2 "
    LD_LIBRARY_PATH=$lib build/src/batonrun -n 2 build/perf/all_reduce_perf -y 1 -b 64K -e 16M \
      -f 4 -n 100 -w 5 -c 0 2>&1 | grep -E '^ +[0-9]+' | awk '{printf "%s:%s ", $1, $6}'
    echo
  done
  echo "end-floor=$(floor)"
done
