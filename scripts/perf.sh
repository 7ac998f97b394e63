#!/usr/bin/env bash
# The main job: builds Baton if needed, then runs the allreduce and broadcast
# sweeps on this machine over shared memory and over TCP loopback, printing
# nccl-tests tables, and finally Baton against its peers (Open MPI, Gloo, and the
# Intel MPI, MPICH and oneCCL that setup.sh puts in .venv-peers/, not in the
# torch-free .venv) on this host
# (perf/compare.py, 2 ranks, tables and plots in perf-results/). RANKS (default
# 4), MAXBYTES (default 64M) and extra perf flags can be given:
# scripts/perf.sh -n 20. COMPARE=0 skips the comparison.
set -euo pipefail
cd "$(dirname "$0")/.."
# No aarch64 cross tools (docs/arm.md) and no torch (docs/python.md): only the
# test suite and the Python examples use them.
SETUP_CROSS=${SETUP_CROSS:-0} SETUP_TORCH=${SETUP_TORCH:-0} scripts/setup.sh
ranks=${RANKS:-4}
max=${MAXBYTES:-64M}
for transport in shm tcp; do
  for coll in all_reduce_perf broadcast_perf; do
    echo "### $coll, $ranks ranks, BATON_TRANSPORT=$transport"
    BATON_TRANSPORT=$transport build/src/batonrun -n "$ranks" "build/perf/$coll" -b 8 -e "$max" -f 2 "$@"
  done
done
if [[ ${COMPARE:-1} != 0 ]]; then
  echo "### Baton vs its peers, allreduce, 2 ranks on this host (perf/compare.py)"
  perf/compare.py --build build --configs shm2 --reps 3 --out perf-results
  sed -n '/^## shm2/,$p' perf-results/results.md | grep -v '^!\['
fi
