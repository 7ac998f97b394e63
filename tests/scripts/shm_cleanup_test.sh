#!/usr/bin/env bash
# Ranks that leave without batonCommDestroy leave nothing in /dev/shm: a segment keeps its name
# until every local peer has mapped it (with connections made on first use, possibly never), so
# the name goes at exit (atexit, by hand-launched ranks that call exit), or by batonrun when its
# ranks die of a signal (src/base/shm_names.h). Five ranks, one small ring allreduce: ranks
# that are not neighbours never connect, so some segments are still named when the ranks leave (checked, so that the
# test cannot pass vacuously).
#
# Usage: tests/scripts/shm_cleanup_test.sh path/to/batonrun path/to/leave_without_destroy
# SPDX-License-Identifier: BSD-3-Clause

set -u
if [[ $# -ne 2 || ! -x $1 || ! -x $2 ]]; then
  echo "usage: $0 path/to/batonrun path/to/leave_without_destroy" >&2
  exit 2
fi
BATONRUN=$1
PROGRAM=$2
NRANKS=5
TMP=$(mktemp -d "${TMPDIR:-/tmp}/shm_cleanup_test.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export BATON_SOCKET_IFNAME=lo BATON_TIMEOUT=30 BATON_RUNTIME_CONNECT=1 BATON_ALGO=ring
failed=0

# check NAME OUTFILE: every rank reported "pid P linked L", at least one was still linked when
# it left, and /dev/shm holds no segment named for any of the pids.
check() {
  local name=$1 out=$2 pids linked left
  pids=$(awk '$1 == "pid" { print $2 }' "$out")
  linked=$(awk '$1 == "pid" && $4 == 1' "$out" | wc -l)
  if [[ $(echo "$pids" | grep -c .) -ne $NRANKS ]]; then
    echo "not ok - $name: expected $NRANKS ranks to report, got:"
    sed 's/^/# /' "$out" "$TMP"/err* 2>/dev/null | head -20
    failed=1
    return
  fi
  left=""
  for p in $pids; do
    left+=$(ls /dev/shm | grep -E "^baton-[0-9a-f]{16}-[0-9]+-$p\$" | tr '\n' ' ')
  done
  if [[ $linked -eq 0 ]]; then
    echo "not ok - $name: no rank's segment was still named when it left (the test proves nothing)"
    failed=1
  elif [[ -n $left ]]; then
    echo "not ok - $name: left behind in /dev/shm: $left"
    for p in $pids; do ls /dev/shm | grep -E -- "-$p\$" | sed 's|^|/dev/shm/|' | xargs -r rm -f; done
    failed=1
  else
    echo "ok - $name ($linked of $NRANKS ranks still named their segment when they left)"
  fi
}

# 1. Launched by hand (BATON_ROOT, no launcher to clean up), every rank calls exit(0).
port=$((20000 + RANDOM % 12768))  # below the kernel's ephemeral ports (32768 up)
mkdir "$TMP/exit" "$TMP/kill"
pids=()
for ((r = 0; r < NRANKS; r++)); do
  BATON_ROOT=127.0.0.1:$port BATON_RANK=$r BATON_WORLD_SIZE=$NRANKS \
    timeout -k 2 60 "$PROGRAM" exit "$TMP/exit" >"$TMP/out$r" 2>"$TMP/err$r" &
  pids+=($!)
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=$?; done
cat "$TMP"/exit/report.* >"$TMP/exit.out"
[[ $status -eq 0 ]] || { echo "not ok - exit: a rank failed (status $status)"; failed=1; }
check "exit without batonCommDestroy, launched by hand" "$TMP/exit.out"

# 2. Under batonrun, every rank dies of SIGKILL: no peer outlives them, batonrun removes.
timeout -k 2 60 "$BATONRUN" -n $NRANKS "$PROGRAM" kill "$TMP/kill" >/dev/null 2>"$TMP/err.kill"
cat "$TMP"/kill/report.* >"$TMP/kill.out"
check "SIGKILL of every rank under batonrun" "$TMP/kill.out"

exit $failed
