#!/usr/bin/env bash
# Open MPI's mpirun starts a perf binary with no BATON_ROOT and no unique id:
# the ranks find each other through mpirun's PMIx server (rank 0 publishes
# the unique id), and the table comes out with no wrong element.
#
#   pmix_test.sh MPIRUN PERF_BINARY
set -uo pipefail
mpirun=$1
perf=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

unset BATON_ROOT BATON_UNIQUE_ID BATON_RANK BATON_WORLD_SIZE MASTER_ADDR MASTER_PORT
args=(--allow-run-as-root --oversubscribe -np 3)
BATON_DEBUG=INFO BATON_DEBUG_SUBSYS=INIT timeout 120 "$mpirun" "${args[@]}" "$perf" \
  -b 8 -e 1M -f 8 -c 1 -n 3 -w 1 -y 1 > "$tmp/out.txt" 2>&1 || fail "mpirun exited $?"
rows=$(grep -cE "^ +[0-9]+ +[0-9]+ +float" "$tmp/out.txt")
[[ $rows -eq 6 ]] || fail "expected 6 rows of results, got $rows"
grep -E "^ +[0-9]+ +[0-9]+ +float" "$tmp/out.txt" | awk '$9 != 0 || $13 != 0 {bad = 1} END {exit bad}' ||
  fail "wrong elements"
grep -q "Out of bounds values : 0 OK" "$tmp/out.txt" || fail "no '0 OK' summary"
n=$(grep -c "from PMIx" "$tmp/out.txt")
[[ $n -eq 3 ]] || fail "expected 3 ranks to say they came from PMIx, got $n"

# Across 4 simulated hosts (network namespaces, scripts/netns.sh): mpirun in
# host 0 starts the others' daemons through an rsh agent that enters their
# namespace with a hostname of its own, as ssh would; the ranks meet through
# PMIx and talk TCP over the hosts' eth0. Needs root; skipped otherwise.
netns="$(dirname "$0")/../../scripts/netns.sh"
tag="px$$"
hosts=4
if [[ $(id -u) -eq 0 ]] && "$netns" up "$tag" "$hosts" 1gbit > /dev/null 2>&1; then
  trap '"$netns" down "$tag" "$hosts" > /dev/null 2>&1; rm -rf "$tmp"' EXIT
  cat > "$tmp/agent.sh" <<AGENT
#!/bin/sh
# Open MPI plm_rsh_agent: "agent [options] HOST COMMAND..." runs COMMAND in
# HOST's namespace (10.77.0.I+1 -> $tag-hI).
while [ "\${1#-}" != "\$1" ]; do shift; done
host=\$1; shift
i=\$(( \${host##*.} - 1 ))
exec ip netns exec $tag-h\$i unshare --uts /bin/sh -c "hostname h\$i && \$*"
AGENT
  chmod +x "$tmp/agent.sh"
  for ((i = 0; i < hosts; i++)); do echo "10.77.0.$((i + 1)) slots=1"; done > "$tmp/hostfile"
  BATON_SOCKET_IFNAME=eth0 BATON_DEBUG=INFO BATON_DEBUG_SUBSYS=INIT timeout 180 \
    ip netns exec "$tag-h0" "$mpirun" --allow-run-as-root --oversubscribe -np "$hosts" \
    --hostfile "$tmp/hostfile" --mca plm_rsh_agent "$tmp/agent.sh" --mca plm_rsh_no_tree_spawn 1 \
    --mca btl tcp,self --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 \
    -x BATON_SOCKET_IFNAME -x BATON_DEBUG -x BATON_DEBUG_SUBSYS -x BATON_TIMEOUT \
    "$perf" -b 8 -e 1M -f 8 -c 1 -n 3 -w 1 -y 1 > "$tmp/netns.txt" 2>&1 ||
    fail "mpirun across $hosts namespaces exited $?"
  rows=$(grep -cE "^ +[0-9]+ +[0-9]+ +float" "$tmp/netns.txt")
  [[ $rows -eq 6 ]] || fail "across namespaces: expected 6 rows of results, got $rows"
  grep -E "^ +[0-9]+ +[0-9]+ +float" "$tmp/netns.txt" |
    awk '$9 != 0 || $13 != 0 {bad = 1} END {exit bad}' || fail "across namespaces: wrong elements"
  n=$(grep -c "from PMIx" "$tmp/netns.txt")
  [[ $n -eq $hosts ]] || fail "across namespaces: expected $hosts ranks from PMIx, got $n"
  if [[ $failures -gt 0 ]]; then cat "$tmp/netns.txt"; else echo "pmix: $hosts hosts in namespaces ok"; fi
else
  echo "pmix: network namespaces unavailable (needs root): the 4-host case is skipped"
fi

if [[ $failures -gt 0 ]]; then
  cat "$tmp/out.txt"
  echo "$failures failure(s)"
  exit 1
fi
echo "pmix: all checks passed"
