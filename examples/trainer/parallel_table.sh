#!/usr/bin/env bash
# The model-parallel tables of docs/trainer.md: baton-train on Fashion-MNIST with --mode tensor,
# pipeline (gpipe, 1f1b, pipedream) and hybrid layouts on 1 to 4 ranks: test accuracy, samples/s,
# bytes sent per rank and step, parameters + momentum and activations per rank; then the
# pipeline bubble, measured and predicted, for 2 and 4 stages and M = 1, 2, 4, 8 micro-batches.
#
#   examples/trainer/parallel_table.sh [BUILD_DIR]     (default build; Markdown on stdout)
#
# EPOCHS (10) per accuracy run, BUBBLE_STEPS (300) steps per bubble run, HIDDEN (336,784,336,784:
# five layers, so that 4 stages and 3- and 4-way tensor groups fit, and the default balancing
# gives 2 and 4 stages equal work), SECTIONS (accuracy,bubble), EXTRA (more options for every
# run). samples/s is the median over a run's epochs; the runs' output goes to stderr.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
batonrun=$build/src/batonrun
train=$build/examples/trainer/baton-train
EPOCHS=${EPOCHS:-10}
BUBBLE_STEPS=${BUBBLE_STEPS:-300}
HIDDEN=${HIDDEN:-336,784,336,784}
SECTIONS=${SECTIONS:-accuracy,bubble}
read -r -a EXTRA <<<"${EXTRA:-}"
for f in "$batonrun" "$train"; do
  [[ -x $f ]] || { echo "$0: $f missing (build first: ninja -C $build)" >&2; exit 1; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT TERM
export BATON_SOCKET_IFNAME=lo

# run RANKS ARGS...: one run; its JSON in $work/run.json, its output in $work/run.log.
run() {
  local ranks=$1
  shift
  rm -f "$work/run.json"
  echo "# batonrun -n $ranks baton-train $*" >&2
  "$batonrun" -n "$ranks" "$train" --no-progress --hidden "$HIDDEN" --json "$work/run.json" \
    "${EXTRA[@]}" "$@" >"$work/run.log" 2>&1
  local rc=$?
  grep -v "^  rank" "$work/run.log" | tail -2 >&2
  return $rc
}

# row NAME: a table row from the last run's JSON and its per-rank layout lines.
row() {
  python3 - "$1" "$work/run.json" "$work/run.log" <<'PY'
import json, re, statistics, sys
name, recs = sys.argv[1], [r for r in (json.loads(l) for l in open(sys.argv[2]) if l.strip()) if "epoch" in r]
log = open(sys.argv[3]).read()
acc = recs[-1]["test_acc"]
first = next((r["epoch"] for r in recs if r["test_acc"] >= 0.85), None)
sps = statistics.median(r["samples_per_s"] for r in recs)
sent = recs[-1].get("sent_bytes_per_rank_step", 0) / 1e6
sent_max = recs[-1].get("sent_bytes_max_rank_step", 0) / 1e6
mem = [float(m) for m in re.findall(r"parameters \+ momentum ([\d.]+) MiB", log)]
act = [float(m) for m in re.findall(r"activations ([\d.]+) MiB", log)]
stash = [float(m) for m in re.findall(r"weight stash ([\d.]+) MiB", log)] or [0]
bubble = f'{recs[-1]["bubble"]:.2f} / {recs[-1]["bubble_predicted"]:.2f}' if "bubble" in recs[-1] else ""
print(f"| {name} | {acc:.4f} ({first or '-'}) | {sps:,.0f} | {sent:.3f} / {sent_max:.3f} | "
      f"{max(mem):.2f} | {max(act):.2f}{f' + {max(stash):.2f} stash' if max(stash) else ''} | {bubble} |")
PY
}

# The last run's bubble: "measured / predicted".
bubble() {
  python3 - "$work/run.json" <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).read().splitlines()[-1])
print(f"{r['bubble']:.2f} / {r['bubble_predicted']:.2f}")
PY
}

if [[ $SECTIONS == *accuracy* ]]; then
  echo "| run | test_acc after $EPOCHS (first epoch >= 0.85) | samples/s | MB sent per rank and step (mean / max) | params + momentum MiB per rank (max) | activations MiB per rank (max) | bubble measured / predicted |"
  echo "| --- | --- | ---: | ---: | ---: | ---: | --- |"
  acc=(--epochs "$EPOCHS")
  while read -r ranks name args; do
    # shellcheck disable=SC2086
    if run "$ranks" "${acc[@]}" $args; then row "${name//_/ }, $ranks rank(s)"; else echo "| ${name//_/ }, $ranks rank(s) | failed | | | | | |"; fi
  done <<'EOF'
1 one_process --dp 1
2 data_parallel --dp 2
4 data_parallel --dp 4
2 tensor --mode tensor
3 tensor --mode tensor
4 tensor --mode tensor
2 pipeline_gpipe_M=4 --mode pipeline --schedule gpipe --micro-batches 4
4 pipeline_gpipe_M=4 --mode pipeline --schedule gpipe --micro-batches 4
2 pipeline_1f1b_M=4 --mode pipeline --schedule 1f1b --micro-batches 4
3 pipeline_1f1b_M=4 --mode pipeline --schedule 1f1b --micro-batches 4
4 pipeline_1f1b_M=4 --mode pipeline --schedule 1f1b --micro-batches 4
2 pipedream_M=1 --mode pipeline --schedule pipedream
4 pipedream_M=1 --mode pipeline --schedule pipedream
4 pipedream_M=1_no_weight_stash --mode pipeline --schedule pipedream --no-weight-stash
4 hybrid_dp_2_x_tp_2 --dp 2 --tp 2
4 hybrid_dp_2_x_pp_2_1f1b_M=4 --dp 2 --pp 2 --micro-batches 4
4 hybrid_tp_2_x_pp_2_1f1b_M=4 --tp 2 --pp 2 --micro-batches 4
EOF
  echo
fi

if [[ $SECTIONS == *bubble* ]]; then
  # Each stage's hand-off waits longer than Baton's default spin (BATON_SPIN_US, 200 us) and then
  # sleeps; on a VM the wake-up can cost milliseconds. The rows with BATON_SPIN_US=20000 poll
  # through the wait instead (docs/trainer.md).
  echo "| stages | schedule | BATON_SPIN_US | M = 1 | M = 2 | M = 4 | M = 8 |"
  echo "| ---: | --- | ---: | --- | --- | --- | --- |"
  for stages in 2 4; do
    for spin in 200 20000; do
      for schedule in gpipe 1f1b; do
        line="| $stages | $schedule | $spin |"
        for m in 1 2 4 8; do
          if BATON_SPIN_US=$spin run "$stages" --epochs 1 --max-steps "$BUBBLE_STEPS" --mode pipeline \
            --schedule "$schedule" --micro-batches "$m"; then
            line+=" $(bubble) |"
          else
            line+=" failed |"
          fi
        done
        echo "$line"
      done
    done
  done
fi
