#!/usr/bin/env bash
# baton-train --model cnn (docs/trainer.md): the CNN with and without --batch-norm and --sync-bn
# in the data-parallel modes (the replicas agree, it learns), 2 and 3 ranks (plain and --sync-bn)
# equal to one process with the global batch, a resumed run equal to the uninterrupted one
# (running statistics in the checkpoint), eval --checkpoint of a CNN, and usage errors (exit 2 on every rank). The math itself (gradients,
# SyncBN against BN over the global batch) is trainer_cnn_test (examples/trainer/cnn_test.cc).
# Usage: tests/scripts/trainer_cnn_test.sh BATONRUN BATON_TRAIN
set -u
source "$(dirname "$0")/trainer_lib.sh" "$1" "$2"

final_hash() { sed -n 's/^final parameter hash: //p' "$work/log"; }
last_epoch() { grep '^epoch' "$work/log" | tail -1; }
test_acc() { last_epoch | sed -n 's/.*test_acc \([0-9.]*\).*/\1/p'; }
test_loss() { last_epoch | sed -n 's/.*test_loss \([0-9.]*\).*/\1/p'; }
learned() { python3 -c "import sys; sys.exit(0 if float('${1:-0}') >= $2 else 1)"; }

cnn=(--synthetic 1000 --model cnn --batch 16 --lr 0.02 --warmup 5 --print-hash)

# ---- Data-parallel modes: each learns, replicas agree ----------------------------------------
# Without batch norm the CNN needs a smaller rate on this set (no scaling by the ranks) and more
# steps; with it, 2 epochs at the scaled rate.
for variant in "--epochs 4 --lr-scaling none" "--epochs 2 --batch-norm" "--epochs 2 --batch-norm --sync-bn"; do
  for ranks in 2 3; do
    # shellcheck disable=SC2086
    if run $ranks "${cnn[@]}" --check-replicas $variant && [[ -n $(final_hash) ]] &&
      learned "$(test_acc)" 0.5; then
      ok "sync, $ranks ranks $variant: replicas agree, test_acc $(test_acc)"
    else
      bad "sync, $ranks ranks $variant"
    fi
  done
done
for mode in "--mode local --average-every 4" "--mode ps" "--mode ps --async"; do
  # shellcheck disable=SC2086
  if run 3 "${cnn[@]}" --epochs 2 --batch-norm $mode && learned "$(test_acc)" 0.5; then
    ok "$mode with --batch-norm: test_acc $(test_acc)"
  else
    bad "$mode with --batch-norm"
  fi
done

# ---- W ranks x b rows == one process x W*b rows ----------------------------------------------
# With W*b training samples each rank's shard is one batch, so every epoch is one step over the
# same samples as the one process's single batch (--base-batch keeps the rate equal). SyncBN then
# normalises by exactly the one process's statistics; only summation orders differ.
epoch_losses() { grep '^epoch' "$work/log" | sed 's/.*loss \([0-9.]*\) .*test_loss \([0-9.]*\).*/\1 \2/'; }
equal=(--synthetic 48 --model cnn --base-batch 48 --warmup 2 --epochs 4)
max_diff() {
  python3 -c "
import array, sys
def load(n):
    a = array.array('f'); a.frombytes(open(n, 'rb').read()); return a
a, b = load(sys.argv[1]), load(sys.argv[2])
print(max(abs(x - y) for x, y in zip(a, b)) if len(a) == len(b) and a else 'size')" "$1" "$2"
}
within() { python3 -c "import sys; sys.exit(0 if '$1' != 'size' and float('$1') <= $2 else 1)"; }
for bn in "" "--batch-norm"; do
  run 1 "${equal[@]}" $bn --batch 48 --save-params "$work/one.bin" || bad "one process $bn: failed"
  one=$(epoch_losses)
  sync=${bn:+--sync-bn}
  for ranks in 2 3; do
    # shellcheck disable=SC2086
    run $ranks "${equal[@]}" $bn $sync --batch $((48 / ranks)) --save-params "$work/dp.bin"
    d=$(max_diff "$work/one.bin" "$work/dp.bin")
    if [[ $(epoch_losses) == "$one" ]] && within "$d" 1e-5; then
      ok "${sync:-no BN}: $ranks ranks x $((48 / ranks)) rows == one process x 48 (train and test loss of 4 epochs, parameters within $d)"
    else
      bad "${sync:-no BN}: $ranks ranks vs one process: parameters differ by $d; $(epoch_losses | tr '\n' ' ') vs ${one//$'\n'/ }"
    fi
  done
done
# Per-rank batch norm normalises by 24 rows, not 48: it must differ (so the check above bites).
run 2 "${equal[@]}" --batch-norm --batch 24 --save-params "$work/dp.bin"
d=$(max_diff "$work/one.bin" "$work/dp.bin")
if ! within "$d" 1e-4; then ok "per-rank BN differs from the global batch's ($d)"; else bad "per-rank BN == SyncBN?"; fi

# ---- A resumed run is the uninterrupted one (parameters, optimizer and running statistics) ----
run 2 "${cnn[@]}" --epochs 2 --batch-norm --sync-bn --ema 0.9
a=$(final_hash) a_loss=$(test_loss)
run 2 "${cnn[@]}" --epochs 2 --batch-norm --sync-bn --ema 0.9 --checkpoint "$work/ck" --stop-after 1
run 2 "${cnn[@]}" --epochs 2 --batch-norm --sync-bn --ema 0.9 --resume "$work/ck" --checkpoint "$work/ck"
b=$(final_hash) b_loss=$(test_loss)
if [[ -n $a && $a == "$b" && $a_loss == "$b_loss" ]]; then
  ok "--resume with --batch-norm: same parameters ($a) and test loss ($a_loss)"
else
  bad "--resume with --batch-norm: $a / $a_loss then $b / $b_loss"
fi
# eval --checkpoint rebuilds the CNN with its running statistics: the training's test figures.
"$train" eval --checkpoint "$work/ck" --synthetic 1000 >"$work/eval.log" 2>&1
evaluated=$(sed -n 's/^test_acc \([0-9.]*\)  test_loss \([0-9.]*\).*/\1 \2/p' "$work/eval.log")
if [[ $evaluated == "$(test_acc) $b_loss" ]]; then
  ok "eval --checkpoint of a CNN: test_acc, test_loss $evaluated as trained"
else
  bad "eval --checkpoint of a CNN: '$evaluated' vs '$(test_acc) $b_loss': $(cat "$work/eval.log")"
fi

# ---- Usage errors: exit 2 on every rank ------------------------------------------------------
expect_usage "--sync-bn without --batch-norm" "--sync-bn needs --batch-norm" 2 --model cnn --sync-bn
expect_usage "--batch-norm with the MLP" "need --model cnn" 2 --batch-norm
expect_usage "--sync-bn with the MLP" "need --model cnn" 2 --sync-bn
expect_usage "--sync-bn with --mode local" "--sync-bn needs --mode sync" 2 --model cnn --batch-norm \
  --sync-bn --mode local
expect_usage "--sync-bn with --mode ps" "--sync-bn needs --mode sync" 3 --model cnn --batch-norm \
  --sync-bn --mode ps
for mode in tensor pipeline hybrid; do
  expect_usage "--model cnn --mode $mode" "--model cnn is not supported with --mode $mode" 2 \
    --model cnn --mode $mode
done
expect_usage "--model cnn --device cuda" "--model cnn is not supported with --device cuda" 2 \
  --model cnn --device cuda
expect_usage "--model cnn --hidden" "--hidden sets the MLP" 2 --model cnn --hidden 64
expect_usage "--model bad" "model" 2 --model resnet

trainer_summary
