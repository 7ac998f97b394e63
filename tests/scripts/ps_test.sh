#!/usr/bin/env bash
# baton-train's sharded parameter server end to end (--mode ps --ps-shards K, docs/trainer.md):
# - synchronous: 3 workers with K = 1, 2 and 3 servers give the same parameters bit for bit (the
#   per-element arithmetic is the unsharded server's; the unsharded server is checked against the
#   data-parallel modes by tests/scripts/trainer_test.sh), with replicas identical at every
#   epoch's end;
# - the bytes each rank sends per step, reported in --json, are the layout's: a worker sends the
#   whole gradient, a server W/K of the model, so the busiest rank sends K times less;
# - asynchronous with 2 servers learns the synthetic set and reports staleness;
# - checkpoint after 2 epochs + resume == 3 epochs with 2 servers (momentum and EMA are
#   gathered from the servers);
# - too few ranks for the servers, or --ps-shards without --mode ps: exit 2 on every rank.
# Usage: tests/scripts/ps_test.sh BATONRUN BATON_TRAIN
set -u
source "$(dirname "$0")/trainer_lib.sh" "$1" "$2"

final_hash() { sed -n 's/^final parameter hash: //p' "$work/log"; }
json_field() { python3 -c "import json,sys; print(json.loads(open(sys.argv[1]).read().splitlines()[int(sys.argv[3])])[sys.argv[2]])" "$@"; }

# ---- Synchronous: K servers, the same bits -----------------------------------------------------
syn=(--synthetic 1500 --epochs 2 --mode ps --ema 0.9 --print-hash)
declare -A hash
for k in 1 2 3; do
  ranks=$((k + 3))
  if run $ranks "${syn[@]}" --ps-shards $k --check-replicas --json "$work/k$k.json"; then
    hash[$k]=$(final_hash)
  else
    bad "--ps-shards $k: run failed"
    hash[$k]=failed$k
  fi
done
if [[ -n ${hash[1]} && ${hash[1]} == "${hash[2]}" && ${hash[1]} == "${hash[3]}" ]]; then
  ok "3 workers with 1, 2 and 3 servers: the same parameters bit for bit (${hash[1]}), replicas identical"
else
  bad "sharded != unsharded: ${hash[1]} ${hash[2]} ${hash[3]}"
fi

# Bytes per rank and step: n parameters of 4 bytes; a worker sends 4n, server s sends 3 x its range.
params=$(sed -n 's/.*model 784-512-256-10 (\([0-9]*\) parameters).*/\1/p' "$work/log")
if python3 - "$work" "$params" <<'PY'; then ok "bytes sent per rank and step as the layout says (K = 1, 2, 3)"; else bad "bytes per rank and step"; fi
import json, sys
work, n = sys.argv[1], int(sys.argv[2])
workers = 3
for k in (1, 2, 3):
    rec = json.loads(open(f"{work}/k{k}.json").read().splitlines()[-1])
    shards = [(n * (s + 1)) // k - (n * s) // k for s in range(k)]
    sent = [4.0 * workers * size for size in shards] + [4.0 * n] * workers
    mean, busiest = sum(sent) / len(sent), max(sent)
    got_mean, got_max = rec["sent_bytes_per_rank_step"], rec["sent_bytes_max_rank_step"]
    print(f"K={k}: mean {got_mean:.0f} (expected {mean:.0f}), busiest {got_max:.0f} (expected {busiest:.0f})")
    assert abs(got_mean - mean) <= 1 and abs(got_max - busiest) <= 1
PY

# ---- Asynchronous, 2 servers ------------------------------------------------------------------
if run 5 --synthetic 3000 --epochs 3 --mode ps --async --ps-shards 2 --json "$work/a.json"; then
  acc=$(json_field "$work/a.json" test_acc -1)
  stale=$(json_field "$work/a.json" staleness_mean -1)
  sent=$(json_field "$work/a.json" sent_bytes_max_rank_step -1)
  if python3 -c "import sys; sys.exit(0 if float('$acc') >= 0.9 and float('$stale') > 0 and float('$sent') > 0 else 1)"; then
    ok "--async --ps-shards 2 learns: test_acc $acc, staleness mean $stale, busiest rank $sent bytes/step"
  else
    bad "--async --ps-shards 2: test_acc $acc staleness $stale sent $sent"
  fi
else
  bad "--async --ps-shards 2: run failed"
fi

# ---- Checkpoint and resume with 2 servers --------------------------------------------------------
ck=(--synthetic 1200 --epochs 3 --warmup 5 --ema 0.9 --mode ps --ps-shards 2)
run 5 "${ck[@]}" --print-hash
a=$(final_hash)
run 5 "${ck[@]}" --stop-after 2 --checkpoint "$work/ck"
run 5 "${ck[@]}" --print-hash --resume "$work/ck"
b=$(final_hash)
if [[ -n $a && $a == "$b" ]] && grep -q "resumed after epoch 2" "$work/log"; then
  ok "--ps-shards 2: checkpoint after 2 epochs + resume == 3 epochs ($a)"
else
  bad "--ps-shards 2 resume: $a != $b"
fi

# ---- Usage errors: exit 2 on every rank ----------------------------------------------------------
expect_usage "more servers than ranks allow" "--mode ps with 3 server(s) needs at least 4 ranks" 3 \
  --mode ps --ps-shards 3
expect_usage "--ps-shards without --mode ps" "--ps-shards needs --mode ps" 2 --ps-shards 2

trainer_summary
