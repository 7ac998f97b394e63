#!/bin/bash
# Waits for the VM's slow mode (latency floor > 0.1 us), then runs a traced launch of this build
# (its connect-time verdict) and this build, the one under /tmp/base, BATON_SHM_STREAM=1 and Intel
# MPI, 2 ranks, 8 KiB-512 KiB; MAXN slow periods (default 6). docs/performance.md, "A verdict as
# the pair connects".
cd "$(dirname "$0")/../../.."
n=0
for i in $(seq 400); do
  f=$(build/perf/shm_latency_floor 2 300000 3 2>&1 | tail -1 | sed 's/.*median //;s/ us.*//')
  if awk "BEGIN{exit !($f > 0.1)}"; then
    n=$((n+1))
    echo "=== slow $n floor $f at $(date +%T)"
    BATON_DEBUG=TRACE BATON_DEBUG_SUBSYS=shm build/src/batonrun -n 2 build/perf/all_reduce_perf -b 8K -e 512K -f 8 -n 200 -w 5 -c 0 > /tmp/slow2tr$n.txt 2>&1
    grep -E "fastest of|line takes" /tmp/slow2tr$n.txt | cut -c1-220
    echo "new-traced $(grep "^ *[0-9]" /tmp/slow2tr$n.txt | awk '{printf "%s:%s ", $1,$6}')"
    for c in old new STREAM1 impi; do
      case $c in
        old) r=$(LD_LIBRARY_PATH=/tmp/base/build/src build/src/batonrun -n 2 build/perf/all_reduce_perf -b 8K -e 512K -f 8 -n 200 -w 5 -c 0 2>&1);;
        new) r=$(build/src/batonrun -n 2 build/perf/all_reduce_perf -b 8K -e 512K -f 8 -n 200 -w 5 -c 0 2>&1);;
        STREAM1) r=$(BATON_SHM_STREAM=1 build/src/batonrun -n 2 build/perf/all_reduce_perf -b 8K -e 512K -f 8 -n 200 -w 5 -c 0 2>&1);;
        impi) r=$(env I_MPI_FABRICS=shm I_MPI_PIN=0 .venv-peers/impi/bin/mpiexec -n 2 sh -c 'exec taskset -c $((PMI_RANK % 2)) "$@"' sh build/perf/peers/impi_all_reduce_perf -b 8K -e 512K -f 8 -n 200 -w 5 -c 0 2>&1);;
      esac
      echo "$c $(echo "$r" | grep -E '^ +[0-9]+' | awk '{printf "%s:%s ", $1, $6}')"
    done
    echo "end floor $(build/perf/shm_latency_floor 2 300000 3 2>&1 | tail -1 | sed 's/.*median //;s/ us.*//')"
    [ $n -ge ${MAXN:-6} ] && exit 0
  fi
  sleep 3
done
