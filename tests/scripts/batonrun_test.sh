#!/usr/bin/env bash
# Tests of the batonrun launcher, driving it with shell commands as ranks (no Baton calls), so
# they check the launcher alone: environment, output prefixes, exit statuses, stopping the job
# when a rank fails, timeouts, signal forwarding and usage errors.
#
# Usage: tests/scripts/batonrun_test.sh path/to/batonrun
# Prints "ok N - what" / "not ok N - what" per check, then "P passed, F failed"; exits 1 if any
# check failed.
#
# Rank output always goes to files, never to a pipe read by this script: a process a rank leaves
# behind could hold such a pipe open and hang the test. Runs are bounded by timeout(1), or by
# batonrun's own --timeout where the test must signal batonrun itself.
#
# SPDX-License-Identifier: BSD-3-Clause

set -u

if [[ $# -ne 1 || ! -x $1 ]]; then
  echo "usage: $0 path/to/batonrun" >&2
  exit 2
fi
BATONRUN=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")

TMP=$(mktemp -d "${TMPDIR:-/tmp}/batonrun_test.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
OUT=$TMP/out
ERR=$TMP/err

passed=0
failed=0
n=0

# check DESCRIPTION COMMAND...: runs COMMAND; a zero status is a pass.
check() {
  local description=$1
  shift
  n=$((n + 1))
  if "$@"; then
    echo "ok $n - $description"
    passed=$((passed + 1))
  else
    echo "not ok $n - $description"
    failed=$((failed + 1))
    # Help whoever reads the log of a failure.
    echo "# status: $status, elapsed: ${elapsed_ms} ms"
    awk '{ print "# stdout: " $0 }' "$OUT" | head -20
    awk '{ print "# stderr: " $0 }' "$ERR" | head -20
  fi
}

status=0
elapsed_ms=0
now_ms() { echo $(($(date +%s%N) / 1000000)); }

# run ARGS...: runs batonrun with ARGS (bounded to 10 s), output in $OUT and $ERR; sets $status
# and $elapsed_ms.
run() {
  local start
  start=$(now_ms)
  timeout -k 2 10 "$BATONRUN" "$@" >"$OUT" 2>"$ERR" </dev/null
  status=$?
  elapsed_ms=$(($(now_ms) - start))
}

# run_and_signal SIGNAL NRANKS ARGS...: starts batonrun with ARGS in the background, waits
# until NRANKS files "ready.*" exist in $TMP/ready (ranks create them once their traps are set),
# sends SIGNAL to batonrun itself and waits for it. Sets $status and $elapsed_ms.
run_and_signal() {
  local sig=$1 nranks=$2
  shift 2
  rm -rf "$TMP/ready"
  mkdir "$TMP/ready"
  local start
  start=$(now_ms)
  "$BATONRUN" --timeout 15 "$@" >"$OUT" 2>"$ERR" </dev/null &
  local pid=$!
  local tries=0
  while [[ $(find "$TMP/ready" -name 'ready.*' | wc -l) -lt $nranks && $tries -lt 100 ]]; do
    sleep 0.05
    tries=$((tries + 1))
  done
  kill -s "$sig" "$pid"
  wait "$pid"
  status=$?
  elapsed_ms=$(($(now_ms) - start))
}

is() { [[ $1 == "$2" ]]; }
contains() { grep -q -e "$2" "$1"; }
faster_than() { [[ $elapsed_ms -lt $1 ]]; }

# ---- Help, version and usage errors ----------------------------------------------------------

run --help
check "--help exits 0 and prints usage" eval 'is $status 0 && contains "$OUT" "Usage"'
run --version
check "--version exits 0 and prints a version" \
  eval 'is $status 0 && contains "$OUT" "[0-9]\.[0-9]\.[0-9]"'

usage_error() {
  run "$@"
  is "$status" 2 && [[ -s $ERR ]]
}
check "usage error: missing -n" usage_error true
check "usage error: -n 0" usage_error -n 0 true
check "usage error: -n not a number" usage_error -n two true
check "usage error: -n with trailing junk" usage_error -n 3x true
check "usage error: missing program" usage_error -n 2
check "usage error: unknown option" usage_error --no-such-option -n 2 true
check "usage error: bad --timeout" usage_error -n 2 --timeout soon true
check "usage error: rank-offset + N > world-size" \
  usage_error -n 2 --world-size 3 --rank-offset 2 --root 127.0.0.1:29500 true

# ---- Environment ------------------------------------------------------------------------------

run -n 4 sh -c 'echo "$BATON_RANK $BATON_WORLD_SIZE $BATON_LOCAL_RANK $BATON_LOCAL_SIZE" \
  "${BATON_UNIQUE_ID-unset} ${BATON_ROOT-unset}" > "$0/env.$BATON_RANK"' "$TMP"
check "all ranks exit 0: batonrun exits 0" is "$status" 0
check "every rank gets a distinct BATON_RANK in 0..3" \
  eval 'is "$(cat "$TMP"/env.* | cut -d" " -f1 | sort | tr "\n" " ")" "0 1 2 3 "'
check "BATON_WORLD_SIZE, BATON_LOCAL_RANK, BATON_LOCAL_SIZE are set" \
  eval '(for r in 0 1 2 3; do read -r rank ws lr ls rest < "$TMP/env.$r" &&
          is "$rank $ws $lr $ls" "$r 4 $r 4" || exit 1; done)'
check "BATON_UNIQUE_ID is 256 lowercase hex digits, the same for all ranks" \
  eval 'is "$(cut -d" " -f5 "$TMP"/env.* | sort -u | grep -cE "^[0-9a-f]{256}$")" 1 &&
        is "$(cut -d" " -f5 "$TMP"/env.* | sort -u | wc -l)" 1'
check "no BATON_ROOT in single-host jobs" \
  eval 'is "$(cut -d" " -f6 "$TMP"/env.* | sort -u)" unset'

rm -f "$TMP"/env.*
run -n 2 --world-size 5 --rank-offset 3 --root 127.0.0.1:29500 sh -c \
  'echo "$BATON_RANK $BATON_WORLD_SIZE $BATON_LOCAL_RANK $BATON_LOCAL_SIZE" \
  "${BATON_UNIQUE_ID-unset} ${BATON_ROOT-unset}" > "$0/env.$BATON_RANK"' "$TMP"
check "multi-host: ranks K..K+N-1 of W, BATON_ROOT, no unique id" \
  eval 'is $status 0 &&
        is "$(cat "$TMP/env.3")" "3 5 0 2 unset 127.0.0.1:29500" &&
        is "$(cat "$TMP/env.4")" "4 5 1 2 unset 127.0.0.1:29500"'

export BATONRUN_TEST_INHERITED=from-parent
run -n 2 -x BATONRUN_TEST_SET=hello -x BATONRUN_TEST_INHERITED sh -c \
  'echo "$BATON_RANK ${BATONRUN_TEST_SET-unset} ${BATONRUN_TEST_INHERITED-unset}"'
check "-x NAME=VALUE and -x NAME export variables" \
  eval 'is $status 0 && contains "$OUT" "^0 hello from-parent$" &&
        contains "$OUT" "^1 hello from-parent$"'

# ---- Binding ----------------------------------------------------------------------------------

# Each rank prints the CPUs it may run on, as the kernel reports them.
affinity='echo "$BATON_RANK $(grep Cpus_allowed_list /proc/self/status | cut -f2)"'
cpus=$(nproc)
if [[ $cpus -ge 2 && $(grep Cpus_allowed_list /proc/self/status | cut -f2) == "0-$((cpus - 1))" ]]; then
  run -n 2 --report-bindings sh -c "$affinity"
  check "default binding: 2 ranks on $cpus CPUs get one distinct CPU each, reported" \
    eval 'is $status 0 && [[ $(awk "{print \$2}" "$OUT" | sort -u | wc -l) -eq 2 ]] &&
          ! grep -q -- "[-,]" <(awk "{print \$2}" "$OUT") &&
          contains "$ERR" "rank 0: PUs" && contains "$ERR" "rank 1: PUs"'
  run -n 2 --bind-to none sh -c "$affinity"
  check "--bind-to none leaves ranks on every CPU" \
    eval 'is $status 0 && [[ $(grep -c " 0-$((cpus - 1))$" "$OUT") -eq 2 ]]'
  BATON_BIND=none run -n 2 sh -c "$affinity"
  check "BATON_BIND=none does the same" \
    eval 'is $status 0 && [[ $(grep -c " 0-$((cpus - 1))$" "$OUT") -eq 2 ]]'
  BATON_BIND=none run -n 2 --bind-to core sh -c "$affinity"
  check "--bind-to wins over BATON_BIND" \
    eval 'is $status 0 && [[ $(grep -c " 0-$((cpus - 1))$" "$OUT") -eq 0 ]]'
  run -n $((cpus + 1)) sh -c "$affinity"
  check "more ranks than cores: bound all the same (cores shared round robin, or NUMA nodes)" \
    eval 'is $status 0 && [[ $(grep -c " 0-$((cpus - 1))$" "$OUT") -eq 0 ]] &&
          [[ $(grep -c "^[0-9]" "$OUT") -eq $((cpus + 1)) ]]'
else
  echo "# binding checks skipped: this shell is bound already or has one CPU"
fi
check "usage error: bad --bind-to" usage_error -n 2 --bind-to sockets true

data=$(cd "$(dirname "$0")/../data/topologies" && pwd)
BATON_TOPO_FILE=$data/power8gpudistances.xml run -n 4 --report-bindings true
check "BATON_TOPO_FILE: the plan for that machine is reported (GPU-local NUMA nodes), not applied" \
  eval 'is $status 0 && contains "$ERR" "rank 0: .*NUMA node 0.*not applied" &&
        contains "$ERR" "rank 3: .*NUMA node 1.*not applied"'

# ---- Output -----------------------------------------------------------------------------------

run -n 3 -p sh -c 'echo "out $BATON_RANK"; echo "err $BATON_RANK" >&2; echo "second $BATON_RANK"'
check "--prefix: stdout lines carry [R] of their rank" \
  eval 'is $status 0 && (for r in 0 1 2; do contains "$OUT" "^\[$r\] out $r$" &&
          contains "$OUT" "^\[$r\] second $r$" || exit 1; done) && is "$(wc -l < "$OUT")" 6'
check "--prefix: stderr lines carry [R] and stay on stderr" \
  eval '(for r in 0 1 2; do contains "$ERR" "^\[$r\] err $r$" || exit 1; done) &&
        ! contains "$OUT" "err"'

run -n 2 -p sh -c 'printf "no newline $BATON_RANK"'
check "--prefix: an unterminated last line is flushed with its prefix" \
  eval 'contains "$OUT" "^\[0\] no newline 0$" && contains "$OUT" "^\[1\] no newline 1$"'

run -n 2 -p sh -c 'i=0; while [ $i -lt 2000 ]; do echo "line $BATON_RANK $i"; i=$((i+1)); done'
check "--prefix: many lines from several ranks are not mixed" \
  eval 'is $status 0 && is "$(grep -cE "^\[([01])\] line \1 [0-9]+$" "$OUT")" 4000'

run -n 2 sh -c 'echo "plain $BATON_RANK"'
check "without --prefix, output is passed through untouched" \
  eval 'contains "$OUT" "^plain 0$" && contains "$OUT" "^plain 1$"'

# ---- Failures -----------------------------------------------------------------------------------

run -n 4 sh -c 'if [ "$BATON_RANK" = 2 ]; then exit 3; fi; exec sleep 100'
check "a rank's exit status 3 becomes batonrun's" is "$status" 3
check "the failure is reported once, naming the rank" \
  eval 'is "$(grep -c "rank 2 .*status 3" "$ERR")" 1'
check "the other ranks (sleep 100) are stopped within seconds" faster_than 5000

run -n 3 sh -c 'if [ "$BATON_RANK" = 1 ]; then kill -KILL $$; fi; exec sleep 100'
check "a rank killed by SIGKILL: batonrun exits 137" is "$status" 137
check "the signal is reported" contains "$ERR" "rank 1 .*signal 9"
check "the other ranks are stopped within seconds" faster_than 5000

run -n 2 --kill-grace 1 sh -c \
  'if [ "$BATON_RANK" = 0 ]; then sleep 0.3; exit 4; fi; trap "" TERM; exec sleep 100'
check "a rank ignoring SIGTERM is killed after --kill-grace" \
  eval 'is $status 4 && [[ $elapsed_ms -ge 1200 ]] && faster_than 5000'

run -n 2 /nonexistent/batonrun-test-program
check "exec failure: exit 127 with 'cannot run'" \
  eval 'is $status 127 && contains "$ERR" "cannot run"'

run -n 2 --timeout 1 sleep 100
check "--timeout: exit 124 after about the timeout" \
  eval 'is $status 124 && [[ $elapsed_ms -ge 900 ]] && faster_than 5000'

TIMEFORMAT='%U %S'
cpu=$( { time "$BATONRUN" -n 2 sleep 1 >/dev/null 2>&1 </dev/null; } 2>&1)
check "waiting for ranks does not spin (CPU time < 0.3 s for a 1 s job)" \
  awk -v t="$cpu" 'BEGIN { split(t, a, " "); exit !(a[1] + a[2] < 0.3) }'

# ---- Signal forwarding ------------------------------------------------------------------------

# Each rank runs sleep in the background so its shell can run the trap at once, and kills that
# sleep in the trap so nothing outlives the test.
trapping_rank='sleep 100 & sleeper=$!
  trap "kill \$sleeper; echo \"got $1 \$BATON_RANK\"; exit 0" $1
  touch "$0/ready/ready.$BATON_RANK"
  wait'
run_and_signal TERM 3 -n 3 -p sh -c "$trapping_rank" "$TMP" TERM
check "SIGTERM to batonrun reaches every rank; they trap it and exit 0: status 0" \
  eval 'is $status 0 &&
        (for r in 0 1 2; do contains "$OUT" "^\[$r\] got TERM $r$" || exit 1; done)'

run_and_signal USR2 2 -n 2 sh -c "$trapping_rank" "$TMP" USR2
check "SIGUSR2 is forwarded too" \
  eval 'is $status 0 && contains "$OUT" "^got USR2 0$" && contains "$OUT" "^got USR2 1$"'

# SIGUSR1 asks batonrun for the flight recorders and is not forwarded: ranks that trap it say
# nothing, keep running, and end only at the SIGTERM that follows. They make no communicator, so
# batonrun says there is no table.
rm -rf "$TMP/ready"
mkdir "$TMP/ready"
"$BATONRUN" --timeout 15 -n 2 sh -c 'sleep 100 & sleeper=$!
  trap "kill \$sleeper; echo \"got USR1 \$BATON_RANK\"; exit 0" USR1
  trap "kill \$sleeper; echo \"got TERM \$BATON_RANK\"; exit 0" TERM
  touch "$0/ready/ready.$BATON_RANK"
  wait' "$TMP" >"$OUT" 2>"$ERR" </dev/null &
job=$!
for _ in $(seq 1 100); do
  [[ $(find "$TMP/ready" -name 'ready.*' | wc -l) -ge 2 ]] && break
  sleep 0.05
done
kill -USR1 "$job"
for _ in $(seq 1 100); do
  contains "$ERR" "no flight recorder" && break
  sleep 0.01
done
sleep 0.2
alive=no
kill -0 "$job" 2>/dev/null && alive=yes
kill -TERM "$job"
wait "$job"
status=$?
check "SIGUSR1 is not forwarded: batonrun answers it and the ranks go on until SIGTERM" \
  eval 'is $alive yes && is $status 0 && contains "$ERR" "^batonrun: SIGUSR1 after" &&
        contains "$ERR" "no flight recorder among the ranks" && ! contains "$OUT" "got USR1" &&
        contains "$OUT" "^got TERM 0$" && contains "$OUT" "^got TERM 1$"'

run_and_signal TERM 2 -n 2 sh -c 'touch "$0/ready/ready.$BATON_RANK"; exec sleep 100' "$TMP"
check "untrapped SIGTERM kills the ranks: batonrun exits 143 quickly" \
  eval 'is $status 143 && faster_than 5000'

# ---- --elastic and --replace ------------------------------------------------------------------

check "usage error: --replace without --elastic" usage_error --replace -n 2 true
check "usage error: --elastic with -H" usage_error --elastic -H localhost:2 true
check "usage error: --elastic with --world-size" \
  usage_error --elastic -n 2 --world-size 4 --root 127.0.0.1:29500 true

# Rank 1 kills itself; the others go on and finish.
suicide='if [ "$BATON_RANK" = 1 ]; then kill -9 $$; fi; sleep 0.3; echo "done $BATON_RANK"'
run -n 3 sh -c "$suicide"
check "without --elastic a rank killed stops the job (137)" \
  eval 'is $status 137 && contains "$ERR" "rank 1 (pid [0-9]*) killed by signal 9" &&
        contains "$ERR" "stopping the other ranks"'
run --elastic -n 3 sh -c "$suicide; echo \"\$BATON_ELASTIC_DIR\" > \"$TMP/dir.\$BATON_RANK\""
check "--elastic: the others finish, batonrun says who was lost and exits 0" \
  eval 'is $status 0 && contains "$OUT" "^done 0$" && contains "$OUT" "^done 2$" &&
        contains "$ERR" "rank 1 (pid [0-9]*) killed by signal 9 (Killed); the job goes on without it (--elastic)"'
check "--elastic: BATON_ELASTIC_DIR is one private directory, removed at the end" \
  eval 'is "$(cat "$TMP"/dir.* | sort -u | wc -l)" 1 && [[ $(cat "$TMP/dir.0") == */baton-elastic-* ]] &&
        [[ ! -e $(cat "$TMP/dir.0") ]]'
run --elastic -p -n 3 sh -c 'mode=$(stat -c %a "$BATON_ELASTIC_DIR"); echo "mode $mode"; sleep 0.2'
check "--elastic: the directory is 0700" eval 'is $status 0 && contains "$OUT" "^\[0\] mode 700$"'
run --elastic -n 3 sh -c 'if [ "$BATON_RANK" = 2 ]; then exit 3; fi; sleep 5'
check "--elastic: a rank that exits non-zero still stops the job with its status" \
  eval 'is $status 3 && contains "$ERR" "rank 2 (pid [0-9]*) exited with status 3; stopping" &&
        faster_than 4000'
run --elastic -n 2 sh -c 'kill -9 $$'
check "--elastic: every rank lost: the first one's status (137)" \
  eval 'is $status 137 && contains "$ERR" "no rank is left"'

# The replacement: same program, BATON_ELASTIC_JOIN=1, the lost rank's local slot, a new label.
rm -f "$TMP"/env.*
run --elastic --replace -p -n 3 sh -c 'if [ "$BATON_RANK" = 1 ]; then kill -9 $$; fi; sleep 0.3
  echo "$BATON_RANK ${BATON_ELASTIC_JOIN:-0} $BATON_LOCAL_RANK $BATON_WORLD_SIZE" > "$0/env.$BATON_RANK"' "$TMP"
check "--replace: a replacement starts as rank 3 in slot 1 with BATON_ELASTIC_JOIN=1" \
  eval 'is $status 0 && contains "$ERR" "starting rank 3 to replace it (--replace)" &&
        is "$(cat "$TMP/env.3")" "3 1 1 3" && is "$(cat "$TMP/env.0")" "0 0 0 3" &&
        is "$(cat "$TMP/env.2")" "2 0 2 3" && [[ ! -e $TMP/env.1 ]]'
run --elastic --replace -n 2 sh -c 'if [ "$BATON_RANK" != 0 ]; then kill -9 $$; fi; sleep 1'
check "--replace: at most -n replacements (a rank that always dies cannot loop)" \
  eval 'is $status 0 && is "$(grep -c "to replace it" "$ERR")" 2 &&
        contains "$ERR" "no replacement: --replace started 2 already"'
run_and_signal TERM 2 --elastic --replace -n 2 sh -c \
  'touch "$0/ready/ready.$BATON_RANK"; exec sleep 100' "$TMP"
check "--elastic: SIGTERM to batonrun still ends the job (143), nobody is replaced" \
  eval 'is $status 143 && ! contains "$ERR" "replace" && faster_than 5000'

echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
