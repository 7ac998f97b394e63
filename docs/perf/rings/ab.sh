#!/bin/bash
# Interleaved A/B of shared-memory ring settings (docs/performance.md, "Shared-memory rings").
#   NR=2 B=64K E=4M N=100 docs/perf/rings/ab.sh ROUNDS CONFIG...   (F: size factor, default 8)
# CONFIG: default, or ENV=VALUE[,ENV=VALUE] (LD_LIBRARY_PATH=DIR runs another build's library).
# Each round first measures the latency floor (fast ~0.04 us, slow ~0.2 us: where the host put
# the two vCPUs), then runs every configuration once, and measures the floor again at its end;
# docs/perf/rings/summarize.py FILE groups the rounds by that floor (and drops a round whose
# mode changed on the way).
cd "$(dirname "$0")/../../.."
R=$1; shift
for i in $(seq $R); do
  f=$(build/perf/shm_latency_floor 2 300000 3 2>&1 | tail -1 | sed 's/.*median //;s/ us.*//')
  for c in "$@"; do e=""; [ "$c" != default ] && e=$(echo $c | tr ',' ' ')
    printf "round %s floor %s nr %s cfg %s " $i $f ${NR} "$c"
    env $e build/src/batonrun -n ${NR} build/perf/all_reduce_perf -y 1 -b ${B} -e ${E} -f ${F:-8} -n ${N} -w 5 -c 0 2>&1 | grep -E '^ +[0-9]+' | awk '{printf "%s:%s ", $1, $6}'; echo
  done
  printf "round %s end-floor %s\n" $i $(build/perf/shm_latency_floor 2 300000 3 2>&1 | tail -1 | sed 's/.*median //;s/ us.*//')
done
