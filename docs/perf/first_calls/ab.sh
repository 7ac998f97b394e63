#!/bin/bash
# A communicator's first calls with two libraries in turns (docs/performance.md, "Faults on a
# communicator's first calls"):  docs/perf/first_calls/ab.sh ROUNDS BASE_LIB_DIR [NR...]
# prints, per round, ranks, size and library: the first call, the median of calls 3-9, and the
# mean of calls 3-202 over the median of the last calls.
cd "$(dirname "$0")/../../.."
R=$1; base=$2; shift 2
for i in $(seq "$R"); do
  for nr in "${@:-2}"; do
    for b in 8 4K 64K 1M; do
      for lib in new base; do
        env=(); [ $lib = base ] && env=(LD_LIBRARY_PATH="$base")
        out=$(env "${env[@]}" build/src/batonrun -n "$nr" build/perf/first_calls -b $b -n 1500)
        first=$(echo "$out" | awk '/\[0, 1\)/ {print $3}')
        early=$(echo "$out" | awk '/\[3, 10\)/ {print $3}')
        ratio=$(echo "$out" | awk '/mean of calls/ {print $7}')
        echo "round $i nr $nr size $b lib $lib first $first calls3-9 $early mean3-202/steady $ratio"
      done
    done
  done
done
