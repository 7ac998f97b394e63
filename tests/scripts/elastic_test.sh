#!/usr/bin/env bash
# baton-train --elastic end to end (docs/trainer.md, "Elastic training"), under batonrun --elastic:
# - 4 ranks, rank 2 killed with SIGKILL from outside in the middle of an epoch: the other three
#   finish every epoch, the job exits 0, test accuracy >= 0.85, and the log names the lost rank
#   (from batonCommGetFailedRanks) and the step; on shared memory and on TCP;
# - with --replace, a replacement joins (batonCommGrow) and the job ends with 4 ranks again; shm
#   and TCP;
# - the sharded parameter server (2 servers, 3 workers) loses worker rank 3 and takes its
#   replacement; a lost server stops the job with the reason;
# - two ranks lost at once: both left out and the job goes on, or (killed apart) an error, never a
#   hang;
# - --elastic with a mode that cannot shrink, and a replacement without --elastic: every rank
#   exits 2 with the reason, before any training.
# Every run is bounded (batonrun --timeout, BATON_TIMEOUT).
# Usage: tests/scripts/elastic_test.sh BATONRUN BATON_TRAIN
set -u
export BATON_TIMEOUT=${BATON_TIMEOUT:-20}
source "$(dirname "$0")/trainer_lib.sh" "$1" "$2"

# killed_run "RANKS TO KILL" BATONRUN-ARGS -- TRAINER-ARGS: runs the job in the background, waits
# for epoch 1's line, then (after KILL_DELAY s) kills the ranks named (batonrun's BATON_RANK) with
# SIGKILL from outside; sets $rc (batonrun's status) and $took (seconds). Output in $work/log,
# the JSON lines in $work/run.json.
killed_run() {
  local victims=$1
  shift
  local launcher=()
  while [[ $1 != -- ]]; do
    launcher+=("$1")
    shift
  done
  shift
  # Gone before the start, so that the previous run's lines cannot be taken for this one's.
  rm -f "$work/run.json" "$work/log"
  local start=$SECONDS
  "$batonrun" --timeout 200 "${launcher[@]}" "$train" --no-progress --blas-threads 1 --elastic \
    --json "$work/run.json" "$@" >"$work/log" 2>&1 </dev/null &
  local job=$! tries
  for ((tries = 0; tries < 1200; tries++)); do
    grep -q "^epoch 1/" "$work/log" 2>/dev/null && break
    kill -0 "$job" 2>/dev/null || break
    sleep 0.05
  done
  sleep "${KILL_DELAY:-0.2}"
  local child victim pids=()
  for child in $(pgrep -P "$job"); do
    for victim in $victims; do
      if { tr '\0' '\n' <"/proc/$child/environ"; } 2>/dev/null | grep -qx "BATON_RANK=$victim"; then
        pids+=("$child")
      fi
    done
  done
  # One kill for all of them: as close to at once as a shell gets.
  [[ ${#pids[@]} -gt 0 ]] && kill -9 "${pids[@]}"
  wait "$job"
  rc=$?
  took=$((SECONDS - start))
}

# checks NAME LOST WORLD_AFTER: the job went on and ended as it should; LOST the rank named,
# WORLD_AFTER the ranks of the last epoch.
checks() {
  local name=$1 lost=$2 world_after=$3
  if [[ $rc -ne 0 ]]; then
    bad "$name: exit $rc"
    return
  fi
  if ! grep -q "batonrun: rank $lost (pid [0-9]*) killed by signal 9" "$work/log"; then
    bad "$name: batonrun does not report rank $lost killed"
    return
  fi
  if verdict=$(python3 - "$work/log" "$work/run.json" "$lost" "$world_after" <<'PY'
import json, re, sys
log, records, lost, world_after = open(sys.argv[1]).read(), [r for r in map(json.loads, open(sys.argv[2])) if "epoch" in r], int(sys.argv[3]), int(sys.argv[4])
m = re.search(r"^elastic: lost (?:worker )?rank (\d+) of \d+ during step (\d+) \(epoch (\d+)\)", log, re.M)
assert m, "no 'elastic: lost rank' line"
assert int(m.group(1)) == lost, f"the log names rank {m.group(1)}, not {lost}"
step, epoch = int(m.group(2)), int(m.group(3))
assert [r["epoch"] for r in records] == [1, 2, 3], f"epochs reported: {[r['epoch'] for r in records]}"
ends = {r["epoch"]: r["step"] for r in records}
ends[0] = 0
# Mid-epoch: at least one step of that epoch before the loss and one after it.
assert ends[epoch - 1] < step - 1 < ends[epoch], f"step {step} is not inside epoch {epoch} (steps {ends[epoch - 1]}..{ends[epoch]})"
assert records[-1]["ranks"] == world_after, f"the last epoch had {records[-1]['ranks']} ranks"
acc = records[-1]["test_acc"]
assert acc >= 0.85, f"test_acc {acc}"
print(f"rank {lost} lost during step {step} (epoch {epoch}, steps {ends[epoch - 1] + 1}-{ends[epoch]}), "
      f"{records[-1]['ranks']} ranks at the end, test_acc {acc}")
PY
  ); then
    ok "$name: $verdict (${took} s)"
  else
    bad "$name: $verdict"
  fi
}

sync_args=(--synthetic 24000 --epochs 3)
for transport in shm tcp; do
  if [[ $transport == tcp ]]; then export BATON_TRANSPORT=tcp; else unset BATON_TRANSPORT; fi
  killed_run 2 --elastic -n 4 -- "${sync_args[@]}"
  checks "$transport: rank 2 of 4 killed mid-epoch, 3 go on" 2 3
  killed_run 2 --elastic --replace -n 4 -- "${sync_args[@]}"
  checks "$transport: rank 2 killed and replaced, 4 again" 2 4
  if [[ $rc -eq 0 ]] && ! grep -q "^elastic: 1 rank(s) joined after step" "$work/log"; then
    bad "$transport: no 'joined' line"
  fi
done
unset BATON_TRANSPORT

# The sharded parameter server: ranks 0-1 serve, 2-4 work.
ps_args=(--synthetic 24000 --epochs 3 --mode ps --ps-shards 2 --ema 0.9)
killed_run 3 --elastic --replace -n 5 -- "${ps_args[@]}"
checks "ps, 2 servers: worker rank 3 killed and replaced" 3 5
killed_run 1 --elastic -n 5 -- "${ps_args[@]}"
if [[ $rc -ne 0 && $rc -ne 124 ]] && grep -q "lost rank 1, a parameter server" "$work/log"; then
  ok "ps: a lost server stops the job with the reason (exit $rc, ${took} s)"
else
  bad "ps: lost server: exit $rc"
fi

# Two ranks at once: batonCommGetFailedRanks lists both on every survivor once both processes are
# gone, and the two survivors go on without them; when a survivor reads the list between the two
# deaths (the kills are milliseconds apart) it shrinks without one, and the shrink or the next step
# fails: then an error within the timeouts, never a hang.
killed_run "1 2" --elastic -n 4 -- "${sync_args[@]}"
if [[ $rc -eq 0 ]] && grep -q "^elastic: lost ranks 1, 2 of 4 during step" "$work/log"; then
  ok "two ranks lost at once: both left out together, 2 go on (${took} s)"
elif [[ $rc -ne 0 && $rc -ne 124 && $took -lt $((4 * BATON_TIMEOUT + 30)) ]]; then
  ok "two ranks lost at once: the job stops with an error, no hang (exit $rc, ${took} s)"
else
  bad "two ranks lost at once: exit $rc after ${took} s"
fi

# ---- Bad input: exit 2 on every rank, before training -----------------------------------------
expect_usage "--elastic --mode tensor" "--elastic with --mode tensor: each rank holds a part of the model" 4 \
  --elastic --mode tensor
expect_usage "--elastic --mode pipeline" "--elastic with --mode pipeline: each rank holds a part" 2 \
  --elastic --mode pipeline
expect_usage "--elastic with --dp 2 --pp 2" "--elastic with --mode hybrid: each rank holds a part" 4 \
  --elastic --dp 2 --pp 2
expect_usage "--elastic --mode ps --async" "--elastic with --mode ps-async: asynchronous workers" 3 \
  --elastic --mode ps --async
expect_usage "--elastic --mode local" "--elastic with --mode local: the ranks' parameters differ" 2 \
  --elastic --mode local
BATON_ELASTIC_JOIN=1 BATON_RANK=4 timeout 60 "$train" --no-progress --synthetic 500 >"$work/log" 2>&1
rc=$?
if [[ $rc -eq 2 ]] && grep -q "rank 4: error: started to replace a lost rank (batonrun --replace) but without --elastic" "$work/log"; then
  ok "a replacement without --elastic exits 2 with the reason"
else
  bad "replacement without --elastic: exit $rc"
fi

trainer_summary
