# Shared by the baton-train test scripts (sourced, after `set -u`): their arguments, a scratch
# directory, the ok/bad tally, a batonrun launch and the every-rank usage-error check.
#   source "$(dirname "$0")/trainer_lib.sh" BATONRUN BATON_TRAIN
# Sets batonrun, train, work (removed on exit), passed, failed; BATON_TIMEOUT defaults to 60
# unless the caller set it. A script ends with `trainer_summary`.
batonrun=$1
train=$2
export BATON_SOCKET_IFNAME=lo BATON_TIMEOUT=${BATON_TIMEOUT:-60}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passed=0
failed=0
# TIMING=1 adds the seconds since the start to each ok line.
ok() { echo "ok - $1${TIMING:+ [$SECONDS s]}"; passed=$((passed + 1)); }
bad() { echo "not ok - $1"; failed=$((failed + 1)); [[ -f $work/log ]] && tail -25 "$work/log"; }

# run RANKS ARGS...: the trainer under batonrun, output in $work/log; its exit status. One BLAS
# thread everywhere: OpenBLAS's sgemm can round differently with other thread counts, and the
# bitwise checks compare runs with different rank counts.
run() {
  local ranks=$1
  shift
  timeout 120 "$batonrun" -n "$ranks" "$train" --no-progress --blas-threads 1 "$@" >"$work/log" 2>&1
}

# expect_usage NAME PATTERN RANKS ARGS...: every rank exits 2, says "baton-train: rank R: error:
# ...PATTERN" and trains nothing. Launched torchrun-style (no batonrun, which would stop the others
# after the first exit), so that each rank's own status is checked.
expect_usage() {
  local name=$1 pattern=$2 ranks=$3
  shift 3
  # Below the kernel's ephemeral ports (32768 up), which a connection may hold at any time.
  local port=$((20000 + RANDOM % 12768)) pids=() r all=1
  for ((r = 0; r < ranks; r++)); do
    RANK=$r WORLD_SIZE=$ranks MASTER_ADDR=127.0.0.1 MASTER_PORT=$port timeout 60 "$train" \
      --no-progress --synthetic 500 "$@" >"$work/usage$r" 2>&1 &
    pids+=($!)
  done
  for ((r = 0; r < ranks; r++)); do
    wait "${pids[$r]}"
    local rc=$?
    if [[ $rc -ne 2 ]] || ! grep -q -- "baton-train: rank $r: error: .*$pattern" "$work/usage$r" ||
      grep -q "^epoch" "$work/usage$r"; then
      all=0
      echo "rank $r: exit $rc: $(head -c 300 "$work/usage$r")"
    fi
  done
  if [[ $all -eq 1 ]]; then ok "$name: every rank exits 2 ($(head -1 "$work/usage0"))"; else bad "$name"; fi
}

# The last line and the exit status of every trainer test script.
trainer_summary() {
  echo "$passed passed, $failed failed"
  [[ $failed -eq 0 ]]
}
