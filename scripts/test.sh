#!/usr/bin/env bash
# Builds Baton if needed, then runs the whole test suite, ending with a
# "N passed, M failed" line. Multi-process tests run one at a time: they
# already oversubscribe the cores.
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh || exit 1
meson test -C build --print-errorlogs --num-processes 1 "$@"
rc=$?
python3 - <<'PY'
import json
passed = failed = skipped = 0
for line in open("build/meson-logs/testlog.json"):
    r = json.loads(line).get("result")
    if r in ("OK", "EXPECTEDFAIL"): passed += 1
    elif r == "SKIP": skipped += 1
    else: failed += 1
print(f"{passed} passed, {failed} failed" + (f", {skipped} skipped" if skipped else ""))
PY
exit $rc
