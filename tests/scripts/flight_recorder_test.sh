#!/usr/bin/env bash
# The flight recorders through batonrun: a job whose rank 2 never enters the
# last allreduce. batonrun's timeout prints every rank's last calls and names
# rank 2 as the one that never entered call #5; `batonrun --dump PID` prints
# the same for a running job, and so does SIGUSR1 to batonrun, which neither
# stops the job nor reaches the ranks; no flight recorder file outlives the job.
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
# 3. SIGUSR1 to batonrun while rank 1 never enters call #5: the table on stderr, promptly, every
# time it is sent, and the job goes on. late_rank does not handle SIGUSR1, so a rank that
# received it would die of it and fail the job.
now_ms() { date +%s%3N; }
BATON_TIMEOUT=60 "$BATONRUN" -n 2 --timeout 30 "$LATE" 1 > "$TMP/out3" 2> "$TMP/err3" &
job=$!
hung=0
for _ in $(seq 1 50); do
  sleep 0.1
  "$BATONRUN" --dump "$job" 2> /dev/null | grep -q "never entered call #5" && hung=1 && break
done
[[ $hung -eq 1 ]] || fail "the SIGUSR1 job did not reach its hang within 5 s"
ranks=$(cat /proc/"$job"/task/"$job"/children 2> /dev/null)
# Waits until batonrun's stderr holds $1 tables (whole, ending with the divergence line).
wait_tables() {
  local tries=0
  while [[ $(grep -c "never entered call #5" "$TMP/err3") -lt $1 && $tries -lt 200 ]]; do
    sleep 0.01
    tries=$((tries + 1))
  done
}
start=$(now_ms)
kill -USR1 "$job"
wait_tables 1
took=$(($(now_ms) - start))
[[ $took -lt 1000 ]] || fail "the table came $took ms after SIGUSR1 (at most 1000 expected)"
echo "SIGUSR1: the table on batonrun's stderr after $took ms"
cp "$TMP/err3" "$TMP/usr1"
grep -q "^batonrun: SIGUSR1 after [0-9.]* s (2 of 2 ranks running; the job goes on)$" \
  "$TMP/usr1" || fail "no SIGUSR1 line saying the job goes on"
grep -q "^communicator [0-9a-f]*, 2 of 2 ranks on this host:$" "$TMP/usr1" ||
  fail "the table does not show the communicator's 2 ranks"
grep -q "^  rank 0 (pid [0-9]* on .*), 5 calls: .*broadcast #4 (10 x float, root 0) done;\
 allreduce #5 (4096 x float, sum) running for" "$TMP/usr1" ||
  fail "rank 0 is not shown with 5 calls, waiting in allreduce #5 after broadcast #4"
grep -q "^  rank 1 (pid [0-9]* on .*), 4 calls: allreduce #1 (4096 x float, sum) done;\
 allreduce #2 .* done; allreduce #3 .* done; broadcast #4 (10 x float, root 0) done$" \
  "$TMP/usr1" || fail "rank 1 is not shown with calls #1 to #4, all done"
grep -q "^  rank 1 (pid [0-9]*) never entered call #5; its last call: broadcast #4" "$TMP/usr1" ||
  fail "the table does not name rank 1 as the one that never entered call #5"
# The rows are the job's own ranks.
for pid in $(grep -o "^  rank [01] (pid [0-9]*" "$TMP/usr1" | grep -o "[0-9]*$"); do
  grep -qw "$pid" <<< "$ranks" || fail "pid $pid in the table is not a rank of the job ($ranks)"
done
grep -q "killed by signal\|exited with status" "$TMP/usr1" && fail "a rank exited after SIGUSR1"
sleep 0.3
kill -0 "$job" 2> /dev/null || fail "batonrun is gone after SIGUSR1"
for pid in $ranks; do
  kill -0 "$pid" 2> /dev/null || fail "rank pid $pid is gone after SIGUSR1"
done
kill -USR1 "$job"
wait_tables 2
[[ $(grep -c "^batonrun: SIGUSR1 after" "$TMP/err3") -eq 2 ]] ||
  fail "a second SIGUSR1 did not print a second table"
kill -TERM "$job" 2> /dev/null
wait "$job"
status=$?
[[ $status -eq 143 ]] || fail "SIGTERM after SIGUSR1: batonrun exited $status, not 143"
for pid in $ranks; do
  kill -0 "$pid" 2> /dev/null && fail "rank pid $pid outlived the job"
done

"$BATONRUN" --dump 1 > /dev/null 2>&1 && fail "--dump of a process without recorders succeeded"
"$BATONRUN" --dump abc > /dev/null 2>&1
[[ $? -eq 2 ]] || fail "--dump abc is not a usage error"

if [[ $failures -gt 0 ]]; then
  echo "--- batonrun's stderr (timeout):"
  cat "$TMP/err"
  echo "--- batonrun's stderr (SIGUSR1):"
  cat "$TMP/err3"
  exit 1
fi
echo "flight recorder: all checks passed"
