#!/usr/bin/env bash
# Emulated RDMA between simulated hosts: HOSTS network namespaces
# (scripts/netns.sh) of RANKS_PER_HOST ranks each, BATON_IB_EMULATE=1 and
# BATON_TRANSPORT=ib, so every pair of hosts talks over the emulated
# device (or the creation fails) and the ranks of a host over shared
# memory. The emulation reaches across the namespaces through /dev/shm,
# which they share. all_reduce_perf checks every result; each rank's INFO
# line must count its peers of other hosts as RDMA peers and none as TCP;
# no emulated object may be left once the job ended. A second job does
# the same with registered buffers (-R 1) up to 64 MiB, where messages
# between hosts go in place: the INFO lines of the ranks that carry them
# must count some.
# Needs root; skips
# (exit 77) where namespaces cannot be made.
# Usage: tests/scripts/rdma_netns_test.sh BATONRUN ALL_REDUCE_PERF
set -u
batonrun=$1
perf=$2
HOSTS=${HOSTS:-3}
RANKS_PER_HOST=${RANKS_PER_HOST:-2}
tag="br$$"
netns="$(dirname "$0")/../../scripts/netns.sh"
# shellcheck source=tests/scripts/netns_jobs.sh
source "$(dirname "$0")/netns_jobs.sh"

trap '"$netns" down "$tag" "$HOSTS"' EXIT
if [[ $(id -u) -ne 0 ]] || ! "$netns" up "$tag" "$HOSTS" none >/dev/null; then
  echo "SKIP: cannot create network namespaces (needs root and iproute2)"
  exit 77
fi

world=$((HOSTS * RANKS_PER_HOST))
all_ok=1
# One job: the perf options after the run's name.
run_job() {
  local what=$1
  shift
  local port=$((20000 + ($$ + ${#what}) % 20000))
  logs=()
  pids=()
  BATON_TIMEOUT=60 BATON_IB_EMULATE=1 BATON_TRANSPORT=ib BATON_IB_QPS_PER_PEER=2 \
    BATON_DEBUG=INFO BATON_DEBUG_SUBSYS=INIT,NET \
    start_host_jobs "$tag" "$HOSTS" "$RANKS_PER_HOST" "$port" 240 "$batonrun" "$perf" "$@"
  local rc=0 pid
  for pid in "${pids[@]}"; do wait "$pid" || rc=$?; done

  local ok=1
  [[ $rc -eq 0 ]] || ok=0
  grep -q "Out of bounds values : 0 OK" "${logs[0]}" || ok=0
  local local_peers=$((RANKS_PER_HOST - 1))
  local remote_peers=$((world - RANKS_PER_HOST))
  local want="($local_peers over shared memory, $remote_peers over RDMA, 0 over TCP)"
  local counted
  counted=$(cat "${logs[@]}" | grep -c "$want")
  [[ $counted -eq $world ]] || ok=0
  # Ranks whose INFO lines count messages that went in place.
  local in_place=0 log
  for log in "${logs[@]}"; do
    grep -Eq "RDMA with rank [0-9]+: ([1-9][0-9]* messages sent|[0-9]+ messages sent and [1-9])" \
      "$log" && in_place=$((in_place + 1))
  done
  # (Which ranks carry traffic between hosts is the algorithm's choice.)
  [[ $what != registered || $in_place -gt 0 ]] || ok=0
  # The ranks' pids, from their log lines (host:pid:tid [rank] BATON ...);
  # other jobs on this machine may hold emulated objects of their own.
  local left=0 rank_pid
  while read -r rank_pid; do
    left=$((left + $(find /dev/shm -maxdepth 1 -name "baton-ibemu-$rank_pid-*" | wc -l)))
  done < <(cat "${logs[@]}" | grep " BATON " | cut -d: -f2 | sort -u)
  [[ $left -eq 0 ]] || ok=0
  local name="all_reduce_perf ($what buffers) over emulated RDMA: $HOSTS namespace hosts x"
  name+=" $RANKS_PER_HOST ranks ($counted of $world ranks: \"$want\"; $in_place with messages"
  name+=" in place; $left emulated objects left)"
  if [[ $ok -eq 1 ]]; then
    echo "ok - $name"
  else
    echo "not ok - $name (exit $rc)"
    for log in "${logs[@]}"; do tail -30 "$log"; done
    all_ok=0
  fi
  rm -f "${logs[@]}"
}
run_job plain -b 8 -e 16M -f 4 -n 2 -w 1
run_job registered -R 1 -b 1M -e 64M -f 4 -n 2 -w 1
[[ $all_ok -eq 1 ]]
