#!/usr/bin/env bash
# A simulated cluster: HOSTS network namespaces joined by veth pairs to a
# bridge in a switch namespace, addresses in 10.77.0.0/24 only, no route
# out, links shaped with tbf. One batonrun per "host" starts RANKS_PER_HOST
# ranks, so ranks of a host talk over shared memory and hosts over TCP
# (the mixed case) with two TCP sockets per pair of hosts, and the perf
# binaries check every result. Needs root;
# skips (exit 77) where namespaces cannot be made.
# Usage: tests/netns_test.sh BATONRUN ALL_REDUCE_PERF [BROADCAST_PERF...]
set -u
batonrun=$1
shift
HOSTS=${HOSTS:-3}
RANKS_PER_HOST=${RANKS_PER_HOST:-2}
RATE=${RATE:-1gbit}
tag="bt$$"
sw="$tag-sw"

cleanup() {
  for ((i = 0; i < HOSTS; i++)); do ip netns del "$tag-h$i" 2>/dev/null; done
  ip netns del "$sw" 2>/dev/null
}
trap cleanup EXIT

if [[ $(id -u) -ne 0 ]] || ! ip netns add "$sw" 2>/dev/null; then
  echo "SKIP: cannot create network namespaces (needs root and iproute2)"
  exit 77
fi
set -e
ip -n "$sw" link add br0 type bridge
ip -n "$sw" link set br0 up
for ((i = 0; i < HOSTS; i++)); do
  ns="$tag-h$i"
  ip netns add "$ns"
  ip link add "$tag-v$i" type veth peer name eth0 netns "$ns"
  ip link set "$tag-v$i" netns "$sw"
  ip -n "$sw" link set "$tag-v$i" master br0 up
  ip -n "$ns" addr add "10.77.0.$((i + 1))/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
  # tbf needs a burst of at least 64 KiB on veth to reach its rate.
  ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$RATE" burst 256kb latency 100ms
done
set +e

passed=0
failed=0
world=$((HOSTS * RANKS_PER_HOST))
port=$((20000 + $$ % 20000))
for bin in "$@"; do
  port=$((port + 1))
  logs=()
  pids=()
  for ((i = 0; i < HOSTS; i++)); do
    log=$(mktemp)
    logs+=("$log")
    BATON_SOCKET_IFNAME=eth0 BATON_TIMEOUT=60 BATON_NSOCKS_PERPEER=2 ip netns exec "$tag-h$i" timeout 240 \
      "$batonrun" -n "$RANKS_PER_HOST" --world-size "$world" \
      --rank-offset $((i * RANKS_PER_HOST)) --root "10.77.0.1:$port" \
      "$bin" -b 8 -e 8M -f 4 -n 2 -w 1 >"$log" 2>&1 &
    pids+=($!)
  done
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
echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
