#!/usr/bin/env bash
# Builds Baton with AddressSanitizer + UndefinedBehaviorSanitizer (meson's
# b_sanitize) and runs a representative subset of the tests under them: the
# multi-process suites of failures, mismatches, shrink, soak, the API,
# registered buffers, the copy-in allreduce, the Python packages' registered
# pool, and the unit tests of the transports and control frames. The harness
# starts ranks by exec in sanitizer builds (tests/common/mp_harness.cc).
#
#   scripts/sanitize.sh [BUILD_DIR] [address,undefined|thread]
#
# BUILD_DIR defaults to build-asan. Exits non-zero on any sanitizer report
# or test failure. hwloc's PCI plugin (libpciaccess) leaks when it looks at
# this machine; it is turned off here (HWLOC_COMPONENTS=-pci), as it is not
# Baton's to fix.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build-asan}
sanitizers=${2:-address,undefined}
if [ ! -f "$out/build.ninja" ]; then
  meson setup "$out" -Db_sanitize="$sanitizers" -Db_lundef=false -Dcuda=disabled -Dperf=false \
    -Dbuildtype=debugoptimized > "$out.setup.log" 2>&1 || { cat "$out.setup.log"; exit 1; }
fi
suites=(api mismatch shrink failure soak)
targets=(tests/unit_test tests/copy_in_test tests/registered_test tests/registered_pool_test)
for s in "${suites[@]}"; do targets+=("tests/${s}_test"); done
ninja -C "$out" "${targets[@]}" > "$out.build.log" 2>&1 || { tail -30 "$out.build.log"; exit 1; }

export HWLOC_COMPONENTS=-pci
export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export TSAN_OPTIONS=halt_on_error=1
failures=0
run() {
  local name=$1
  shift
  local log=$out/$name.log
  local start=$SECONDS
  if "$@" > "$log" 2>&1 &&
    ! grep -qE "ERROR: (Address|Leak)Sanitizer|WARNING: ThreadSanitizer|runtime error:" "$log"; then
    echo "sanitize: $name ok ($((SECONDS - start)) s): $(grep -E '^\[  PASSED' "$log" | tail -1)"
  else
    echo "sanitize: $name FAILED; log: $log"
    grep -E "ERROR: |WARNING: ThreadSanitizer|runtime error:|^\[  FAILED" "$log" | head -10 || true
    failures=$((failures + 1))
  fi
}
run unit "$out/tests/unit_test" \
  --gtest_filter='Descriptor*:ControlFrame*:CallCheck*:Tcp*:ShmPair*:ShmHotPieces*:LineTransferGauge*:ShmNames*:Machine*:Binding*:Settings*'
for s in "${suites[@]}"; do run "$s" "$out/tests/${s}_test"; done
# The Python packages' registered pool: many threads, a forked child.
run registered_pool "$out/tests/registered_pool_test"
# Registered buffers, and the copy-in allreduce up to 4 ranks; their logs
# tell each rank's path.
run registered env BATON_DEBUG=INFO BATON_DEBUG_SUBSYS=COLL "$out/tests/registered_test"
run copy_in env BATON_DEBUG=INFO BATON_DEBUG_SUBSYS=COLL "$out/tests/copy_in_test" \
  --gtest_filter='-Ranks/CopyIn.EveryTypeAndOp/[4-9]'
exit $((failures > 0))
