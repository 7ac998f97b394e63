#!/usr/bin/env bash
# A simulated cluster in network namespaces, for perf runs and tests.
#
#   scripts/netns.sh up TAG HOSTS RATE     make it
#   scripts/netns.sh down TAG HOSTS        remove it (also after a partial "up")
#
# "up" creates a switch namespace TAG-sw holding a bridge br0, and HOSTS host namespaces
# TAG-h0 .. TAG-h(HOSTS-1). Host i has eth0 = 10.77.0.(i+1)/24 (a veth whose peer TAG-v<i> is a
# port of br0) and lo up; there is no route out of 10.77.0.0/24. Each eth0 is shaped with tbf at
# RATE (tc syntax: 1gbit, 10gbit, 500mbit; "none" leaves the link unshaped), with a burst of at
# least 64 KiB: below that, tbf on veth cannot reach its rate (veth hands it whole GSO packets
# of up to 64 KiB). Run a command on host i with: ip netns exec TAG-h<i> COMMAND.
#
# Needs root. TAG must be unique per run (e.g. "bt$$") and at most 10 characters, so that the
# interface names TAG-v<i> fit Linux's 15. Exit status: 0 on success, 2 on bad arguments, 1 when
# a step fails ("up" then removes what it made).
set -u

usage() {
  echo "usage: $0 up TAG HOSTS RATE | $0 down TAG HOSTS" >&2
  exit 2
}

[[ $# -ge 3 ]] || usage
cmd=$1
tag=$2
hosts=$3
[[ $tag =~ ^[A-Za-z0-9_]{1,10}$ ]] || {
  echo "$0: TAG '$tag' must be 1 to 10 letters, digits or _" >&2
  exit 2
}
[[ $hosts =~ ^[0-9]+$ ]] && ((hosts >= 1 && hosts <= 250)) || {
  echo "$0: HOSTS '$hosts' must be a number from 1 to 250" >&2
  exit 2
}

down() {
  for ((i = 0; i < hosts; i++)); do ip netns del "$tag-h$i" 2>/dev/null; done
  # Deleting the switch namespace deletes the bridge and the remaining veth ends.
  ip netns del "$tag-sw" 2>/dev/null
  return 0
}

# tbf's burst: at least 64 KiB (see above), and at least one millisecond of the rate, so that
# the token bucket is not what limits faster links.
burst_for() {
  local rate=$1 bits
  bits=$(python3 - "$rate" <<'EOF'
import re, sys
m = re.fullmatch(r"([0-9.]+)\s*([kmgt]?)(bit|bps)?", sys.argv[1].lower())
if not m:
    sys.exit(1)
scale = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}[m.group(2)]
print(int(float(m.group(1)) * scale * (8 if m.group(3) == "bps" else 1)))
EOF
  ) || return 1
  local bytes=$((bits / 8 / 1000))
  ((bytes < 256 * 1024)) && bytes=$((256 * 1024))
  echo "$bytes"
}

up() {
  local rate=$1 burst=""
  if [[ $rate != none ]]; then
    burst=$(burst_for "$rate") || {
      echo "$0: RATE '$rate' is not a tc rate such as 1gbit, 10gbit or 500mbit" >&2
      exit 2
    }
  fi
  if [[ $(id -u) -ne 0 ]]; then
    echo "$0: needs root to create network namespaces" >&2
    exit 1
  fi
  if ip netns list | grep -qE "^$tag-(sw|h[0-9]+)( |$)"; then
    echo "$0: namespaces with tag '$tag' exist already (run: $0 down $tag N)" >&2
    exit 1
  fi
  trap 'echo "$0: failed at line $LINENO; removing $tag" >&2; down; exit 1' ERR
  set -E -e
  ip netns add "$tag-sw"
  ip -n "$tag-sw" link add br0 type bridge
  ip -n "$tag-sw" link set br0 up
  for ((i = 0; i < hosts; i++)); do
    local ns="$tag-h$i"
    ip netns add "$ns"
    ip link add "$tag-v$i" type veth peer name eth0 netns "$ns"
    ip link set "$tag-v$i" netns "$tag-sw"
    ip -n "$tag-sw" link set "$tag-v$i" master br0 up
    ip -n "$ns" addr add "10.77.0.$((i + 1))/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    if [[ $rate != none ]]; then
      ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" burst "$burst" latency 100ms
    fi
  done
  set +e +E
  trap - ERR
}

case $cmd in
  up)
    [[ $# -eq 4 ]] || usage
    up "$4"
    ;;
  down)
    [[ $# -eq 3 ]] || usage
    down
    ;;
  *) usage ;;
esac
