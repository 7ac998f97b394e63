# Sourced by the perf test scripts: runs one perf binary and judges its
# output (exit 0, "Out of bounds values : 0 OK", #wrong 0 in every row).
passed=0
failed=0

# perf_check NAME COMMAND...: runs COMMAND (bounded by timeout 300) and
# prints an ok / not ok line.
perf_check() {
  local name=$1
  shift
  local out rc
  out=$(timeout 300 "$@" 2>&1)
  rc=$?
  if [[ $rc -eq 0 ]] && grep -q "Out of bounds values : 0 OK" <<<"$out" &&
     ! awk '/^ +[0-9]/ { if ($9 != 0 || ($13 != 0 && $13 != "N/A")) bad = 1 } END { exit !bad }' <<<"$out"; then
    echo "ok - $name"
    passed=$((passed + 1))
  else
    echo "not ok - $name (exit $rc)"
    echo "$out" | tail -40
    failed=$((failed + 1))
  fi
}

# Prints the closing line and returns the scripts' exit status.
perf_summary() {
  echo "$passed passed, $failed failed"
  [[ $failed -eq 0 ]]
}
