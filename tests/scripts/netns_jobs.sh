# shellcheck shell=bash
# Sourced by the tests that run jobs on the simulated hosts of
# scripts/netns.sh (host i: namespace TAG-h<i>, eth0 = 10.77.0.(i+1)).
#
#   start_host_jobs TAG HOSTS PER_HOST PORT LIMIT_S BATONRUN COMMAND...
#
# starts one batonrun per host, in the background and each under
# `timeout LIMIT_S`: host i runs ranks i*PER_HOST .. (i+1)*PER_HOST-1 of
# HOSTS*PER_HOST, with the rendezvous on host 0 (10.77.0.1:PORT) and
# BATON_SOCKET_IFNAME=eth0 beside the caller's environment (variables set
# before the call reach the ranks). Appends each job's log file to the
# array `logs` and its pid to `pids`.
start_host_jobs() {
  local tag=$1 hosts=$2 per_host=$3 port=$4 limit=$5 batonrun=$6 i log
  shift 6
  for ((i = 0; i < hosts; i++)); do
    log=$(mktemp)
    logs+=("$log")
    BATON_SOCKET_IFNAME=eth0 ip netns exec "$tag-h$i" timeout "$limit" \
      "$batonrun" -n "$per_host" --world-size $((hosts * per_host)) \
      --rank-offset $((i * per_host)) --root "10.77.0.1:$port" "$@" >"$log" 2>&1 &
    pids+=($!)
  done
}
