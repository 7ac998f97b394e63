#!/usr/bin/env bash
# baton-train's knobs, each checked for its effect against a reference (docs/trainer.md): the
# effective configuration as the first JSON line, --version, test loss, --val-fraction,
# --log-every, --target-acc / --stop-at-target, eval --checkpoint and per-class accuracy,
# --keep-best, --lr-scaling / --base-batch / --warmup Xep, --optimizer (each learns, adam resumes
# bit for bit), --accumulate (== one step of N x the batch, sync, ps and local), and usage errors
# (exit 2 on every rank). Quick: small synthetic sets, a few steps.
# Usage: tests/scripts/trainer_knobs_test.sh BATONRUN BATON_TRAIN
set -u
source "$(dirname "$0")/trainer_lib.sh" "$1" "$2"

# py FILE... SCRIPT: a check in Python over the run's files (exit status = verdict, stdout = why).
check() {
  local name=$1
  shift
  local why
  if why=$(python3 - "$@" 2>&1); then ok "$name${why:+: $why}"; else bad "$name: $why"; fi
}

# ---- --version, the configuration line, test loss -------------------------------------------
if "$train" --version | grep -Eq "^baton-train [0-9]+\.[0-9]+\.[0-9]+ \(Baton library"; then
  ok "--version: $("$train" --version)"
else
  bad "--version"
fi
small=(--synthetic 1200 --hidden 32)
# 2 ranks x 32 x accumulate 2 = global 128 from base 32: sqrt gives 2x, linear 4x. A constant rate
# after a one-epoch warm-up: the first epoch ends below the peak, the second is at it.
for scaling in sqrt linear; do
  run 2 "${small[@]}" --epochs 2 --batch 32 --accumulate 2 --base-batch 32 --lr 0.05 \
    --lr-scaling $scaling --warmup 1ep --lr-schedule constant --json "$work/$scaling.json"
done
check "config line and --lr-scaling/--base-batch/--warmup Xep" "$work" <<'PY'
import json, math, sys
w = sys.argv[1]
for scaling, factor in (("sqrt", 2.0), ("linear", 4.0)):
    lines = [json.loads(l) for l in open(f"{w}/{scaling}.json")]
    c = lines[0]["config"]
    epochs = [r for r in lines if "epoch" in r]
    steps = 1200 // 2 // 64
    assert c["global_batch"] == 128 and c["base_batch"] == 32 and c["ranks"] == 2, c
    assert abs(c["lr_peak"] - 0.05 * factor) < 1e-9, (scaling, c["lr_peak"])
    assert c["warmup_steps"] == steps and c["total_steps"] == 2 * steps, c
    # The last step of the warm-up epoch: base + (peak - base) (steps - 1) / steps.
    want1 = 0.05 + (0.05 * factor - 0.05) * (steps - 1) / steps
    assert abs(epochs[0]["lr"] - want1) < 1e-6 and abs(epochs[1]["lr"] - 0.05 * factor) < 1e-6, (scaling, epochs[0]["lr"], want1, epochs[1]["lr"])
    assert epochs[1]["test_loss"] > 0 and "test_loss" in epochs[0]
    for key in ("optimizer", "momentum", "weight_decay", "seed", "mode", "lr_schedule", "epochs"):
        assert key in c, key
print("lr peaks 0.1 / 0.2, warm-up of one epoch in steps, test_loss reported")
PY

# ---- --val-fraction ---------------------------------------------------------------------------
# (--log-every in the same run: 900 / 2 / 64 = 7 steps an epoch, 14 in all: steps 4, 8, 12.)
run 2 "${small[@]}" --epochs 2 --val-fraction 0.25 --json "$work/val.json" --log-every 4
check "--val-fraction holds out a validation set" "$work" <<'PY'
import json, sys
w = sys.argv[1]
lines = [json.loads(l) for l in open(f"{w}/val.json")]
c, r = lines[0]["config"], lines[1]
assert c["train_samples"] == 900 and c["val_samples"] == 300 and c["test_samples"] == 240, c
assert "val_acc" in r and "val_loss" in r and r["val_loss"] != r["test_loss"], r
assert r["step"] == 7, r
print(f"900 train / 300 val / 240 test, val_loss {r['val_loss']:.4f} vs test_loss {r['test_loss']:.4f}")
PY
lines=$(grep -c "^step [0-9]* (epoch" "$work/log")
if [[ $lines -eq 3 ]] && grep -q "^step 12 (epoch 2, 5/7)" "$work/log"; then ok "--log-every 4: 3 lines in 14 steps"; else bad "--log-every: $lines lines"; fi
run 3 "${small[@]}" --epochs 1 --log-every 3 --mode ps --async
if [[ $(grep -c "^step [0-9]* (epoch.*(rank 1," "$work/log") -eq 3 ]]; then ok "--log-every with --mode ps: the first worker logs"; else bad "--log-every ps"; fi

# ---- a diverged run's JSON: nan becomes null, the line still parses ------------------------------
run 1 --synthetic 1000 --epochs 1 --lr 100 --lr-schedule constant --warmup 0 --optimizer nesterov \
  --momentum 0.99 --hidden 64 --weight-decay 0.5 --json "$work/nan.json"
check "a diverged run's record is JSON (nan as null)" "$work" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(f"{sys.argv[1]}/nan.json")]
r = recs[-1]
assert r["loss"] is None and r["loss_step_std"] is None and 0 <= r["test_acc"] <= 1, r
print(f"loss {r['loss']}, test_loss {r['test_loss']}, test_acc {r['test_acc']}")
PY

# ---- --train-subset, loss_step_std ------------------------------------------------------------
# 1200 - 300 held out = 900, of which the first 600 train: 9 steps of 64 an epoch. One rank, so
# the --log-every 1 lines are every per-step loss, and loss_step_std is their sample deviation.
run 1 "${small[@]}" --epochs 2 --val-fraction 0.25 --train-subset 600 --log-every 1 --json "$work/sub.json"
cp "$work/log" "$work/sub.log"
check "--train-subset and loss_step_std" "$work" <<'PY'
import json, re, statistics, sys
w = sys.argv[1]
lines = [json.loads(l) for l in open(f"{w}/sub.json")]
c, recs = lines[0]["config"], [r for r in lines[1:] if "epoch" in r]
assert c["train_samples"] == 600 and c["val_samples"] == 300 and c["train_subset"] == 600, c
assert [r["step"] for r in recs] == [9, 18], [r["step"] for r in recs]
losses = [float(m.group(1)) for m in re.finditer(r"^step \d+ \(epoch \d+, \d+/9\)  loss ([0-9.]+)", open(f"{w}/sub.log").read(), re.M)]
assert len(losses) == 18, losses
for e, r in enumerate(recs):
    want = statistics.stdev(losses[9 * e:9 * e + 9])
    assert abs(r["loss_step_std"] - want) < 2e-4 and want > 0, (e, r["loss_step_std"], want)
print(f"600 of 900 train, 9 steps an epoch, loss_step_std {recs[0]['loss_step_std']:.4f} / {recs[1]['loss_step_std']:.4f} = the logged losses' deviation")
PY

# ---- --target-acc, --stop-at-target -----------------------------------------------------------
run 2 "${small[@]}" --epochs 6 --target-acc 0.5 --stop-at-target --json "$work/t.json"
check "--stop-at-target stops after the epoch that reached it" "$work" <<'PY'
import json, sys
recs = [r for r in map(json.loads, open(f"{sys.argv[1]}/t.json")) if "epoch" in r]
assert len(recs) == 1 and recs[0]["test_acc"] >= 0.5, recs
assert recs[0]["target_reached_step"] == recs[0]["step"] and recs[0]["target_reached_seconds"] > 0
print(f"1 of 6 epochs, step {recs[0]['step']}, {recs[0]['target_reached_seconds']} s")
PY
if grep -q "^target: test_acc .* >= 0.5000 after epoch 1, step 9" "$work/log"; then ok "--target-acc line"; else bad "--target-acc line"; fi
run 2 "${small[@]}" --epochs 1 --max-steps 1 --target-acc 1 --lr 0.0001
if grep -q "^target: test_acc 1.0000 not reached in 1 epoch" "$work/log"; then ok "--target-acc not reached is said"; else bad "--target-acc not reached"; fi

# ---- Per-class accuracy, eval --checkpoint, --keep-best ---------------------------------------
# Barely trained, so that the classes differ; 3 ranks evaluate 1/3 of the test set each.
run 3 --synthetic 1500 --hidden 8 --epochs 1 --max-steps 2 --lr 0.002 --checkpoint "$work/ck" --json "$work/pc.json"
trained=$(sed -n 's/^per-class test accuracy: //p' "$work/log")
"$train" eval --checkpoint "$work/ck" --synthetic 1500 >"$work/eval.log" 2>&1
evaluated=$(sed -n 's/^per-class test accuracy: //p' "$work/eval.log")
check "per-class accuracy (3 ranks) == eval --checkpoint (one process)" "$work" "$trained" "$evaluated" <<'PY'
import json, sys
w, trained, evaluated = sys.argv[1:4]
rec = [r for r in map(json.loads, open(f"{w}/pc.json")) if "epoch" in r][-1]
assert trained and trained == evaluated, (trained, evaluated)
acc = [float(x.split(":")[1]) for x in trained.split()]
assert len(acc) == 10 and len(set(acc)) > 2, acc
assert [round(a, 4) for a in rec["per_class_test_acc"]] == acc, rec["per_class_test_acc"]
log = open(f"{w}/eval.log").read()
assert f"test_acc {rec['test_acc']:.4f}  test_loss {rec['test_loss']:.4f}" in log, log
print(trained)
PY
if "$train" eval --checkpoint "$work/nowhere" --synthetic 500 >/dev/null 2>&1; then bad "eval of a missing file"; else ok "eval of a missing file fails"; fi
if "$train" eval --checkpoint "$work/ck" --synthetic 1500 --epochs 3 >"$work/log" 2>&1; then bad "eval with a training option"; elif [[ $? -eq 2 ]] && grep -q "eval takes --checkpoint" "$work/log"; then ok "eval with a training option: exit 2"; else bad "eval with a training option: $(cat "$work/log")"; fi
# A rate that makes accuracy jump about: the best epoch is kept whichever it is.
run 2 --synthetic 1500 --hidden 16 --epochs 4 --max-steps 3 --lr 0.6 --warmup 0 --keep-best --checkpoint "$work/kb" --json "$work/kb.json"
"$train" eval --checkpoint "$work/kb.best" --synthetic 1500 >"$work/eval.log" 2>&1
check "--keep-best keeps the best epoch" "$work" <<'PY'
import json, re, sys
w = sys.argv[1]
recs = [r for r in map(json.loads, open(f"{w}/kb.json")) if "epoch" in r]
best = max(recs, key=lambda r: r["test_acc"])
log = open(f"{w}/eval.log").read()
m = re.search(r"trained (\d+) epoch", log)
assert m and int(m.group(1)) == best["epoch"], (log, [r["test_acc"] for r in recs])
assert f"test_acc {best['test_acc']:.4f}" in log, log
print(f"epoch {best['epoch']} of {len(recs)} (test_acc {[round(r['test_acc'], 4) for r in recs]})")
PY

# ---- --optimizer ------------------------------------------------------------------------------
declare -A lr=([sgd]=0.05 [nesterov]=0.02 [adam]=0.001 [lars]=2 [lamb]=0.01)
declare -A seen=()
for o in sgd nesterov adam lars lamb; do
  run 2 --synthetic 1500 --hidden 32 --epochs 3 --optimizer "$o" --lr "${lr[$o]}" --warmup 0 --print-hash --json "$work/o.json"
  h=$(sed -n 's/^final parameter hash: //p' "$work/log")
  acc=$(python3 -c "import json,sys; print([r for r in map(json.loads, open(sys.argv[1])) if 'epoch' in r][-1]['test_acc'])" "$work/o.json" 2>/dev/null)
  if [[ -n $h && -z ${seen[$h]:-} ]] && python3 -c "import sys; sys.exit(0 if float('${acc:-0}') >= 0.9 else 1)"; then
    ok "--optimizer $o learns (test_acc $acc), its own parameters"
  else
    bad "--optimizer $o: test_acc ${acc:-?}, hash ${h:-?}"
  fi
  seen[$h]=1
done
for o in adam; do
  run 2 "${small[@]}" --epochs 3 --optimizer $o --lr 0.001 --mode ps --print-hash
  a=$(sed -n 's/^final parameter hash: //p' "$work/log")
  run 2 "${small[@]}" --epochs 3 --optimizer $o --lr 0.001 --mode ps --stop-after 2 --checkpoint "$work/ock"
  run 2 "${small[@]}" --epochs 3 --optimizer $o --lr 0.001 --mode ps --print-hash --resume "$work/ock"
  b=$(sed -n 's/^final parameter hash: //p' "$work/log")
  if [[ -n $a && $a == "$b" ]]; then ok "--optimizer $o --mode ps: checkpoint + resume == uninterrupted ($a)"; else bad "$o resume: $a != $b"; fi
done
if run 2 "${small[@]}" --epochs 3 --lr 0.001 --mode ps --resume "$work/ock" --optimizer lamb; then
  bad "resume with another optimizer"
elif grep -q "written by --mode ps/adam (this run: ps/lamb)" "$work/log"; then ok "resume with another optimizer is refused"; else bad "resume with another optimizer: message"; fi

# ---- --accumulate: N micro-batches == one batch N times as large ----------------------------
# --base-batch 64 keeps the rate of the global batch, so only the summation order differs.
run 1 "${small[@]}" --epochs 2 --base-batch 64 --batch 64 --save-params "$work/ref1.bin"
run 1 "${small[@]}" --epochs 2 --base-batch 64 --batch 16 --accumulate 4 --save-params "$work/acc1.bin"
run 2 "${small[@]}" --epochs 2 --base-batch 64 --batch 32 --save-params "$work/ref2.bin"
run 2 "${small[@]}" --epochs 2 --base-batch 64 --batch 8 --accumulate 4 --save-params "$work/acc2.bin"
run 1 "${small[@]}" --epochs 2 --base-batch 64 --batch 16 --save-params "$work/noacc1.bin"
check "--accumulate 4 == one step of 4 x the batch (1 and 2 ranks)" "$work" <<'PY'
import array, sys
w = sys.argv[1]
def load(name):
    a = array.array("f")
    a.frombytes(open(f"{w}/{name}.bin", "rb").read())
    return a
def diff(x, y):
    return max(abs(p - q) for p, q in zip(x, y))
ref1, acc1, ref2, acc2, noacc = (load(n) for n in ("ref1", "acc1", "ref2", "acc2", "noacc1"))
d1, d2, d0 = diff(ref1, acc1), diff(ref2, acc2), diff(ref1, noacc)
assert len(ref1) == len(acc1) and d1 < 1e-5 and d2 < 1e-5, (d1, d2)
assert d0 > 1e-2, f"without accumulation the small batch should differ ({d0})"
print(f"max |difference| {d1:.1e} (1 rank), {d2:.1e} (2 ranks); without accumulation {d0:.2f}")
PY
# (--async with one worker, whose pushes are then in a fixed order.)
for setting in "2 --mode ps --async" "3 --mode local --average-every 2"; do
  read -r ranks mode <<<"$setting"
  # shellcheck disable=SC2086
  {
    run "$ranks" "${small[@]}" --epochs 1 --base-batch 64 --batch 32 --json "$work/a.json" $mode
    run "$ranks" "${small[@]}" --epochs 1 --base-batch 64 --batch 8 --accumulate 4 --json "$work/b.json" $mode
  }
  check "--accumulate 4 $mode ($ranks ranks) == 4 x the batch" "$work" <<'PY'
import json, sys
w = sys.argv[1]
a, b = ([r for r in map(json.loads, open(f"{w}/{n}.json")) if "epoch" in r][-1] for n in "ab")
assert abs(a["test_loss"] - b["test_loss"]) <= 1e-4 * max(1, a["test_loss"]) and a["step"] == b["step"], (a, b)
print(f"test_loss {a['test_loss']:.6f} vs {b['test_loss']:.6f}, {a['step']} steps")
PY
done

# ---- --straggle, --straggle-random, --staleness, --backup-workers ------------------------------
# The stragglers' steps are counted (no timing): a fixed one straggles every step of its rank, a
# random one the same steps on every run with the same seed.
run 2 "${small[@]}" --epochs 1 --straggle 1:3 --json "$work/s.json"
run 2 "${small[@]}" --epochs 1 --straggle-random 0.5:3 --json "$work/r1.json"
run 2 "${small[@]}" --epochs 1 --straggle-random 0.5:3 --json "$work/r2.json"
check "--straggle and --straggle-random straggle the chosen steps" "$work" <<'PY'
import json, sys
w = sys.argv[1]
last = lambda n: [r for r in map(json.loads, open(f"{w}/{n}.json")) if "epoch" in r][-1]
s, r1, r2 = (last(n) for n in ("s", "r1", "r2"))
assert s["straggled_steps"] == s["step"] == 9 and s["straggle_sleep_s"] > 0, s
assert s["step_p99_s"] >= s["step_p50_s"] > 0, s
assert r1["straggled_steps"] == r2["straggled_steps"] and 0 < r1["straggled_steps"] < 18, (r1, r2)
print(f"rank 1: {s['straggled_steps']} of 9 steps; random 0.5: {r1['straggled_steps']} of 18 twice")
PY
# 3 workers, the last 4x slower: SSP keeps the clock gap within S, and a gradient at most
# (S + 1) W - 1 updates stale (S = 0 is lockstep: W - 1 = 2).
for s in 0 2; do
  run 4 "${small[@]}" --epochs 1 --mode ps --async --staleness $s --straggle 3:4 --json "$work/ssp$s.json"
done
check "--staleness S bounds the clock gap" "$work" <<'PY'
import json, sys
w = sys.argv[1]
out = []
for s in (0, 2):
    recs = [r for r in map(json.loads, open(f"{w}/ssp{s}.json")) if "epoch" in r]
    c = json.loads(open(f"{w}/ssp{s}.json").readline())["config"]
    r = recs[-1]
    assert c["staleness"] == s and r["clock_gap_max"] <= s, (s, r)
    # A pull sees every update of the clocks S behind; at most the other workers' of S + 1 clocks.
    assert r["staleness_max"] <= (s + 1) * 3 - 1, r
    out.append(f"S={s}: gap max {r['clock_gap_max']}, staleness mean {r['staleness_mean']} max {r['staleness_max']}")
print("; ".join(out))
PY
for b in 1; do
  run 4 "${small[@]}" --epochs 2 --mode ps --backup-workers $b --straggle 3:4 --json "$work/bw$b.json"
done
check "--backup-workers B: every step applies exactly W - B gradients" "$work" <<'PY'
import json, sys
w = sys.argv[1]
out = []
for b in (1,):
    recs = [r for r in map(json.loads, open(f"{w}/bw{b}.json")) if "epoch" in r]
    steps = 1200 // 3 // 64
    for r in recs:
        assert r["gradients_applied"] == (3 - b) * steps, (b, r)
        assert r["gradients_dropped"] <= b * steps, (b, r)
    assert recs[-1]["step"] == 2 * steps and recs[-1]["test_acc"] >= 0.8, recs[-1]
    out.append(f"B={b}: {recs[-1]['gradients_applied']} applied, {recs[-1]['gradients_dropped']} dropped, test_acc {recs[-1]['test_acc']}")
print("; ".join(out))
PY

# ---- --mode local: --post-local, --adaptive-k; --algo -----------------------------------------
# The synchronous epoch of --post-local is --mode sync with one allreduce per step, bit for bit.
run 3 "${small[@]}" --epochs 2 --stop-after 1 --print-hash --mode local --post-local 1 --check-replicas
a=$(sed -n 's/^final parameter hash: //p' "$work/log")
run 3 "${small[@]}" --epochs 2 --stop-after 1 --print-hash --mode sync --no-overlap --no-lr-scaling
b=$(sed -n 's/^final parameter hash: //p' "$work/log")
if [[ -n $a && $a == "$b" ]]; then ok "--post-local: its synchronous epoch == --mode sync ($a)"; else bad "--post-local: $a != sync $b"; fi
# A slow rate flattens the loss: K doubles after each epoch that gained under 10%.
run 2 --synthetic 1200 --hidden 8 --epochs 4 --lr 0.0005 --mode local --average-every 2 --adaptive-k --json "$work/ak.json"
check "--adaptive-k doubles K as the loss flattens; averages counted" "$work" <<'PY'
import json, sys
recs = [r for r in map(json.loads, open(f"{sys.argv[1]}/ak.json")) if "epoch" in r]
ks = [r["average_every"] for r in recs]
assert ks[0] == 2 and ks[1] == 2, ks
for e in range(2, len(recs)):
    before, now = recs[e - 2]["loss"], recs[e - 1]["loss"]
    want = min(2 * ks[e - 1], 128) if before - now < 0.1 * before else ks[e - 1]
    assert ks[e] == want, (e, ks, before, now)
assert ks[-1] > ks[0], f"K never grew: {ks}"
steps = 1200 // 2 // 64
step0 = 0
for r, k in zip(recs, ks):
    want = len([s for s in range(step0 + 1, step0 + steps + 1) if s % k == 0 or s == step0 + steps])
    assert r["averages"] == want, (r["averages"], want, k)
    step0 += steps
print(f"K per epoch {ks}, averages {[r['averages'] for r in recs]}")
PY
# --algo reaches the allreduce: with rhd every bucketing sums each element in the same tree (the
# same bits as one allreduce); a ring's order depends on the chunking, so bucketing changes bits.
declare -A algo_hash=()
for a in rhd ring; do
  for b in "--first-bucket-mb 0 --bucket-cap-mb 0" "--no-overlap"; do
    # shellcheck disable=SC2086
    run 4 --synthetic 1500 --hidden 64 --epochs 1 --max-steps 3 --print-hash --algo $a $b
    algo_hash[$a]+="$(sed -n 's/^final parameter hash: //p' "$work/log") "
  done
done
read -r r1 r2 <<<"${algo_hash[rhd]}"
read -r g1 g2 <<<"${algo_hash[ring]}"
if [[ -n $r1 && $r1 == "$r2" && -n $g1 && $g1 != "$g2" ]]; then
  ok "--algo: rhd bucketed == unbucketed ($r1), ring differs ($g1 vs $g2)"
else
  bad "--algo: rhd $r1 $r2, ring $g1 $g2"
fi

# ---- Usage errors: exit 2 on every rank --------------------------------------------------------
expect_usage "--stop-at-target without --target-acc" "--stop-at-target needs --target-acc" 2 --stop-at-target
expect_usage "--keep-best without --checkpoint" "--keep-best needs --checkpoint" 1 --keep-best
expect_usage "bad --warmup" "--warmup: '2x' is neither" 1 --warmup 2x
expect_usage "--val-fraction too large" "--val-fraction: '0.95' is not a number" 1 --val-fraction 0.95
expect_usage "--train-subset above the training set" "--train-subset 501 is more than the 400 training samples" 2 --train-subset 501 --val-fraction 0.2
expect_usage "--val-fraction that holds out nothing" "leaves no validation sample" 2 --val-fraction 0.0001
expect_usage "global batch above the training set" \
  "too few samples: one step takes 600 (2 rank(s) x --batch 300) but the training set has 500" 2 --batch 300
expect_usage "--train-subset below the workers" \
  "too few samples: one step takes 2 (2 worker(s) x --batch 1) but the training set has 1 (after --train-subset)" 3 \
  --mode ps --batch 1 --train-subset 1
expect_usage "--accumulate 0" "--accumulate: '0' is not an integer" 1 --accumulate 0
expect_usage "--accumulate with --mode tensor" "--accumulate (use --micro-batches) is not supported" 1 --accumulate 2 --mode tensor
expect_usage "--optimizer adam on --device cuda" "--optimizer adam runs on the CPU backend only" 1 --optimizer adam --device cuda
expect_usage "--optimizer lars with --ps-shards 2" "--optimizer lars needs each layer's whole norm" 3 --optimizer lars --mode ps --ps-shards 2
expect_usage "--beta2 with sgd" "--beta2 and --eps apply to --optimizer adam and lamb" 1 --beta2 0.99
expect_usage "unknown optimizer" "--optimizer: 'rmsprop' is not one of" 1 --optimizer rmsprop
expect_usage "--straggle of a rank that does not exist" "--straggle: rank 2 does not exist (2 ranks)" 2 --straggle 2:3
expect_usage "--straggle bad factor" "--straggle: '1:0.5'" 1 --straggle 1:0.5
expect_usage "--staleness without --async" "--staleness needs --mode ps --async" 1 --staleness 1 --mode ps
expect_usage "--backup-workers >= workers" "--backup-workers 2 leaves no gradient to apply" 3 --backup-workers 2 --mode ps
expect_usage "--backup-workers with --async" "--backup-workers needs synchronous --mode ps" 3 --backup-workers 1 --mode ps --async
expect_usage "--post-local without --mode local" "--post-local and --adaptive-k need --mode local" 1 --post-local 1
expect_usage "--post-local over every epoch" "--post-local 5 leaves no local SGD in 5 epoch" 1 --mode local --post-local 5
expect_usage "--algo bogus" "--algo: 'butterfly' is not one of ring, rhd, tree, hier, auto" 1 --algo butterfly
expect_usage "--lr-scaling bogus" "--lr-scaling: 'cubic' is not one of linear, sqrt, none" 1 --lr-scaling cubic
if "$train" eval >"$work/log" 2>&1; then bad "eval without --checkpoint"; elif [[ $? -eq 2 ]] && grep -q "eval needs --checkpoint" "$work/log"; then ok "eval without --checkpoint: exit 2"; else bad "eval without --checkpoint: $(cat "$work/log")"; fi

trainer_summary
