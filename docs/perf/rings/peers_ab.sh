#!/bin/bash
# Interleaved rounds of Baton configurations and Intel MPI, 2 ranks on cores 0 and 1, each round
# labelled by the latency floor (docs/perf/rings/summarize.py groups them by mode; REFERENCE first):
#   B=8K E=4M N=200 docs/perf/rings/peers_ab.sh ROUNDS CONFIG...   (CONFIG: default, impi, or
#   ENV=VALUE[,ENV=VALUE]; LD_LIBRARY_PATH=DIR runs another build's library)
cd "$(dirname "$0")/../../.."
R=$1; shift
run() { grep -E '^ +[0-9]+' | awk '{printf "%s:%s ", $1, $6}'; echo; }
for i in $(seq $R); do
  f=$(build/perf/shm_latency_floor 2 300000 3 2>&1 | tail -1 | sed 's/.*median //;s/ us.*//')
  for c in "$@"; do
    printf "round %s floor %s nr 2 cfg %s " $i $f "$c"
    if [ "$c" = impi ]; then
      env I_MPI_FABRICS=shm I_MPI_PIN=0 .venv-peers/impi/bin/mpiexec -n 2 sh -c 'exec taskset -c $((PMI_RANK % 2)) "$@"' sh build/perf/peers/impi_all_reduce_perf -b ${B} -e ${E} -f ${F:-8} -n ${N} -w 5 -c 0 2>&1 | run
    else e=""; [ "$c" != default ] && e=$(echo $c | tr ',' ' ')
      env $e build/src/batonrun -n 2 build/perf/all_reduce_perf -b ${B} -e ${E} -f ${F:-8} -n ${N} -w 5 -c 0 2>&1 | run
    fi
  done
  printf "round %s end-floor %s\n" $i $(build/perf/shm_latency_floor 2 300000 3 2>&1 | tail -1 | sed 's/.*median //;s/ us.*//')
done
