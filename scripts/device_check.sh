#!/usr/bin/env bash
# The check for a machine with an NVIDIA GPU (docs/cuda.md, "Running the check on a GPU"): one
# command, run in the source tree beside the folder scripts/device_bundle.sh made, on a machine
# that has the driver, CUDA and PyTorch but nothing of Baton's dependencies.
#
#   scripts/device_check.sh [RESULTS_DIR]           (default: device-results)
#
# Steps, each with its own deadline inside the whole check's DEVICE_CHECK_BUDGET (460 s):
#   smi      nvidia-smi and the GPU topology
#   unit     the CUDA tests: cuda_host (kernels' per-thread code), cuda (device collectives,
#            3 and 9 ranks on the visible GPUs), trainer_cuda_backend (the trainer's kernels)
#   kernels  the reduce-copy kernels against a device-to-device cudaMemcpy (cuda_kernels_bench)
#   trainer  baton-train --device cuda, one epoch of Fashion-MNIST on 2 ranks
#   perf     allreduce, broadcast, reduce-scatter and allgather on device buffers (-B cuda),
#            DEVICE_PERF_RANKS (2 4 8) ranks sharing the GPUs, 8 B to DEVICE_PERF_MAX (1G); first
#            the latency of small allreduces with each way a stream can wait (and under MPS
#            where the machine has it), then the first rank count; the others after torch
#   torch    the baton package compiled against this machine's torch, then torch_test.py's
#            CUDA-tensor run on 2 ranks
# DEVICE_CHECK_STEPS="unit perf" runs some of them; DEVICE_MPS=on runs the steps after perf's
# first measurements (the trainer, the sweeps, torch) under MPS even where perf did not run.
# RESULTS_DIR gets at most 8 files: summary.txt (one line per step and run: ok / FAILED /
# skipped, seconds, figures), and one log per step. Exit status 0 when no step failed.
#
# BATON_DEVICE_DRY_RUN=1 (a test here, tests/meson.build): everything that needs no GPU. The
# bundle unpacks, every carried binary and library resolves its libraries in an empty
# environment from the bundle and glibc alone, every binary starts (--help), the CUDA tests skip
# for want of a device, and the step commands are printed instead of run.
set -uo pipefail
cd "$(dirname "$0")/.."
src=$PWD
results=$(mkdir -p "${1:-device-results}" && cd "${1:-device-results}" && pwd)
bundle=${BUNDLE:-device-bundle}
dry=${BATON_DEVICE_DRY_RUN:-0}
budget=${DEVICE_CHECK_BUDGET:-460}
steps=${DEVICE_CHECK_STEPS:-smi unit kernels perf trainer torch}
perf_ranks=${DEVICE_PERF_RANKS:-2 4 8}
perf_max=${DEVICE_PERF_MAX:-1G}
start=$SECONDS
failed=0
summary=$results/summary.txt
: >"$summary"

note() { echo "$*" | tee -a "$summary"; }
left() { echo $((budget - (SECONDS - start))); }
# A step's deadline: its own cap, or what is left of the budget, whichever is smaller.
cap() { local l; l=$(left); echo $(($1 < l ? $1 : (l > 5 ? l : 5))); }

# ---- the bundle ----
work=${DEVICE_WORK:-$(mktemp -d /tmp/baton-device.XXXXXX)}
mkdir -p "$work"
if [ ! -f "$bundle/baton.tar.xz" ]; then
  note "bundle FAILED: no $bundle/baton.tar.xz (run scripts/device_bundle.sh here and carry $bundle)"
  exit 1
fi
if command -v xz >/dev/null; then
  xz -dc "$bundle/baton.tar.xz" | tar -C "$work" -xf -
else  # Python's lzma, where xz-utils is missing
  python3 -c 'import lzma,sys,tarfile; tarfile.open(fileobj=lzma.open(sys.argv[1])).extractall(sys.argv[2])' \
    "$bundle/baton.tar.xz" "$work"
fi || { note "bundle FAILED: cannot unpack $bundle/baton.tar.xz"; exit 1; }
B=$work
lib=$B/lib
# The machine's libstdc++ serves unless it is older than the one the bundle was built with.
if LD_LIBRARY_PATH=$lib ldd "$B/bin/batonrun" | grep -q "not found"; then lib=$lib:$B/lib/compat; fi
# cuBLAS for baton-train, which dlopens libcublas.so.13: the toolkit's or torch's wheel's.
cublas_dirs=$(ls -d /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib 2>/dev/null;
  python3 -c 'import glob,os,torch; print("\n".join(os.path.dirname(p) for p in glob.glob(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)),"nvidia","*","lib","libcublas.so*"))))' 2>/dev/null)
for d in $cublas_dirs; do [ -e "$d/libcublas.so.13" ] && { lib=$lib:$d; break; }; done
export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export BATON_SOCKET_IFNAME=lo BATON_TIMEOUT=${BATON_TIMEOUT:-30}
note "bundle ok: $(head -1 "$bundle/MANIFEST" | sed 's/^# //'); unpacked in $B; $(nproc) CPUs"

# ---- dry run: what needs no GPU ----
if [ "$dry" = 1 ]; then
  # Every library a carried ELF needs must come from the bundle or from glibc / libstdc++ /
  # libgcc_s of the system (what any GPU machine has), with no variable but LD_LIBRARY_PATH.
  bad=0
  for f in "$B"/bin/* "$B"/tests/* "$B"/lib/*.so*; do
    out=$(env -i LD_LIBRARY_PATH="$lib" ldd "$f" 2>&1)
    if grep -q "not found" <<<"$out"; then
      note "dry-run FAILED: $f: $(grep 'not found' <<<"$out" | tr -s ' \t' ' ' | head -3)"
      bad=1
    fi
    while read -r name path; do
      case "$name" in
        libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | ld-linux-*) ;;
        libstdc++.so.* | libgcc_s.so.*) ;;
        libcublas*) ;;
        *) case "$path" in "$B"/*) ;; *) note "dry-run FAILED: $f takes $name from $path"; bad=1 ;; esac ;;
      esac
    done < <(awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' <<<"$out")
  done
  for b in batonrun "baton-topo --ranks 2" all_reduce_perf broadcast_perf reduce_scatter_perf \
           all_gather_perf cuda_kernels_bench baton-train; do
    args=(--help)
    [[ $b == *" "* ]] && args=(${b#* }) && b=${b%% *}
    if ! env -i PATH="$PATH" LD_LIBRARY_PATH="$lib" "$B/bin/$b" "${args[@]}" >/dev/null 2>&1 &&
       ! env -i PATH="$PATH" LD_LIBRARY_PATH="$lib" "$B/bin/$b" -h >/dev/null 2>&1; then
      note "dry-run FAILED: $b ${args[*]} does not start"; bad=1
    fi
  done
  # Without a device the CUDA tests skip; they must start and say so.
  out=$(env -i PATH="$PATH" LD_LIBRARY_PATH="$lib" BATON_TIMEOUT=30 "$B/tests/cuda_test" 2>&1)
  rc=$?
  if [ $rc -ne 0 ] || ! grep -q "SKIPPED\|Skipped\|skip" <<<"$out"; then
    note "dry-run FAILED: cuda_test (status $rc): $(tail -3 <<<"$out")"; bad=1
  fi
  out=$(env -i PATH="$PATH" LD_LIBRARY_PATH="$lib" "$B/tests/trainer_cuda_backend_test" 2>&1)
  rc=$?
  if [ $rc -ne 0 ] && [ $rc -ne 77 ]; then
    note "dry-run FAILED: trainer_cuda_backend_test (status $rc): $(tail -3 <<<"$out")"; bad=1
  fi
  out=$(env -i PATH="$PATH" LD_LIBRARY_PATH="$lib" "$B/bin/batonrun" -n 1 "$B/bin/all_reduce_perf" \
        -B cuda -b 8 -e 8 2>&1)
  if ! grep -q "selecting the GPU: cudaGetDeviceCount" <<<"$out"; then
    note "dry-run FAILED: all_reduce_perf -B cuda does not report the missing GPU"; bad=1
  fi
  python3 -m py_compile "$src/scripts/device_python_build.py" || { note "dry-run FAILED: device_python_build.py"; bad=1; }
  if [ $bad != 0 ]; then
    [ -z "${DEVICE_WORK:-}" ] && rm -rf "$work"
    exit 1
  fi
  note "dry-run ok: $(ls "$B"/bin "$B"/tests | wc -l) binaries start, every library resolves from the bundle and glibc"
  # The steps below then print their commands instead of running them.
fi

# run STEP NAME SECONDS LOG COMMAND...: one command with a deadline, its output appended to LOG;
# prints and records "ok" or "FAILED" with the time taken.
run() {
  local step=$1 name=$2 limit=$3 log=$4
  shift 4
  local t0=$SECONDS rc
  if [ "$dry" = 1 ]; then
    note "$step $name: would run: $*"
    last_rc=0
    return 0
  fi
  if [ "$(left)" -le 5 ]; then note "$step $name skipped: the check's $budget s are used up"; return 0; fi
  echo "=== $name: $*" >>"$log"
  timeout -k 10 "$(cap "$limit")" "$@" >>"$log" 2>&1
  rc=$?
  last_rc=$rc
  if [ $rc -eq 0 ]; then
    note "$step $name ok $((SECONDS - t0)) s"
  elif [ $rc -eq 77 ]; then
    note "$step $name skipped $((SECONDS - t0)) s: $(tail -1 "$log")"
  else
    [ $rc -eq 124 ] && echo "=== $name: timed out" >>"$log"
    note "$step $name FAILED (status $rc) $((SECONDS - t0)) s"
    failed=1
  fi
}
want() { [[ " $steps " == *" $1 "* ]]; }
last_rc=1

if want smi && [ "$dry" != 1 ]; then
  { nvidia-smi; nvidia-smi topo -m; nvidia-smi -q -d CLOCK,MEMORY | head -60; } >"$results/nvidia-smi.txt" 2>&1
  note "smi $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -1)"
fi

if want unit; then
  log=$results/unit.log
  run unit cuda_host 90 "$log" "$B/tests/cuda_host_test" --gtest_brief=1
  run unit cuda 150 "$log" "$B/tests/cuda_test"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) " "$log" 2>/dev/null | tail -20 | sed 's/^/  /' | tee -a "$summary"
  run unit trainer_cuda_backend 90 "$log" "$B/tests/trainer_cuda_backend_test"
fi

if want kernels; then
  run kernels cuda_kernels_bench 60 "$results/kernels.txt" "$B/bin/cuda_kernels_bench" -e 268435456 -n 10
  grep -E "^# (cudaMemcpy|lowest)" "$results/kernels.txt" 2>/dev/null | sed 's/^# /  /' | tee -a "$summary"
fi

# perf_sweep N...: the four collectives on device buffers for each rank count.
perf_sweep() {
  local log=$results/perf.log n coll before
  for n in "$@"; do
    for coll in all_reduce broadcast reduce_scatter all_gather; do
      before=$(wc -l <"$log")
      run perf "${coll}_perf -n $n" 45 "$log" "$B/bin/batonrun" -n "$n" "$B/bin/${coll}_perf" \
        -B cuda -b 8 -e "$perf_max" -f 2 -n 5 -w 1 -c 1
      # The table's rows since this run began: #wrong summed, busbw of the largest size.
      tail -n +"$((before + 1))" "$log" | awk -v name="${coll} n=$n" '
        /^ +[0-9]/ { rows++; wrong += $9 + $13; bw = $8; size = $1 }
        END { printf "  %s: %d sizes up to %s B, #wrong %d, busbw there %s GB/s\n", name, rows, size, wrong, bw }' |
        tee -a "$summary"
    done
  done
}

# small_allreduce LABEL: 2 ranks, 8 B to 64 KiB, the latency of one call on device buffers.
small_allreduce() {
  local log=$results/perf.log before
  before=$(wc -l <"$log")
  run perf "all_reduce_perf -n 2 small, $1" 30 "$log" "$B/bin/batonrun" -n 2 \
    "$B/bin/all_reduce_perf" -B cuda -b 8 -e 64K -f 8 -n 50 -w 5
  tail -n +"$((before + 1))" "$log" | awk -v what="$1" '/^ +[0-9]/ { t = t " " $1 " B " $6 " us;" }
    END { printf "  %s:%s\n", what, t }' | tee -a "$summary"
}

set -- $perf_ranks
first_ranks=$1
shift
more_ranks="$*"
mps_on=0
start_mps() {
  if ! command -v nvidia-cuda-mps-control >/dev/null; then
    note "MPS skipped: no nvidia-cuda-mps-control"
    return 1
  fi
  export CUDA_MPS_PIPE_DIRECTORY=$work/mps CUDA_MPS_LOG_DIRECTORY=$work/mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  if nvidia-cuda-mps-control -d >>"$results/perf.log" 2>&1; then
    mps_on=1
    return 0
  fi
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  note "MPS skipped: nvidia-cuda-mps-control -d failed"
  return 1
}
stop_mps() {
  if [ $mps_on = 1 ]; then echo quit | nvidia-cuda-mps-control >>"$results/perf.log" 2>&1; mps_on=0; fi
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
}
trap stop_mps EXIT
if want perf; then
  : >>"$results/perf.log"
  # How a stream waits for the host side: the default (memop) against the spinning kernel, and,
  # where the machine has it, the same under MPS (ranks sharing a GPU without time slicing).
  # When the allreduces under MPS pass, MPS stays on for the rest of the check (the trainer and
  # the sweeps measure the ranks' own time, not the time slices); without it the check goes on
  # time-sliced, as before.
  BATON_CUDA_STREAM_WAIT=kernel small_allreduce "stream wait kernel"
  small_allreduce "stream wait memop"
  # Ranks unbound: what binding each rank to one core costs beyond the device worker's own
  # widening (base/affinity.h; docs/cuda.md has what it cost before the widening).
  BATON_BIND=none small_allreduce "stream wait memop, BATON_BIND=none"
  # Where a small call's time goes (BATON_DEBUG=TRACE prints each device call's parts).
  before=$(wc -l <"$results/perf.log")
  BATON_DEBUG=TRACE BATON_DEBUG_SUBSYS=COLL run perf "all_reduce_perf -n 2 8 B, split" 30 \
    "$results/perf.log" "$B/bin/batonrun" -n 2 "$B/bin/all_reduce_perf" -B cuda -b 8 -e 8 -n 20 -w 2
  tail -n +"$((before + 1))" "$results/perf.log" |
    grep -E "\[0\] BATON TRACE .*(CUDA IPC call on a stream|allreduce: handles|staged call)" |
    tail -3 | sed 's/^.*TRACE [^ ]* /  /' | tee -a "$summary"
  if [ "$dry" = 1 ]; then
    note "perf MPS: would start nvidia-cuda-mps-control -d and keep it when the allreduces pass"
  elif start_mps; then
    small_allreduce "stream wait memop, MPS"
    if [ "$last_rc" = 0 ]; then
      note "perf MPS stays on for the trainer and the sweeps"
    else
      stop_mps
      note "perf MPS off again: the allreduces under it failed"
    fi
  fi
fi
# DEVICE_MPS=on: under MPS from here on, whatever the perf step found (or without it).
if [ "${DEVICE_MPS:-auto}" = on ] && [ "$dry" != 1 ] && [ $mps_on = 0 ]; then
  start_mps && note "MPS on for the rest of the check (DEVICE_MPS=on)"
fi

if want trainer; then
  run trainer baton-train 90 "$results/trainer.log" "$B/bin/batonrun" -n 2 "$B/bin/baton-train" \
    --device cuda --epochs 1 --data "$B/data"
  if [ "$last_rc" != 0 ] && [ $mps_on = 1 ]; then
    # Which path fails under MPS: the same without CUDA IPC (every call staged before the
    # stream waits) tells the IPC fallback's staging after the wait from the rest.
    grep -E "error|mismatch|aborted" "$results/trainer.log" | tail -4 | sed 's/^/  /' | tee -a "$summary"
    BATON_CUDA_IPC=0 run trainer "baton-train, BATON_CUDA_IPC=0" 90 "$results/trainer.log" \
      "$B/bin/batonrun" -n 2 "$B/bin/baton-train" --device cuda --epochs 1 --data "$B/data"
  fi
  grep -iE "^epoch" "$results/trainer.log" 2>/dev/null | tail -3 | sed 's/^/  /' | tee -a "$summary"
fi

if want perf; then perf_sweep "$first_ranks"; fi

if want torch; then
  log=$results/torch.log
  if ! python3 -c "import torch; assert torch.cuda.is_available()" >>"$log" 2>&1; then
    note "torch skipped: python3 has no torch with a usable GPU ($(tail -1 "$log"))"
  else
    run torch build 150 "$log" python3 "$src/scripts/device_python_build.py" --lib "$B/lib" \
      --out "$B/python"
    if [ "$last_rc" = 0 ]; then
      PYTHONPATH=$B/python run torch "torch_test cuda (2 ranks)" 150 "$log" python3 \
        "$src/tests/python/launch.py" -n 2 --timeout 140 "$src/tests/python/torch_test.py" cuda
    fi
  fi
fi

# The larger rank counts last: the sweep that takes longest.
if want perf && [ -n "$more_ranks" ]; then perf_sweep $more_ranks; fi

stop_mps
note "check done in $((SECONDS - start)) s: $([ $failed = 0 ] && echo "no step failed" || echo "FAILED steps above")"
[ "$dry" = 1 ] && [ -z "${DEVICE_WORK:-}" ] && rm -rf "$work"
exit $failed
