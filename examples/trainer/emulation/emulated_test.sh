#!/usr/bin/env bash
# trainer_cuda_emulated: the CUDA backend (cuda_backend.cc) on an emulated device
# (emulated_cuda.cc, emulated_cublas.cc) must train to the same final parameters as the CPU
# backend, bit for bit, in every mode: the emulated kernels run the same elementwise.h functions
# and the emulated sgemm is CBLAS's column-major one with the backend's argument mapping, so any
# difference is a fault in the backend's host-side logic or in the trainer's device paths.
# Usage: emulated_test.sh BATONRUN BATON_TRAIN BATON_TRAIN_EMULATED_CUDA
# (with LD_LIBRARY_PATH leading to the emulated libcublas.so.13)
set -u
batonrun=$1
cpu_train=$2
emu_train=$3
export BATON_SOCKET_IFNAME=lo BATON_TIMEOUT=${BATON_TIMEOUT:-60}
# OpenBLAS's sgemm gives different bits for different thread counts; the CPU backend sets its
# count per rank (--blas-threads) and the emulated cuBLAS runs OpenBLAS with its default, so both
# are pinned to one thread.
export OPENBLAS_NUM_THREADS=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passed=0
failed=0
ok() { echo "ok - $1"; passed=$((passed + 1)); }
bad() { echo "not ok - $1"; failed=$((failed + 1)); tail -5 "$work/log"; }
# hash RANKS BINARY ARGS...: the final parameter hash of a run (empty when it failed).
hash() {
  local ranks=$1 bin=$2
  shift 2
  timeout 120 "$batonrun" -n "$ranks" "$bin" --no-progress --print-hash "$@" >"$work/log" 2>&1 &&
    sed -n 's/^final parameter hash: //p' "$work/log"
}
same() {
  local ranks=$1 name=$2
  shift 2
  local a b
  a=$(hash "$ranks" "$cpu_train" --blas-threads 1 "$@")
  b=$(hash "$ranks" "$emu_train" --device cuda --check-replicas "$@")
  if [[ -n $a && $a == "$b" ]]; then ok "$name: emulated cuda == cpu ($a)"; else bad "$name: cpu $a, emulated cuda $b"; fi
}
syn=(--synthetic 1500 --epochs 2)
same 2 "sync, overlapped buckets" "${syn[@]}"
same 2 "sync, a bucket per layer" "${syn[@]}" --first-bucket-mb 0 --bucket-cap-mb 0
same 2 "sync, one allreduce" "${syn[@]}" --no-overlap
same 2 "sync, fp16 allreduce, EMA" "${syn[@]}" --fp16-allreduce --ema 0.9
BATON_ALGO=allreduce:rhd EMULATED_POOLS=0 same 4 "sync, 4 ranks rhd, no memory pools" "${syn[@]}"
same 3 "parameter server, EMA" "${syn[@]}" --mode ps --ema 0.9
same 4 "parameter server, 2 servers (device ranges in groups), EMA" "${syn[@]}" --mode ps --ps-shards 2 --ema 0.9
same 2 "local SGD, EMA" "${syn[@]}" --mode local --average-every 3 --ema 0.9
# The model-parallel modes: activations and gradients through Baton's device path (tensor
# collectives, pipeline groups of sends and receives), data-parallel buckets on the comm stream.
mp=("${syn[@]}" --hidden 96,48,24)
same 2 "tensor" "${mp[@]}" --mode tensor
same 3 "tensor, gathered output layer, 2 micro-batches" "${syn[@]}" --hidden 120,60 --mode tensor \
  --micro-batches 2
same 2 "pipeline 1f1b, 4 micro-batches" "${mp[@]}" --mode pipeline --schedule 1f1b --micro-batches 4
same 3 "pipeline gpipe, 2 micro-batches" "${mp[@]}" --mode pipeline --schedule gpipe --micro-batches 2
same 2 "pipeline pipedream, weight stashing" "${mp[@]}" --mode pipeline --schedule pipedream \
  --micro-batches 2
same 4 "hybrid dp 2 x pp 2" "${mp[@]}" --dp 2 --pp 2 --micro-batches 2
same 4 "hybrid dp 2 x tp 2" "${mp[@]}" --dp 2 --tp 2

a=$(hash 3 "$cpu_train" --blas-threads 1 --synthetic 1200 --epochs 3 --warmup 5 --ema 0.9)
hash 3 "$emu_train" --device cuda --synthetic 1200 --epochs 3 --warmup 5 --ema 0.9 --stop-after 2 \
  --checkpoint "$work/ck" >/dev/null
b=$(hash 3 "$emu_train" --device cuda --synthetic 1200 --epochs 3 --warmup 5 --ema 0.9 --resume "$work/ck")
if [[ -n $a && $a == "$b" ]]; then ok "checkpoint on the device + resume == cpu ($a)"; else bad "resume: cpu $a, emulated cuda $b"; fi

if timeout 120 "$batonrun" -n 3 "$emu_train" --no-progress --device cuda --synthetic 3000 --epochs 2 \
  --mode ps --async --json "$work/async.json" >"$work/log" 2>&1 &&
  python3 -c "import json,sys; sys.exit(0 if json.loads(open(sys.argv[1]).read().splitlines()[-1])['test_acc'] >= 0.9 else 1)" "$work/async.json"; then
  ok "asynchronous parameter server learns on the device"
else
  bad "asynchronous parameter server"
fi

EMULATED_GPUS=0 "$emu_train" --no-progress --device cuda --synthetic 500 >"$work/log" 2>"$work/err"
rc=$?
if [[ $rc -eq 1 && $(wc -l <"$work/err") -eq 1 ]] &&
  grep -q "error: --device cuda: no CUDA device: cudaGetDeviceCount found none" "$work/err"; then
  ok "no device: $(cat "$work/err")"
else
  bad "no device (exit $rc): $(cat "$work/err")"
fi

echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
