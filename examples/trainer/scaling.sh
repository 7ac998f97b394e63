#!/usr/bin/env bash
# The trainer's scaling table (docs/trainer.md): samples/s and test accuracy of baton-train on
# Fashion-MNIST for 1, 2 and 4 ranks on shared memory, 4 simulated hosts (network namespaces,
# tbf RATE) with and without overlap, and each mode (sync, ps, ps --async, local K=8).
#
#   examples/trainer/scaling.sh [BUILD_DIR]        (default build; prints a Markdown table)
#
# EPOCHS (5) epochs per shared-memory run, NETNS_EPOCHS (5) per simulated-cluster run, RATE
# (1gbit), SECTIONS (shm,cluster: which rows), EXTRA (more trainer options). samples/s is the median over the epochs of one run. The cluster rows need root and
# scripts/netns.sh; without them they are reported as skipped.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
batonrun=$build/src/batonrun
train=$build/examples/trainer/baton-train
EPOCHS=${EPOCHS:-5}
NETNS_EPOCHS=${NETNS_EPOCHS:-5}
RATE=${RATE:-1gbit}
SECTIONS=${SECTIONS:-shm,cluster}  # which rows: shm, cluster or both
read -r -a EXTRA <<<"${EXTRA:-}"  # more trainer options for every run, e.g. "--max-steps 20"
for f in "$batonrun" "$train"; do
  [[ -x $f ]] || { echo "$0: $f missing (build first: ninja -C $build)" >&2; exit 1; }
done
work=$(mktemp -d)
tag="tr$$"
netns_up=0
cleanup() {
  [[ $netns_up -eq 1 ]] && "$root/scripts/netns.sh" down "$tag" 4
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# summary JSON: "samples/s | test_acc | comm_wait_frac" of a run's JSON lines.
summary() {
  python3 - "$1" <<'PY'
import json, statistics, sys
recs = [r for r in (json.loads(l) for l in open(sys.argv[1]) if l.strip()) if "epoch" in r]
sps = statistics.median(r["samples_per_s"] for r in recs)
wait = statistics.median(r["comm_wait_frac"] for r in recs)
last = recs[-1]
extra = f" (staleness mean {last['staleness_mean']:.2f})" if last.get("staleness_mean") else ""
print(f"{sps:,.0f} | {last['test_acc']:.4f} after {last['epoch']} | {wait:.3f}{extra}")
PY
}

row() {  # row LABEL JSON
  if [[ -s $2 ]]; then echo "| $1 | $(summary "$2") |"; else echo "| $1 | failed (see stderr) | | |"; fi
}

shm() {  # shm LABEL RANKS ARGS...
  local label=$1 ranks=$2
  shift 2
  local json="$work/$RANDOM.json"
  BATON_SOCKET_IFNAME=lo "$batonrun" -n "$ranks" "$train" --no-progress --epochs "$EPOCHS" \
    --json "$json" "$@" "${EXTRA[@]}" >&2
  row "$label" "$json"
}

cluster() {  # cluster LABEL ARGS...: 4 hosts x 1 rank over TCP at RATE; the 4 "hosts" share
  # this machine's cores, so one BLAS thread each
  local label=$1
  shift
  if [[ $netns_up -ne 1 ]]; then
    echo "| $label | skipped: needs root and scripts/netns.sh | | |"
    return
  fi
  local json="$work/$RANDOM.json" port=$((20000 + RANDOM % 20000)) pids=()
  for i in 0 1 2 3; do
    local out=()
    [[ $i -eq 0 ]] && out=(--json "$json")
    BATON_SOCKET_IFNAME=eth0 ip netns exec "$tag-h$i" "$batonrun" -n 1 --world-size 4 \
      --rank-offset "$i" --root "10.77.0.1:$port" "$train" --no-progress \
      --epochs "$NETNS_EPOCHS" --blas-threads 1 "${out[@]}" "$@" "${EXTRA[@]}" >&2 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  row "$label" "$json"
}

echo "baton-train on $(nproc) cores, $(date -u +%Y-%m-%dT%H:%MZ), epochs $EPOCHS (cluster $NETNS_EPOCHS)" >&2
echo "| run | samples/s | test_acc | comm_wait_frac |"
echo "| --- | ---: | --- | ---: |"
if [[ ,$SECTIONS, == *,shm,* ]]; then
  shm "sync, 1 rank" 1
  shm "sync, 2 ranks, shared memory" 2
  shm "sync, 4 ranks, shared memory" 4
  shm "ps (rank 0 serves 3 workers), 4 ranks" 4 --mode ps
  shm "ps --async, 4 ranks" 4 --mode ps --async
  shm "local SGD K=8, 4 ranks" 4 --mode local --average-every 8
fi
[[ ,$SECTIONS, == *,cluster,* ]] || exit 0
if [[ $(id -u) -eq 0 && -x $root/scripts/netns.sh ]] && "$root/scripts/netns.sh" up "$tag" 4 "$RATE" >&2; then
  netns_up=1
fi
cluster "sync, 4 hosts at $RATE, overlap" 
cluster "sync, 4 hosts at $RATE, no overlap" --no-overlap
cluster "sync, 4 hosts at $RATE, fp16 allreduce" --fp16-allreduce
