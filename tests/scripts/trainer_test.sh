#!/usr/bin/env bash
# baton-train end to end: data reader errors, bad options, --device cuda (a clean failure without
# CUDA or a GPU; with a GPU, 2 ranks training on it), replicas bit-identical after every step
# (4 ranks), bucketed overlapped allreduce == one allreduce per step (bitwise), same seed == same
# result, checkpoint + resume == uninterrupted run, every mode learns the synthetic set, and one
# epoch of real Fashion-MNIST (skipped without the dataset package).
# Usage: tests/scripts/trainer_test.sh BATONRUN BATON_TRAIN
set -u
source "$(dirname "$0")/trainer_lib.sh" "$1" "$2"

# run NAME RANKS ARGS...: runs the trainer, output in $work/log; returns its exit status.
run() {
  local ranks=$1
  shift
  timeout 120 "$batonrun" -n "$ranks" "$train" --no-progress "$@" >"$work/log" 2>&1
}
final_hash() { sed -n 's/^final parameter hash: //p' "$work/log"; }
last_json() { python3 -c "import json,sys; print(json.loads(open(sys.argv[1]).read().splitlines()[-1])[sys.argv[2]])" "$@"; }

# expect_fail NAME PATTERN SAYERS RANKS ARGS...: the run must fail and at least SAYERS ranks must
# say PATTERN (batonrun stops the others when the first rank exits, so errors found before any
# collective may reach the output from one rank only).
expect_fail() {
  local name=$1 pattern=$2 sayers=$3 ranks=$4
  shift 4
  if run "$ranks" "$@"; then
    bad "$name (exit 0)"
  elif [[ $(grep -c -- "$pattern" "$work/log") -lt $sayers ]]; then
    bad "$name (fewer than $sayers rank(s) said '$pattern')"
  else
    ok "$name"
  fi
}

# ---- Data reader errors ----------------------------------------------------------------------
mkdir -p "$work/bad_magic" "$work/truncated"
python3 - "$work" <<'PY'
import gzip, struct, sys
w = sys.argv[1]
def write(path, data):
    with gzip.open(path, "wb") as f: f.write(data)
for split, n in (("train", 100), ("t10k", 20)):
    images = struct.pack(">IIII", 0x803, n, 28, 28) + bytes(n * 784)
    labels = struct.pack(">II", 0x801, n) + bytes(n)
    # bad magic: images claim to be a label file
    write(f"{w}/bad_magic/{split}-images-idx3-ubyte.gz", struct.pack(">IIII", 0x801, n, 28, 28) + bytes(n * 784))
    write(f"{w}/bad_magic/{split}-labels-idx1-ubyte.gz", labels)
    # truncated: the header announces n images, half of them are there
    write(f"{w}/truncated/{split}-images-idx3-ubyte.gz", images[: 16 + n * 784 // 2])
    write(f"{w}/truncated/{split}-labels-idx1-ubyte.gz", labels)
PY
expect_fail "missing data directory" "cannot open $work/nowhere/train-images-idx3-ubyte.gz" 2 2 \
  --data "$work/nowhere"
expect_fail "bad magic number" "bad magic 0x00000801, expected 0x00000803" 2 2 --data "$work/bad_magic"
expect_fail "truncated image file" "truncated: the header announces 100 images" 2 2 \
  --data "$work/truncated"
expect_fail "unknown mode" "--mode: 'bogus' is not one of sync, ps, local" 1 2 --mode bogus
expect_fail "bad number" "--batch: '12x' is not an integer" 1 2 --batch 12x
expect_fail "unwritable --json" "cannot open $work/nowhere/x.json" 1 2 --synthetic 500 --json "$work/nowhere/x.json"
expect_fail "ps needs two ranks" "--mode ps needs at least 2 ranks" 1 1 --synthetic 500 --mode ps
# Output paths are tried before training, by the rank that writes each (rank 0 the checkpoint and
# the parameters, every rank its own trace file), and an existing file is left as it was.
echo "kept" >"$work/keep.bin"
expect_usage "unwritable --checkpoint, found before training" \
  "--checkpoint $work/nowhere/ck: cannot write $work/nowhere/ck.tmp: No such file" 2 \
  --checkpoint "$work/nowhere/ck" --save-params "$work/keep.bin"
if [[ $(cat "$work/keep.bin") == kept ]]; then ok "the up-front check leaves --save-params' file"; else bad "--save-params file changed"; fi
expect_usage "unwritable --save-params" "--save-params $work: cannot write $work: Is a directory" 2 \
  --save-params "$work"
mkdir "$work/tr.rank1.trainer.json"
expect_usage "rank 1's --trace file unwritable" \
  "--trace $work/tr.json: cannot write $work/tr.rank1.trainer.json: Is a directory" 2 --trace "$work/tr.json"
expect_fail "unknown device" "--device: 'gpu' is not one of cpu, cuda" 1 1 --device gpu

# ---- --device cuda -------------------------------------------------------------------------------
# Without CUDA in the build, or without a usable GPU, --device cuda must stop with one clear
# message and a non-zero status (never a crash). With a GPU it must train: 2 ranks on the
# visible GPU(s), replicas bit-identical, the same bits twice, accuracy like the CPU's. Whether
# there is a GPU is what a short one-process run says (containers often lack nvidia-smi); when
# nvidia-smi does list GPUs, that run must succeed.
if "$train" --help | grep -q "this build: with the CUDA backend"; then cuda_built=1; else cuda_built=0; fi
gpus=0
if command -v nvidia-smi >/dev/null 2>&1; then gpus=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU "); fi
timeout 120 "$train" --no-progress --synthetic 500 --epochs 1 --max-steps 2 --device cuda \
  >"$work/log" 2>"$work/err"
device_rc=$?
cat "$work/err" >>"$work/log"
# device_fails NAME PATTERN: that run must have exited 1 with exactly one line on stderr,
# matching PATTERN.
device_fails() {
  if [[ $device_rc -eq 1 && $(wc -l <"$work/err") -eq 1 ]] && grep -q -- "$2" "$work/err"; then
    ok "$1: $(cat "$work/err")"
  else
    bad "$1 (exit $device_rc, stderr: $(head -c 300 "$work/err"))"
  fi
}
if [[ $cuda_built -eq 0 ]]; then
  device_fails "--device cuda in a build without CUDA" \
    "baton-train: rank 0: error: --device cuda: this baton-train was built without CUDA support"
  echo "skip - GPU training checks: baton-train was built without CUDA"
elif [[ $device_rc -ne 0 && $gpus -gt 0 ]]; then
  bad "nvidia-smi lists $gpus GPU(s) but --device cuda failed (exit $device_rc)"
elif [[ $device_rc -ne 0 ]]; then
  device_fails "--device cuda without a GPU fails cleanly" \
    "baton-train: rank 0: error: --device cuda: no CUDA device: cudaGetDeviceCount: "
  expect_fail "--device cuda without a GPU, 2 ranks" "error: --device cuda: no CUDA device" 1 2 \
    --synthetic 500 --device cuda
  if grep -qi "segmentation\|core dumped\|terminate called\|Aborted" "$work/log"; then
    bad "--device cuda without a GPU crashed"
  fi
  echo "skip - GPU training checks: no usable GPU here"
else
  ok "--device cuda: one process without a launcher trains ($(grep -o 'cuda (.*)' "$work/log" | head -1))"
  gpu=(--synthetic 3000 --epochs 1 --print-hash --device cuda)
  if run 2 "${gpu[@]}" --check-replicas --json "$work/gpu.json"; then
    gpu_hash=$(final_hash)
    gpu_acc=$(last_json "$work/gpu.json" test_acc)
    run 2 --synthetic 3000 --epochs 1 --json "$work/cpu.json"
    cpu_acc=$(last_json "$work/cpu.json" test_acc)
    if python3 -c "import sys; a, c = float('$gpu_acc'), float('$cpu_acc'); sys.exit(0 if a >= 0.9 and abs(a - c) <= 0.05 else 1)"; then
      ok "--device cuda, 2 ranks: replicas identical after every step, test_acc $gpu_acc (cpu $cpu_acc)"
    else
      bad "--device cuda: test_acc $gpu_acc (cpu $cpu_acc)"
    fi
    run 2 "${gpu[@]}"
    if [[ -n $gpu_hash && $(final_hash) == "$gpu_hash" ]]; then ok "--device cuda: same bits twice ($gpu_hash)"; else bad "--device cuda: $gpu_hash then $(final_hash)"; fi
    # 2 ranks: every bucketing computes a + b per element, on the device as on the host.
    run 2 "${gpu[@]}" --first-bucket-mb 0 --bucket-cap-mb 0
    a=$(final_hash)
    run 2 "${gpu[@]}" --no-overlap
    b=$(final_hash)
    if [[ -n $a && $a == "$b" ]]; then ok "--device cuda: bucketed == one allreduce ($a)"; else bad "--device cuda: bucketed $a != unbucketed $b"; fi
  else
    bad "--device cuda, 2 ranks: run failed"
  fi
  for mode in "--fp16-allreduce" "--mode ps --ema 0.9" "--mode local --average-every 3 --ema 0.9"; do
    # shellcheck disable=SC2086
    if run 2 "${gpu[@]}" --check-replicas $mode; then ok "--device cuda $mode: replicas identical"; else bad "--device cuda $mode"; fi
  done
  if run 3 "${gpu[@]}" --mode ps --async; then ok "--device cuda --mode ps --async runs"; else bad "--device cuda --mode ps --async"; fi
  run 2 --synthetic 1200 --epochs 2 --warmup 5 --print-hash --device cuda --ema 0.9
  a=$(final_hash)
  run 2 --synthetic 1200 --epochs 2 --warmup 5 --stop-after 1 --device cuda --ema 0.9 --checkpoint "$work/gpu_ck"
  run 2 --synthetic 1200 --epochs 2 --warmup 5 --print-hash --device cuda --ema 0.9 --resume "$work/gpu_ck"
  b=$(final_hash)
  if [[ -n $a && $a == "$b" ]]; then ok "--device cuda: checkpoint + resume == uninterrupted ($a)"; else bad "--device cuda resume: $a != $b"; fi
fi

# ---- A peer dies mid-training: the survivors report it and exit (no hang) --------------------
# Launched torchrun-style (no batonrun, which would stop the job itself when a rank dies).
port=$((20000 + RANDOM % 12768))  # below the kernel's ephemeral ports (32768 up)
pids=()
for r in 0 1 2; do
  RANK=$r WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$train" --no-progress \
    --synthetic 4000 --epochs 1000 >"$work/peer$r" 2>&1 &
  pids+=($!)
done
# A hang is a failure: whatever is still running after 90 s is killed (exit 137).
(sleep 90; kill -9 "${pids[@]}" 2>/dev/null) &
guard=$!
for _ in $(seq 100); do grep -q "gradient buckets" "$work/peer0" && break; sleep 0.2; done
sleep 1
kill -9 "${pids[2]}"
survivors_ok=1
for r in 0 1; do
  wait "${pids[$r]}"
  rc=$?
  if [[ $rc -eq 0 || $rc -eq 137 ]] || ! grep -q "baton-train: rank $r: error: .*failed" "$work/peer$r"; then
    survivors_ok=0
    echo "rank $r: exit $rc"; tail -3 "$work/peer$r"
  fi
done
wait "${pids[2]}" 2>/dev/null
kill "$guard" 2>/dev/null
wait "$guard" 2>/dev/null
if [[ $survivors_ok -eq 1 ]]; then ok "peer killed: both survivors report the error and exit"; else bad "peer death"; fi

# ---- Replicas, overlap, determinism --------------------------------------------------------------
# A 784-256-128-10 model: what these checks compare does not depend on the size, and the default
# one costs a third more time on 2 cores.
syn=(--synthetic 1500 --epochs 2 --print-hash --hidden 256,128)
# Every layer in its own bucket, so three allreduces per step overlap backward.
if run 4 "${syn[@]}" --check-replicas --first-bucket-mb 0 --bucket-cap-mb 0 && grep -q "final parameter hash" "$work/log"; then
  ok "4 ranks: parameters bit-identical on every rank after every step"
else
  bad "4 ranks: replica check"
fi
for mode in "--mode ps" "--mode local --average-every 3" "--fp16-allreduce"; do
  # shellcheck disable=SC2086
  if run 4 "${syn[@]}" --check-replicas $mode; then ok "4 ranks $mode: replicas identical"; else bad "4 ranks $mode: replicas"; fi
done

# Bucketed + overlapped vs one allreduce after backward. With 2 ranks every algorithm computes
# a + b for each element, so any bucketing gives the same bits; with 4 ranks recursive halving
# (rhd) sums in the same tree for every element whatever the chunking (a ring does not: the
# order depends on which rank owns the element's chunk, see docs/trainer.md).
for setting in "2 auto" "4 rhd"; do
  read -r ranks algo <<<"$setting"
  BATON_ALGO_SAVE=${BATON_ALGO:-}
  [[ $algo == rhd ]] && export BATON_ALGO=allreduce:rhd
  run "$ranks" "${syn[@]}" --first-bucket-mb 0 --bucket-cap-mb 0
  a=$(final_hash)
  run "$ranks" "${syn[@]}" --no-overlap
  b=$(final_hash)
  if [[ $algo == rhd ]]; then if [[ -n $BATON_ALGO_SAVE ]]; then export BATON_ALGO=$BATON_ALGO_SAVE; else unset BATON_ALGO; fi; fi
  if [[ -n $a && $a == "$b" ]]; then ok "$ranks ranks ($algo): bucketed overlapped == one allreduce ($a)"; else bad "$ranks ranks ($algo): bucketed $a != unbucketed $b"; fi
done

run 4 "${syn[@]}" --seed 7
a=$(final_hash)
run 4 "${syn[@]}" --seed 7
b=$(final_hash)
run 4 "${syn[@]}" --seed 8
c=$(final_hash)
if [[ -n $a && $a == "$b" && $a != "$c" ]]; then ok "same seed, same parameters ($a); another seed differs"; else bad "seeds: $a $b $c"; fi

# ---- Checkpoint and resume -----------------------------------------------------------------
for mode in "" "--mode ps" "--mode local --average-every 5"; do
  # shellcheck disable=SC2086
  {
    run 3 --synthetic 1200 --hidden 256,128 --epochs 3 --warmup 5 --print-hash --ema 0.9 $mode
    a=$(final_hash)
    run 3 --synthetic 1200 --hidden 256,128 --epochs 3 --warmup 5 --stop-after 2 --ema 0.9 --checkpoint "$work/ck" $mode
    run 3 --synthetic 1200 --hidden 256,128 --epochs 3 --warmup 5 --print-hash --ema 0.9 --resume "$work/ck" --json "$work/resumed.json" $mode
    b=$(final_hash)
  }
  if [[ -n $a && $a == "$b" ]] && grep -q "resumed after epoch 2" "$work/log"; then
    ok "checkpoint after 2 epochs + resume == 3 epochs ${mode:-sync} ($a)"
  else
    bad "resume ${mode:-sync}: $a != $b"
  fi
done
expect_fail "resume with another model" "the model's layer sizes differ" 1 2 --synthetic 1200 --epochs 3 \
  --ema 0.9 --hidden 64 --resume "$work/ck"
# (ck: after epoch 2 of --mode local.) Resuming a finished run trains nothing, says so, exits 0.
if run 3 --synthetic 1200 --hidden 256,128 --epochs 2 --ema 0.9 --resume "$work/ck" --mode local --average-every 5 &&
  grep -q "^nothing left to train: the checkpoint is after epoch 2 and --epochs is 2" "$work/log" &&
  ! grep -q "^epoch" "$work/log"; then
  ok "resume with --epochs not above the checkpoint's: nothing left to train, said"
else
  bad "resume with nothing left to train"
fi

# ---- Every mode learns (synthetic: chance is 0.1) ------------------------------------------------
for mode in "--mode sync" "--mode ps" "--mode ps --async" "--mode local --average-every 8"; do
  # shellcheck disable=SC2086
  if run 4 --synthetic 3000 --hidden 256,128 --epochs 3 --json "$work/m.json" $mode; then
    acc=$(last_json "$work/m.json" test_acc)
    if python3 -c "import sys; sys.exit(0 if float('$acc') >= 0.9 else 1)"; then
      ok "$mode learns: test_acc $acc"
    else
      bad "$mode: test_acc $acc < 0.9"
    fi
  else
    bad "$mode: run failed"
  fi
done
# The last of those (--mode local) wrote the configuration and three epochs.
if python3 - "$work/m.json" <<'PY'; then ok "--json has the documented keys"; else bad "--json keys"; fi
import json, sys
rec = json.loads(open(sys.argv[1]).read().splitlines()[1])
assert "config" in json.loads(open(sys.argv[1]).readline())
need = ["epoch", "loss", "train_acc", "test_acc", "test_loss", "samples_per_s", "comm_wait_frac"]
missing = [k for k in need if k not in rec]
assert not missing, missing
assert 0 <= rec["test_acc"] <= 1 and 0 <= rec["comm_wait_frac"] <= 1 and rec["samples_per_s"] > 0
PY

# ---- One epoch of Fashion-MNIST --------------------------------------------------------------------
fm=/usr/share/datasets/fashion-mnist
if [[ -f $fm/train-images-idx3-ubyte.gz ]]; then
  if run 2 --epochs 1 --json "$work/fm.json"; then
    acc=$(last_json "$work/fm.json" test_acc)
    if python3 -c "import sys; sys.exit(0 if float('$acc') >= 0.8 else 1)"; then
      ok "Fashion-MNIST, 2 ranks, 1 epoch: test_acc $acc"
    else
      bad "Fashion-MNIST 1 epoch: test_acc $acc < 0.8"
    fi
  else
    bad "Fashion-MNIST run failed"
  fi
else
  echo "skip - Fashion-MNIST check: $fm missing (apt-get install dataset-fashion-mnist)"
fi

trainer_summary
