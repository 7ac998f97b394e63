#!/usr/bin/env bash
# A simulated cluster: HOSTS network namespaces joined by veth pairs to a
# bridge in a switch namespace, addresses in 10.77.0.0/24 only, no route
# out, links shaped with tbf. One batonrun per "host" starts RANKS_PER_HOST
# ranks, so ranks of a host talk over shared memory and hosts over TCP
# (the mixed case) with two TCP sockets per pair of hosts, and the perf
# binaries check every result. Needs root;
# skips (exit 77) where namespaces cannot be made.
# Usage: tests/scripts/netns_test.sh BATONRUN ALL_REDUCE_PERF [BROADCAST_PERF...]
set -u
batonrun=$1
shift
HOSTS=${HOSTS:-3}
RANKS_PER_HOST=${RANKS_PER_HOST:-2}
RATE=${RATE:-1gbit}
tag="bt$$"
netns="$(dirname "$0")/../../scripts/netns.sh"
# shellcheck source=tests/scripts/netns_jobs.sh
source "$(dirname "$0")/netns_jobs.sh"

# scripts/netns.sh makes the namespaces (host i: TAG-h<i>, eth0 = 10.77.0.(i+1)).
trap '"$netns" down "$tag" "$HOSTS"' EXIT
if [[ $(id -u) -ne 0 ]] || ! "$netns" up "$tag" "$HOSTS" "$RATE" >/dev/null; then
  echo "SKIP: cannot create network namespaces (needs root and iproute2)"
  exit 77
fi

passed=0
failed=0
port=$((20000 + $$ % 20000))
for bin in "$@"; do
  port=$((port + 1))
  logs=()
  pids=()
  BATON_TIMEOUT=60 BATON_NSOCKS_PERPEER=2 start_host_jobs "$tag" "$HOSTS" "$RANKS_PER_HOST" \
    "$port" 240 "$batonrun" "$bin" -b 8 -e 8M -f 4 -n 2 -w 1
  rc=0
  for pid in "${pids[@]}"; do wait "$pid" || rc=$?; done
  name="$(basename "$bin"): $HOSTS hosts x $RANKS_PER_HOST ranks"
  if [[ $rc -eq 0 ]] && grep -q "Out of bounds values : 0 OK" "${logs[0]}"; then
    echo "ok - $name"
    passed=$((passed + 1))
  else
    echo "not ok - $name (exit $rc)"
    for log in "${logs[@]}"; do tail -30 "$log"; done
    failed=$((failed + 1))
  fi
  [[ -n ${NETNS_VERBOSE:-} ]] && cat "${logs[0]}"
  rm -f "${logs[@]}"
done
# A host's link goes down under a running job (UNTIL_ERROR: a program that
# allreduces until an error). Nothing closes, so only BATON_TIMEOUT (3 s)
# ends the wait; the ranks of the other hosts must fail by then plus slack,
# and name the ranks of the cut host as the ones that do not answer.
if [[ -n ${UNTIL_ERROR:-} && -x ${UNTIL_ERROR:-} ]]; then
  port=$((port + 1))
  logs=()
  pids=()
  cut=$((HOSTS - 1))
  BATON_TIMEOUT=3 start_host_jobs "$tag" "$HOSTS" 1 "$port" 60 "$batonrun" "$UNTIL_ERROR" 30
  sleep 2
  ip -n "$tag-h$cut" link set eth0 down
  start=$(date +%s)
  for ((i = 0; i < cut; i++)); do wait "${pids[$i]}"; done
  elapsed=$(($(date +%s) - start))
  ok=1
  for ((i = 0; i < cut; i++)); do
    grep -q "rank $i: timed out" "${logs[$i]}" || ok=0
    grep -q "rank $cut (pid [0-9]* on [^)]*) does not answer" "${logs[$i]}" || ok=0
  done
  [[ $elapsed -le 20 ]] || ok=0
  name="link of host $cut down: the others fail in ${elapsed} s, naming rank $cut"
  if [[ $ok -eq 1 ]]; then
    echo "ok - $name"
    passed=$((passed + 1))
  else
    echo "not ok - $name"
    for log in "${logs[@]}"; do tail -5 "$log"; done
    failed=$((failed + 1))
  fi
  kill "${pids[$cut]}" 2>/dev/null
  wait "${pids[$cut]}" 2>/dev/null
  rm -f "${logs[@]}"
fi
echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
