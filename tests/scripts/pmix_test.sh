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

if [[ $failures -gt 0 ]]; then
  cat "$tmp/out.txt"
  echo "$failures failure(s)"
  exit 1
fi
echo "pmix: all checks passed"
