#!/usr/bin/env bash
# baton-train's model-parallel modes end to end (docs/trainer.md):
# - equivalence: the first 20 steps of --mode tensor, pipeline (gpipe, 1f1b) and hybrid layouts on
#   2, 3, 4 (and 8) ranks, with 1 and 4 micro-batches, give the parameters of one process training
#   the same global batch, within an fp32 tolerance; pipelines of one micro-batch give them bit
#   for bit, and gpipe and 1f1b give each other's bits; pipedream (with and without weight
#   stashing) gives exactly the parameters of its one-process simulation (--simulate);
# - every mode learns the synthetic set (test accuracy >= 0.85);
# - bad layouts, sizes that do not divide, too many micro-batches, --schedule with one stage and a
#   global batch above the training set make every rank exit 2 with the reason, before any
#   training, with no launcher to stop them;
# - the trace holds each stage's forward, backward and send/recv per micro-batch, and the report
#   gives the measured bubble beside (S-1)/(M+S-1).
# Usage: tests/scripts/model_parallel_test.sh BATONRUN BATON_TRAIN
set -u
source "$(dirname "$0")/trainer_lib.sh" "$1" "$2"

alone() { timeout 120 "$train" --no-progress --blas-threads 1 "$@" >"$work/log" 2>&1; }
last_json() { python3 -c "import json,sys; print(json.loads(open(sys.argv[1]).read().splitlines()[-1])[sys.argv[2]])" "$@"; }

# compare A B TOLERANCE: A's parameters against B's. TOLERANCE 0: bit for bit. Otherwise the fp32
# tolerance: every parameter within TOLERANCE of the reference's, absolutely (the parameters are
# of order 0.1 to 1; 20 steps of rounding differences measured here stay below 1e-6), and the
# relative L2 distance below it too. Prints the distances.
compare() {
  python3 - "$@" <<'PY'
import array, math, sys
a, b = array.array("f"), array.array("f")
a.frombytes(open(sys.argv[1], "rb").read())
b.frombytes(open(sys.argv[2], "rb").read())
tol = float(sys.argv[3])
if len(a) != len(b) or len(a) == 0:
    print(f"sizes {len(a)} and {len(b)}"); sys.exit(1)
worst = max(abs(x - y) for x, y in zip(a, b))
rel = math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b))) / math.sqrt(sum(y * y for y in b))
if tol == 0:
    print(f"bit for bit" if a.tobytes() == b.tobytes() else f"not bitwise: max |diff| {worst:.3g}")
    sys.exit(0 if a.tobytes() == b.tobytes() else 1)
print(f"max |diff| {worst:.2g}, relative L2 {rel:.2g}")
sys.exit(0 if worst <= tol and rel <= tol and all(math.isfinite(x) for x in a) else 1)
PY
}
# same NAME RANKS REFERENCE TOLERANCE ARGS...: a run's --save-params against REFERENCE.
same() {
  local name=$1 ranks=$2 ref=$3 tol=$4
  shift 4
  rm -f "$work/p.bin"
  if ! run "$ranks" "$@" --save-params "$work/p.bin"; then
    bad "$name: run failed"
  elif verdict=$(compare "$work/p.bin" "$ref" "$tol"); then
    ok "$name: $verdict"
  else
    bad "$name: $verdict"
  fi
}

# ---- Equivalence with one process (20 steps) ------------------------------------------------------
tol=1e-5
steps=(--synthetic 2000 --epochs 1 --max-steps 20)
three=(--hidden 120,60)   # 3 layers: the output layer is a gathered column split (10 classes over 3, 4)
four=(--hidden 96,48,24)  # 4 layers: the output layer is row-parallel; room for 4 stages
# The references: one process, the whole global batch.
for h in three four; do
  declare -n hidden=$h
  for b in 64 128 192; do
    alone "${steps[@]}" "${hidden[@]}" --batch $b --save-params "$work/ref_${h}_$b.bin" ||
      bad "reference $h batch $b: run failed"
  done
done
for ranks in 2 3 4; do
  for m in 1 4; do
    same "tensor, $ranks ranks, $m micro-batch(es), 3 layers" $ranks "$work/ref_three_64.bin" $tol \
      "${steps[@]}" "${three[@]}" --mode tensor --micro-batches $m
  done
done
same "tensor, 2 ranks, 4 layers" 2 "$work/ref_four_64.bin" $tol "${steps[@]}" "${four[@]}" --mode tensor
same "tensor, 4 ranks, 4 layers" 4 "$work/ref_four_64.bin" $tol "${steps[@]}" "${four[@]}" --mode tensor
for ranks in 2 3 4; do
  same "pipeline 1f1b, $ranks stages, 1 micro-batch (bitwise)" $ranks "$work/ref_four_64.bin" 0 \
    "${steps[@]}" "${four[@]}" --mode pipeline --schedule 1f1b
  for schedule in gpipe 1f1b; do
    same "pipeline $schedule, $ranks stages, 4 micro-batches" $ranks "$work/ref_four_64.bin" $tol \
      "${steps[@]}" "${four[@]}" --mode pipeline --schedule $schedule --micro-batches 4
    cp "$work/p.bin" "$work/$schedule.bin" 2>/dev/null
  done
  if compare "$work/gpipe.bin" "$work/1f1b.bin" 0 >/dev/null; then
    ok "pipeline, $ranks stages: gpipe and 1f1b give the same bits"
  else
    bad "pipeline, $ranks stages: gpipe and 1f1b differ"
  fi
done
same "pipeline gpipe, --split 1,3, 3 micro-batches of 21/21/22" 2 "$work/ref_four_64.bin" $tol \
  "${steps[@]}" "${four[@]}" --mode pipeline --schedule gpipe --split 1,3 --micro-batches 3
# Hybrid: replicas average their gradients, so the reference trains dp x --batch at the same rate.
hy=("${steps[@]}" --no-lr-scaling)
same "hybrid dp 2 (data parallel), 4 micro-batches" 2 "$work/ref_four_128.bin" $tol "${hy[@]}" "${four[@]}" \
  --dp 2 --micro-batches 4
same "hybrid dp 3" 3 "$work/ref_four_192.bin" $tol "${hy[@]}" "${four[@]}" --dp 3
for m in 1 4; do
  same "hybrid dp 2 x tp 2, $m micro-batch(es)" 4 "$work/ref_three_128.bin" $tol "${hy[@]}" "${three[@]}" \
    --dp 2 --tp 2 --micro-batches $m
  same "hybrid dp 2 x pp 2 (1f1b), $m micro-batch(es)" 4 "$work/ref_four_128.bin" $tol "${hy[@]}" \
    "${four[@]}" --dp 2 --pp 2 --micro-batches $m
done
same "hybrid tp 2 x pp 2 (gpipe), 4 micro-batches" 4 "$work/ref_four_64.bin" $tol "${hy[@]}" "${four[@]}" \
  --tp 2 --pp 2 --schedule gpipe --micro-batches 4
same "hybrid dp 2 x tp 2 x pp 2, 8 ranks, 2 micro-batches" 8 "$work/ref_four_128.bin" $tol "${hy[@]}" \
  "${four[@]}" --dp 2 --tp 2 --pp 2 --micro-batches 2 --check-replicas

# ---- pipedream against its one-process simulation (bit for bit) ----------------------------------
pd=("${steps[@]}" "${four[@]}" --mode pipeline --schedule pipedream)
for setting in "2 1" "2 4" "3 4" "4 1" "4 4" "4 4 --no-weight-stash"; do
  read -r stages m extra <<<"$setting"
  # shellcheck disable=SC2086
  if alone "${pd[@]}" --stages "$stages" --micro-batches "$m" $extra --simulate --save-params "$work/sim.bin"; then
    # shellcheck disable=SC2086
    same "pipedream, $stages stages, $m micro-batch(es) ${extra:-(weight stashing)} == simulation" \
      "$stages" "$work/sim.bin" 0 "${pd[@]}" --micro-batches "$m" $extra
  else
    bad "pipedream simulation $setting: run failed"
  fi
  [[ $setting == "4 4" ]] && cp "$work/sim.bin" "$work/stash.bin"
done
if ! compare "$work/sim.bin" "$work/stash.bin" 0 >/dev/null; then
  ok "pipedream, 4 stages: without weight stashing the parameters differ"
else
  bad "pipedream: weight stashing changed nothing"
fi

# ---- Every mode learns (synthetic: chance is 0.1) --------------------------------------------------
for setting in "4 --mode tensor" "2 --mode pipeline --schedule gpipe --micro-batches 4" \
  "3 --mode pipeline --schedule 1f1b --micro-batches 4" "2 --mode pipeline --schedule pipedream --micro-batches 2" \
  "4 --dp 2 --tp 2" "4 --dp 2 --pp 2 --micro-batches 2"; do
  read -r ranks args <<<"$setting"
  # shellcheck disable=SC2086
  if run "$ranks" --synthetic 3000 --epochs 3 --json "$work/m.json" $args; then
    acc=$(last_json "$work/m.json" test_acc)
    if python3 -c "import sys; sys.exit(0 if float('$acc') >= 0.85 else 1)"; then
      ok "$args ($ranks ranks) learns: test_acc $acc"
    else
      bad "$args ($ranks ranks): test_acc $acc < 0.85"
    fi
  else
    bad "$args ($ranks ranks): run failed"
  fi
done
# Parameters and optimizer state per rank: a tensor group of 2 holds half the model each (the
# row-parallel layer's 256 biases are whole on both, as in Megatron).
if run 2 --synthetic 500 --epochs 1 --max-steps 1 --mode tensor &&
  python3 - "$work/log" <<'PY'; then ok "tensor, 2 ranks: each holds half the parameters"; else bad "tensor memory"; fi
import re, sys
ranks = [float(m) for m in re.findall(r"rank \d+: .*?: (\d+) parameters", open(sys.argv[1]).read())]
assert len(ranks) == 2, ranks
assert all(abs(p - (535818 - 256) / 2 - 256) < 1 for p in ranks), ranks
PY

# ---- Bad input: exit 2 on every rank, before training, never a hang ---------------------------------
expect_usage "layout that does not fit the ranks" "the layout dp 1 x tp 3 x pp 1 needs 3 ranks; this job has 4" 4 \
  --mode tensor --tp 3
expect_usage "data-parallel size that does not divide" "do not divide into 3-rank parts" 4 --tp 3 --pp 1
expect_usage "more stages than layers" "4 pipeline stages but the model has 3 layers" 4 --mode pipeline
expect_usage "hidden size not divisible by the tensor group" "--hidden: 100 is not divisible by the tensor group size 3" 3 \
  --mode tensor --hidden 100,50
expect_usage "more micro-batches than samples in the batch" "--micro-batches 65 is larger than --batch 64" 2 \
  --mode pipeline --micro-batches 65
expect_usage "--split of the wrong length" "--split gives 2 stage(s) holding 2 layer(s)" 2 \
  --mode pipeline --split 1,1
expect_usage "--schedule with one stage (--mode tensor)" \
  "--schedule pipedream orders the stages of a pipeline, but the layout dp 1 x tp 2 x pp 1 has one stage" 2 \
  --mode tensor --schedule pipedream --micro-batches 4
expect_usage "--schedule with one stage (--dp 1)" "--schedule gpipe orders the stages .* pp 1 has one stage" 1 \
  --dp 1 --schedule gpipe
expect_usage "global batch above the training set" \
  "too few samples: one step takes 64 (1 replica(s) x --batch 64) but the training set has 50" 2 \
  --mode pipeline --hidden 40 --train-subset 50

# ---- The trace and the bubble ----------------------------------------------------------------------
if run 2 --synthetic 2000 --epochs 1 --max-steps 3 --mode pipeline --schedule 1f1b --micro-batches 4 \
  --trace "$work/t.json" --json "$work/b.json" &&
  python3 - "$work/t.json" "$work/b.json" <<'PY'; then ok "trace: forward, backward, send/recv per micro-batch and stage; bubble reported"; else bad "pipeline trace"; fi
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
mine = [e for e in events if e.get("cat") == "trainer"]
for stage in (0, 1):
    ev = [e for e in mine if e["pid"] == stage and e.get("args", {}).get("stage") == stage]
    for name in ("forward", "backward"):
        mbs = sorted(e["args"]["mb"] for e in ev if e["name"] == name)
        assert mbs == sorted(list(range(4)) * 3), (stage, name, mbs)
    sent = [e["args"]["send_mb"] for e in ev if e["name"] in ("send", "send+recv") and "send_mb" in e["args"]]
    got = [e["args"]["recv_mb"] for e in ev if e["name"] in ("recv", "send+recv") and "recv_mb" in e["args"]]
    assert len(sent) >= 12 and len(got) >= 12, (stage, len(sent), len(got))
baton = [e for e in events if e.get("cat") == "baton" and e["name"] in ("send", "recv")]
assert baton, "no send/recv of Baton's own in the trace"
rec = json.loads(open(sys.argv[2]).read().splitlines()[-1])
assert abs(rec["bubble_predicted"] - 1 / 5) < 1e-9, rec
assert 0 <= rec["bubble"] < 1, rec
assert rec["sent_bytes_per_rank_step"] > 0, rec
PY

trainer_summary
