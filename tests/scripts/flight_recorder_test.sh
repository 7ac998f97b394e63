#!/usr/bin/env bash
# The flight recorders through batonrun: a job whose rank 2 never enters the
# last allreduce. batonrun's timeout prints every rank's last calls and names
# rank 2 as the one that never entered call #5; `batonrun --dump PID` prints
# the same for a running job; no flight recorder file outlives the job.
#
# Usage: tests/scripts/flight_recorder_test.sh path/to/batonrun path/to/late_rank
set -u
BATONRUN=$1
LATE=$2
TMP=$(mktemp -d "${TMPDIR:-/tmp}/flight_test.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# 1. The job times out (BATON_TIMEOUT is longer than batonrun's --timeout).
BATON_TIMEOUT=60 timeout 60 "$BATONRUN" -n 4 --timeout 4 "$LATE" 2 > "$TMP/out" 2> "$TMP/err"
status=$?
[[ $status -eq 124 ]] || fail "batonrun exited $status, not 124 (timeout)"
grep -q "the last calls of each rank" "$TMP/err" || fail "no flight recorder table"
grep -q "rank 2 (pid [0-9]*) never entered call #5; its last call: broadcast #4" "$TMP/err" ||
  fail "the table does not name rank 2 as the one that never entered call #5"
for r in 0 1 3; do
  grep -q "rank $r (pid [0-9]* on .*allreduce #5 (4096 x float, sum) running" "$TMP/err" ||
    fail "rank $r is not shown waiting in allreduce #5"
done
pids=$(grep -o "rank [0-9] (pid [0-9]*" "$TMP/err" | grep -o "[0-9]*$" | sort -u)
for pid in $pids; do
  ls /dev/shm/baton-fr-"$pid"-* > /dev/null 2>&1 && fail "flight file of pid $pid left behind"
done

# 2. --dump on the running job, by batonrun's pid and by a rank's pid.
BATON_TIMEOUT=60 "$BATONRUN" -n 3 --timeout 8 "$LATE" 1 > "$TMP/out2" 2> "$TMP/err2" &
job=$!
for _ in $(seq 1 50); do
  sleep 0.1
  "$BATONRUN" --dump "$job" > "$TMP/dump" 2>&1 && grep -q "never entered call #5" "$TMP/dump" && break
done
grep -q "rank 1 (pid [0-9]*) never entered call #5" "$TMP/dump" ||
  fail "--dump of the job does not name rank 1: $(cat "$TMP/dump")"
rank0=$(grep -o "rank 0 (pid [0-9]*" "$TMP/dump" | grep -o "[0-9]*$")
if [[ -n $rank0 ]]; then
  "$BATONRUN" --dump "$rank0" > "$TMP/dump0" 2>&1 || fail "--dump of rank 0's pid failed"
  grep -q "1 of 3 ranks on this host" "$TMP/dump0" || fail "--dump of one rank: $(cat "$TMP/dump0")"
fi
kill -TERM "$job" 2> /dev/null
wait "$job"
"$BATONRUN" --dump 1 > /dev/null 2>&1 && fail "--dump of a process without recorders succeeded"
"$BATONRUN" --dump abc > /dev/null 2>&1
[[ $? -eq 2 ]] || fail "--dump abc is not a usage error"

if [[ $failures -gt 0 ]]; then
  echo "--- batonrun's stderr:"
  cat "$TMP/err"
  exit 1
fi
echo "flight recorder: all checks passed"
