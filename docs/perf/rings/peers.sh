#!/bin/bash
# Interleaved rounds of Baton's allreduce (ordinary buffers) against Intel MPI, oneCCL and Open MPI
# on 2 ranks, one per core, each round labelled by the latency floor at its start and its end
# (fast ~0.04 us, slow ~0.2 us: docs/performance.md, "Shared-memory rings"; summarize.py groups
# the rounds by it). Launches as perf/compare.py does.
#   B=512K E=4M N=71 docs/perf/rings/peers.sh ROUNDS [CONFIG...]
# CONFIG: baton, impi, oneccl, mpi (the default: all four), or ENV=VALUE[,ENV=VALUE] for Baton
# with those variables (LD_LIBRARY_PATH=DIR runs another build's library).
cd "$(dirname "$0")/../../.."
R=${1:-1}; shift; V=.venv-peers
configs=${*:-baton impi oneccl mpi}
args="-y 1 -b ${B:-512K} -e ${E:-4M} -f ${F:-8} -n ${N:-71} -w 5 -c 0"
pin='exec taskset -c $((PMI_RANK % 2)) "$@"'
floor() { build/perf/shm_latency_floor 2 300000 3 2>&1 | tail -1 | sed 's/.*median //;s/ us.*//'; }
for i in $(seq $R); do
  f=$(floor)
  for lib in $configs; do
    printf "round %s floor %s nr 2 cfg %s " $i $f $lib
    case $lib in
      baton) build/src/batonrun -n 2 build/perf/all_reduce_perf $args ;;
      impi) env I_MPI_FABRICS=shm I_MPI_PIN=0 $V/impi/bin/mpiexec -n 2 sh -c "$pin" sh \
              build/perf/peers/impi_all_reduce_perf $args ;;
      oneccl) env CCL_ATL_TRANSPORT=ofi CCL_ATL_SHM=1 CCL_WORKER_OFFLOAD=0 build/src/batonrun -n 2 \
              build/perf/peers/oneccl_all_reduce_perf $args ;;
      mpi) mpirun --allow-run-as-root --mca btl self,vader -np 2 build/perf/peers/mpi_all_reduce_perf $args ;;
      *) env $(echo $lib | tr ',' ' ') build/src/batonrun -n 2 build/perf/all_reduce_perf $args ;;
    esac 2>&1 | grep -E '^ +[0-9]+' | awk '{printf "%s:%s ", $1, $6}'; echo
  done
  printf "round %s end-floor %s\n" $i $(floor)
done
