#!/usr/bin/env bash
# batonrun's multi-host launch (-H, --hostfile, --launch-agent): ranks started on other "hosts"
# through an agent, the environment forwarded, output prefixed, and a failing rank, a dying host
# or a signal stopping the job everywhere with no process left behind.
#
# Always: usage errors, localhost ranks (started directly) and a local agent that ignores the
# host (the failure paths). As root: 4 simulated hosts in network namespaces (scripts/netns.sh,
# tag "ln<pid>"; the others use "bt<pid>" and "px<pid>"), where the agent runs the command in the
# namespace named by the host (node<i> or 10.77.0.<i+1>), as ssh would on a real cluster, and
# all_reduce_perf checks its results across them.
#
# Usage: tests/scripts/launch_test.sh BATONRUN ALL_REDUCE_PERF
# SPDX-License-Identifier: BSD-3-Clause
set -u
if [[ $# -ne 2 || ! -x $1 || ! -x $2 ]]; then
  echo "usage: $0 BATONRUN ALL_REDUCE_PERF" >&2
  exit 2
fi
BATONRUN=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
PERF=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
netns="$(cd "$(dirname "$0")/../../scripts" && pwd)/netns.sh"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/launch_test.XXXXXX")
tag="ln$$"
hosts=4
have_netns=0
cleanup() {
  [[ $have_netns -eq 1 ]] && "$netns" down "$tag" "$hosts"
  rm -rf "$TMP"
}
trap cleanup EXIT
unset BATON_ROOT BATON_UNIQUE_ID BATON_RANK BATON_WORLD_SIZE BATON_SOCKET_IFNAME
export BATON_TIMEOUT=30

passed=0
failed=0
status=0
elapsed=0
OUT=$TMP/out
ERR=$TMP/err
ok() { echo "ok - $1"; passed=$((passed + 1)); }
not_ok() {
  echo "not ok - $1 (exit $status, ${elapsed} s)"
  failed=$((failed + 1))
  sed 's/^/# stdout: /' "$OUT" | tail -25
  sed 's/^/# stderr: /' "$ERR" | tail -25
}
check() { # check DESCRIPTION COMMAND...
  local what=$1
  shift
  if "$@"; then ok "$what"; else not_ok "$what"; fi
}
# run [PREFIX-COMMAND...] -- BATONRUN-ARGS...: bounded by timeout(1); sets status and elapsed.
run() {
  local pre=()
  while [[ $1 != -- ]]; do pre+=("$1"); shift; done
  shift
  local start=$SECONDS
  timeout -k 5 50 "${pre[@]}" "$BATONRUN" "$@" >"$OUT" 2>"$ERR" </dev/null
  status=$?
  elapsed=$((SECONDS - start))
}
# Ranks write their pid to $TMP/pids; none may be alive once batonrun has returned. Nor may any
# host's batonrun.
no_leftovers() {
  local pid state left=0
  for pid in $(cat "$TMP"/pids 2>/dev/null); do
    # A zombie is dead: a rank whose host's batonrun was killed waits there for init to reap it.
    state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)
    [[ -n $state && $state != Z ]] && { echo "# rank pid $pid still runs ($state)"; left=1; }
  done
  if pgrep -f -- "$BATONRUN --remote-host" >/dev/null; then
    echo "# a host's batonrun still runs"
    left=1
  fi
  rm -f "$TMP"/pids
  [[ $left -eq 0 ]]
}
# A rank that records its pid, fails as $FAIL_RANK says, or else sleeps.
rank_script='echo $$ >> '"$TMP"'/pids
if [ "$BATON_RANK" = "${FAIL_RANK:-x}" ]; then sleep 1; [ "$FAIL_HOW" = kill ] && kill -KILL $$; exit 3; fi
exec sleep 40'

# ---- usage ----
run -- -H a:2,b:2 -n 5 true
check "-n larger than the slots is refused" \
  eval '[[ $status -eq 2 ]] && grep -q "do not fit the 4 slots" "$ERR"'
run -- -H a:2 --root a:1234 true
check "-H with --root is refused" eval '[[ $status -eq 2 ]] && grep -q "\-\-root" "$ERR"'
printf 'a slots=2\nb slots=x\n' >"$TMP/bad_hostfile"
run -- --hostfile "$TMP/bad_hostfile" true
check "a bad hostfile line is named" eval '[[ $status -eq 2 ]] && grep -q "line 2" "$ERR"'
run -- -H 'a:0' true
check "zero slots are refused" eval '[[ $status -eq 2 ]] && grep -q "invalid slots" "$ERR"'

# ---- localhost: started directly, no agent ----
run -- -H localhost:2,127.0.0.1:1 --launch-agent /nonexistent/agent -p -x LT_VAR=hi \
  sh -c 'echo "r=$BATON_RANK w=$BATON_WORLD_SIZE l=$BATON_LOCAL_RANK v=$LT_VAR"'
check "localhost ranks start without the agent, prefixed, -x forwarded" eval '[[ $status -eq 0 ]] &&
  grep -qx "\[0@localhost\] r=0 w=3 l=0 v=hi" "$OUT" &&
  grep -qx "\[1@localhost\] r=1 w=3 l=1 v=hi" "$OUT" &&
  grep -qx "\[2@127.0.0.1\] r=2 w=3 l=0 v=hi" "$OUT"'

# ---- a local agent ("ssh" to fake hosts that are this one) ----
cat >"$TMP/local_agent" <<'AGENT'
#!/bin/sh
# AGENT HOST COMMAND: COMMAND here, whatever HOST.
shift
exec sh -c "$*"
AGENT
chmod +x "$TMP/local_agent"
fail_tests() { # fail_tests AGENT HOSTS-ARG NAME: the failure paths through AGENT
  local agent=$1 hostarg=$2 name=$3
  run env FAIL_RANK=2 FAIL_HOW=exit -- $hostarg --launch-agent "$agent" -x FAIL_RANK -x FAIL_HOW \
    sh -c "$rank_script"
  check "$name: rank 2 exits 3: the job stops on every host, status 3" eval '[[ $status -eq 3 &&
    $elapsed -le 15 ]] && grep -q "rank 2 (pid [0-9]* on [a-z0-9.]*) exited with status 3" "$ERR" &&
    grep -q "stopping the job on the other hosts" "$ERR" && no_leftovers'
  run env FAIL_RANK=1 FAIL_HOW=kill -- $hostarg --launch-agent "$agent" -x FAIL_RANK -x FAIL_HOW \
    sh -c "$rank_script"
  check "$name: rank 1 killed: the job stops, status 137" eval '[[ $status -eq 137 &&
    $elapsed -le 15 ]] && grep -q "rank 1 .* killed by signal 9" "$ERR" && no_leftovers'
  run -- $hostarg --launch-agent "$agent" --timeout 2 sh -c "$rank_script"
  check "$name: --timeout stops every host, status 124" eval '[[ $status -eq 124 &&
    $elapsed -le 15 ]] && grep -q "timed out after 2 s" "$ERR" && no_leftovers'
  # A host's batonrun killed: its ranks die with it, and the launcher stops the others.
  (sleep 2 && pkill -KILL -f -- "$BATONRUN --remote-host [^ ]* -n [0-9]* --world-size [0-9]* --rank-offset 3 ") &
  run -- $hostarg --launch-agent "$agent" sh -c "$rank_script"
  wait
  check "$name: a host's batonrun killed: the job stops, status 137" eval '[[ $status -eq 137 &&
    $elapsed -le 15 ]] && grep -q "(rank 3) killed by signal 9" "$ERR" && no_leftovers'
  # Ctrl-C to the launching batonrun alone.
  (sleep 2 && pkill -INT -f -- "^$BATONRUN -H") &
  run -- $hostarg --launch-agent "$agent" sh -c "$rank_script"
  wait
  check "$name: SIGINT stops every host, status 130" eval '[[ $status -eq 130 &&
    $elapsed -le 15 ]] && grep -q "got signal 2" "$ERR" && no_leftovers'
}
fail_tests "$TMP/local_agent" "-H fake0:1,fake1:1,fake2:1,fake3:1" "local agent"
# SIGUSR1 to the launcher: every host's batonrun answers with its ranks' flight recorders (shell
# ranks have none, and say so), and the job goes on until --timeout.
(sleep 2 && pkill -USR1 -f -- "^$BATONRUN -H") &
run -- -H fake0:2,fake1:2 --launch-agent "$TMP/local_agent" --timeout 4 sh -c "$rank_script"
wait
check "local agent: SIGUSR1 reaches every host, the job goes on" eval '[[ $status -eq 124 ]] &&
  [[ $(grep -c "SIGUSR1 after .* (2 of 2 ranks running; the job goes on)" "$ERR") -eq 2 ]] &&
  no_leftovers'

# ---- 4 hosts in network namespaces ----
if [[ $(id -u) -ne 0 ]] || ! "$netns" up "$tag" "$hosts" none >/dev/null; then
  echo "# SKIP the network namespace part: cannot create network namespaces (needs root)"
else
  have_netns=1
  cat >"$TMP/netns_agent" <<AGENT
#!/bin/sh
# AGENT HOST COMMAND: COMMAND in HOST's namespace (node<i> or 10.77.0.<i+1> -> $tag-h<i>).
case \$1 in
  node[0-9]*) i=\${1#node} ;;
  10.77.0.*) i=\$((\${1##*.} - 1)) ;;
  *) echo "agent: no host \$1" >&2; exit 255 ;;
esac
shift
exec ip netns exec $tag-h\$i sh -c "\$*"
AGENT
  chmod +x "$TMP/netns_agent"
  in_h0=(ip netns exec "$tag-h0")
  run "${in_h0[@]}" env BATON_SOCKET_IFNAME=eth0 -- -H node0:1,node1:1,node2:1,node3:1 \
    --launch-agent "$TMP/netns_agent" -p -x LT_VAR="a b'c" \
    sh -c 'echo "ns=$(ip netns identify $$) rank=$BATON_RANK var=$LT_VAR if=$BATON_SOCKET_IFNAME"'
  each_in_its_namespace() {
    local i
    [[ $status -eq 0 ]] || return 1
    for ((i = 0; i < hosts; i++)); do
      grep -qxF "[$i@node$i] ns=$tag-h$i rank=$i var=a b'c if=eth0" "$OUT" || return 1
    done
  }
  check "4 hosts: each rank in its namespace, prefixed, -x and BATON_* forwarded" \
    each_in_its_namespace
  run "${in_h0[@]}" env BATON_SOCKET_IFNAME=eth0 -- -H node0:1,node1:1,node2:1,node3:1 \
    --launch-agent "$TMP/netns_agent" "$PERF" -b 8 -e 1M -f 8 -c 1 -n 2 -w 1
  check "4 hosts x 1 rank: all_reduce_perf, no wrong element" \
    eval '[[ $status -eq 0 ]] && grep -q "Out of bounds values : 0 OK" "$OUT"'
  # Hosts by address, 2 slots each, and no BATON_SOCKET_IFNAME: the rendezvous is served on the
  # interface of the route to the first other host.
  for ((i = 0; i < hosts; i++)); do echo "10.77.0.$((i + 1)) slots=2 # host $i"; done >"$TMP/hostfile"
  run "${in_h0[@]}" -- --hostfile "$TMP/hostfile" --launch-agent "$TMP/netns_agent" -p \
    "$PERF" -b 8 -e 1M -f 8 -c 1 -n 2 -w 1
  check "hostfile, 4 hosts x 2 slots: all_reduce_perf, no wrong element" \
    eval '[[ $status -eq 0 ]] && grep -q "\[0@10.77.0.1\] .*Out of bounds values : 0 OK" "$OUT" &&
      [[ $(grep -c "#  Rank  *[0-9]* Group" "$OUT") -eq 8 ]]'
  fail_tests "$TMP/netns_agent" "-H node0:1,node1:1,node2:1,node3:1" "namespaces"
fi
echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
