#!/usr/bin/env bash
# BATON_TRACE_FILE end to end (docs/tracing.md): a known perf run's merged timeline (one track
# per rank, the calls it made with their counts, seq numbers in order, events nested), the rank
# files gone after the merge, a full buffer reported on the track, `batonrun --merge-trace`
# (and its refusal of a truncated file), and baton-train --trace: trainer phases and Baton's
# calls on every rank's track. The checks are tests/scripts/check_trace.py's.
# Usage: tests/scripts/trace_test.sh BATONRUN ALL_REDUCE_PERF BATON_TRAIN
set -u
batonrun=$(realpath "$1")
perf=$(realpath "$2")
train=$(realpath "$3")
check="python3 $(dirname "$0")/check_trace.py"
export BATON_SOCKET_IFNAME=lo BATON_TIMEOUT=${BATON_TIMEOUT:-60}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passed=0
failed=0
ok() { echo "ok - $1"; passed=$((passed + 1)); }
bad() { echo "not ok - $1"; failed=$((failed + 1)); [[ -f $work/log ]] && tail -20 "$work/log"; }

# 8 B .. 1 KiB of float: counts 2 .. 256, each size 1 warm-up + 5 timed calls.
counts=2,4,8,16,32,64,128,256
if BATON_TRACE_FILE="$work/perf.json" timeout 60 "$batonrun" -n 3 "$perf" -b 8 -e 1K -f 2 \
    -n 5 -w 1 >"$work/log" 2>&1 &&
  $check "$work/perf.json" --ranks 3 --allreduce-counts $counts --calls-each 6 >>"$work/log" 2>&1
then
  ok "a known perf run's merged timeline"
else
  bad "a known perf run's merged timeline"
fi
if ls "$work"/perf.rank* >/dev/null 2>&1; then
  bad "the rank files are removed after the merge"
else
  ok "the rank files are removed after the merge"
fi
if grep -q "timeline of 3 ranks" "$work/log"; then
  ok "batonrun says where the timeline is"
else
  bad "batonrun says where the timeline is"
fi

# A relative path given through -x, and a buffer of 10 calls: the rest are counted.
if (cd "$work" && timeout 60 "$batonrun" -n 2 -x BATON_TRACE_FILE=small.json \
      -x BATON_TRACE_EVENTS=10 "$perf" -b 8 -e 64 -f 2 -n 5 -w 1 >"$work/log" 2>&1) &&
  python3 - "$work/small.json" >>"$work/log" 2>&1 <<'PY'
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
per_rank = [sum(1 for e in events if e.get("ph") == "X" and e["pid"] == r) for r in (0, 1)]
labels = [e["args"]["labels"] for e in events if e.get("name") == "process_labels"]
assert per_rank == [10, 10], per_rank
assert len(labels) == 2 and all("not traced" in l for l in labels), labels
PY
then
  ok "a full buffer keeps the first calls and reports the rest"
else
  bad "a full buffer keeps the first calls and reports the rest"
fi

if "$batonrun" --merge-trace "$work/again.json" "$work/perf.json" >"$work/log" 2>&1 &&
  $check "$work/again.json" --ranks 3 --allreduce-counts $counts --calls-each 6 >>"$work/log" 2>&1
then
  ok "--merge-trace"
else
  bad "--merge-trace"
fi
head -c 300 "$work/perf.json" >"$work/truncated.json"
if "$batonrun" --merge-trace "$work/bad.json" "$work/truncated.json" >"$work/log" 2>&1; then
  bad "--merge-trace refuses a truncated file (exit 0)"
elif ! grep -q "does not end" "$work/log" || [[ -e $work/bad.json ]]; then
  bad "--merge-trace refuses a truncated file (message, or a file written)"
else
  ok "--merge-trace refuses a truncated file"
fi

# The trainer sets BATON_TRACE_FILE itself; its ranks tell batonrun (BATON_TRACE_LIST).
if timeout 120 "$batonrun" -n 4 "$train" --epochs 1 --synthetic 4096 --max-steps 5 \
    --no-progress --trace "$work/train.json" >"$work/log" 2>&1 &&
  $check "$work/train.json" --ranks 4 --trainer-steps 5 >>"$work/log" 2>&1
then
  ok "baton-train --trace: trainer phases and Baton calls per rank"
else
  bad "baton-train --trace: trainer phases and Baton calls per rank"
fi

# Off: no file at all.
if BATON_TRACE_FILE= timeout 60 "$batonrun" -n 2 "$perf" -b 8 -e 8 -n 2 -w 1 >"$work/log" 2>&1 &&
  [[ -z $(ls "$work" | grep -v -e '^perf.json$' -e '^small.json$' -e '^again.json$' \
    -e '^train.json$' -e '^truncated.json$' -e '^log$') ]]; then
  ok "no file without BATON_TRACE_FILE"
else
  bad "no file without BATON_TRACE_FILE"
fi

echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
