#!/usr/bin/env bash
# The sharded parameter server's and elastic training's tables of docs/trainer.md, on
# Fashion-MNIST:
# - ps: 4 workers with K = 1, 2, 4 servers (5, 6, 8 ranks): test accuracy, samples/s, bytes sent
#   per rank and step (mean and busiest rank);
# - elastic: 4 ranks (--mode sync), rank 2 killed with SIGKILL 0.5 s into epoch 2, on shared
#   memory and TCP, without and with --replace, and the sharded server losing a worker: test
#   accuracy against the same run undisturbed, the step of the loss, the recovery (shrink, and
#   the whole recovery with the state handed over), the replacement's start and join.
#
#   examples/trainer/elastic_table.sh [BUILD_DIR]     (default build; Markdown on stdout)
#
# EPOCHS (5) per run, SECTIONS (ps,elastic); the runs' output goes to stderr.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
batonrun=$build/src/batonrun
train=$build/examples/trainer/baton-train
EPOCHS=${EPOCHS:-5}
SECTIONS=${SECTIONS:-ps,elastic}
for f in "$batonrun" "$train"; do
  [[ -x $f ]] || { echo "$0: $f missing (build first: ninja -C $build)" >&2; exit 1; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT TERM
export BATON_SOCKET_IFNAME=lo

# run VICTIM BATONRUN-ARGS -- TRAINER-ARGS: one run, in the background; with VICTIM >= 0 that
# rank (batonrun's BATON_RANK) is killed 0.5 s after epoch 1's line. JSON in $work/run.json,
# output in $work/run.log.
run() {
  local victim=$1
  shift
  local launcher=()
  while [[ $1 != -- ]]; do
    launcher+=("$1")
    shift
  done
  shift
  rm -f "$work/run.json" "$work/run.log"
  echo "# batonrun ${launcher[*]} baton-train $*" >&2
  "$batonrun" "${launcher[@]}" "$train" --no-progress --epochs "$EPOCHS" --json "$work/run.json" \
    "$@" >"$work/run.log" 2>&1 </dev/null &
  local job=$! child
  if [[ $victim -ge 0 ]]; then
    while kill -0 "$job" 2>/dev/null && ! grep -q "^epoch 1/" "$work/run.log" 2>/dev/null; do
      sleep 0.05
    done
    sleep 0.5
    for child in $(pgrep -P "$job"); do
      if { tr '\0' '\n' <"/proc/$child/environ"; } 2>/dev/null | grep -qx "BATON_RANK=$victim"; then
        kill -9 "$child"
      fi
    done
  fi
  wait "$job"
  local rc=$?
  grep "^elastic\|joined as\|^epoch $EPOCHS/" "$work/run.log" >&2
  return $rc
}

if [[ $SECTIONS == *ps* ]]; then
  echo "| servers K | ranks | test_acc | samples/s | sent per rank and step, mean / busiest (MB) | a worker / a server (MB) |"
  echo "| ---: | ---: | --- | ---: | --- | --- |"
  for k in 1 2 4; do
    run -1 -n $((k + 4)) -- --mode ps --ps-shards $k || continue
    python3 - "$k" "$work/run.json" "$work/run.log" <<'PY'
import json, re, statistics, sys
k, recs, log = int(sys.argv[1]), [r for r in map(json.loads, open(sys.argv[2])) if "epoch" in r], open(sys.argv[3]).read()
m = re.search(r"a step sends ([\d.]+) MB per worker and ([\d.]+) MB per server", log)
sps = statistics.median(r["samples_per_s"] for r in recs)
r = recs[-1]
print(f"| {k} | {r['ranks']} | {r['test_acc']:.4f} | {sps:,.0f} | "
      f"{r['sent_bytes_per_rank_step'] / 1e6:.3f} / {r['sent_bytes_max_rank_step'] / 1e6:.3f} | "
      f"{m.group(1)} / {m.group(2)} |")
PY
  done
  echo
fi

if [[ $SECTIONS == *elastic* ]]; then
  echo "| run | transport | test_acc (undisturbed) | lost during step (epoch) | ranks at the end | recovery: shrink / all (ms) | replacement: start / join (s), grow / state (ms) |"
  echo "| --- | --- | --- | --- | ---: | --- | --- |"
  # elastic_row NAME TRANSPORT VICTIM RANKS EXTRA-LAUNCHER -- TRAINER-ARGS
  elastic_row() {
    local name=$1 transport=$2 victim=$3 ranks=$4 extra=$5
    shift 6
    if [[ $transport == tcp ]]; then export BATON_TRANSPORT=tcp; else unset BATON_TRANSPORT; fi
    local base=failed
    if run -1 -n "$ranks" -- "$@"; then
      base=$(python3 -c "import json,sys; print(json.loads(open(sys.argv[1]).read().splitlines()[-1])['test_acc'])" "$work/run.json")
    fi
    # shellcheck disable=SC2086
    run "$victim" --elastic $extra -n "$ranks" -- --elastic "$@" || { echo "| $name | $transport | run failed | | | | |"; return; }
    python3 - "$name" "$transport" "$base" "$work/run.json" "$work/run.log" <<'PY'
import json, re, sys
name, transport, base = sys.argv[1:4]
recs, log = [r for r in map(json.loads, open(sys.argv[4])) if "epoch" in r], open(sys.argv[5]).read()
lost = re.search(r"during step (\d+) \(epoch (\d+)\)", log)
rec = re.search(r"recovered in ([\d.]+) ms \(shrink ([\d.]+) ms\)", log)
join = re.search(r"([\d.]+) s to start \(data, model\), ([\d.]+) s to join", log)
grow = re.search(r"grow ([\d.]+) ms, state ([\d.]+) ms", log)
joined = f"{join.group(1)} / {join.group(2)}, {grow.group(1)} / {grow.group(2)}" if join and grow else "-"
print(f"| {name} | {transport} | {recs[-1]['test_acc']:.4f} ({float(base):.4f}) | "
      f"{lost.group(1)} ({lost.group(2)}) | {recs[-1]['ranks']} | {rec.group(2)} / {rec.group(1)} | {joined} |")
PY
  }
  for transport in shm tcp; do
    elastic_row "sync, 4 ranks, rank 2 lost" "$transport" 2 4 "" --
    elastic_row "sync, 4 ranks, rank 2 lost and replaced" "$transport" 2 4 --replace --
  done
  elastic_row "ps, 2 servers + 3 workers, worker rank 3 lost and replaced" shm 3 5 --replace -- \
    --mode ps --ps-shards 2
fi
