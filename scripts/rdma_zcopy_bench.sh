#!/usr/bin/env bash
# RDMA zero-copy against the staging slots over the emulated device
# (BATON_IB_EMULATE=1): 2 network-namespace hosts x 1 rank run PERF with
# registered buffers (-R 1), once with BATON_IB_ZCOPY_MIN at its default and
# once with 0, interleaved REPS times; prints each run's rows, then per size
# the medians of the out-of-place busbw and of the paired ratios. Root only
# (scripts/netns.sh). The emulation's figures say nothing of a NIC
# (docs/rdma.md).
# Usage: scripts/rdma_zcopy_bench.sh PERF_NAME PERF_ARGS...
#   e.g. REPS=7 scripts/rdma_zcopy_bench.sh sendrecv_perf -b 4M -e 64M -f 16 -n 20 -w 3
set -u
cd "$(dirname "$0")/.."
perf=$1
shift
REPS=${REPS:-5}
tag="zb$$"
# shellcheck source=tests/scripts/netns_jobs.sh
source tests/scripts/netns_jobs.sh
trap 'scripts/netns.sh down "$tag" 2' EXIT
scripts/netns.sh up "$tag" 2 none >/dev/null || exit 1
out=$(mktemp)
for rep in $(seq 1 "$REPS"); do
  for mode in zcopy staged; do
    logs=()
    pids=()
    if [[ $mode == staged ]]; then export BATON_IB_ZCOPY_MIN=0; else unset BATON_IB_ZCOPY_MIN; fi
    BATON_IB_EMULATE=1 BATON_TRANSPORT=ib start_host_jobs "$tag" 2 1 \
      $((21000 + rep * 2 + ${#mode} % 2)) 300 build/src/batonrun "build/perf/$perf" -R 1 "$@"
    for p in "${pids[@]}"; do wait "$p"; done
    echo "== rep $rep $mode" | tee -a "$out"
    grep -E "^ +[0-9]+ " "${logs[0]}" | tee -a "$out"
    rm -f "${logs[@]}"
  done
done
python3 - "$out" <<'PY'
import collections, re, statistics, sys
rows, mode = collections.defaultdict(list), None
for line in open(sys.argv[1]):
    m = re.match(r"== rep \d+ (\w+)", line)
    if m:
        mode = m.group(1)
        continue
    f = line.split()
    if len(f) > 8 and f[0].isdigit():
        rows[(int(f[0]), mode)].append(float(f[7]))
for size in sorted({k[0] for k in rows}):
    z, s = rows[(size, "zcopy")], rows[(size, "staged")]
    r = [a / b for a, b in zip(z, s)]
    print(f"{size} bytes: in place {statistics.median(z):.2f} GB/s, slots {statistics.median(s):.2f}"
          f" GB/s, paired ratio median {statistics.median(r):.2f} ({min(r):.2f} to {max(r):.2f}), n={len(r)}")
PY
rm -f "$out"
