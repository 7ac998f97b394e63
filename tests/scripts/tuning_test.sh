#!/usr/bin/env bash
# The tuning layer from the outside: baton-topo's JSON (machine facts and the
# algorithm table), the TUNING log, BATON_TOPO_DUMP_FILE and BATON_CALIBRATE's
# cache; and that the automatic choice runs what forcing it runs.
# Usage: tests/scripts/tuning_test.sh BATONRUN BATON_TOPO ALL_REDUCE_PERF TOPOLOGY_XML SELECT_AB
#        TUNE_PY
set -u
batonrun=$1
topo=$2
perf=$3
xml=$4
select_ab=$5
tune=$6
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# baton-topo --json on an XML export, 2 hosts of 4 ranks: the machine's facts
# and a table with every collective at every size from 8 B to 1 GiB.
if "$topo" --json --xml "$xml" --ranks 4 --hosts 2 --nic-mbps 1000 > "$tmp/topo.json"; then
  python3 - "$tmp/topo.json" <<'PY' || fail "baton-topo --json content"
import json, sys
t = json.load(open(sys.argv[1]))
for key in ("packages", "numa_nodes", "cores", "pus", "gpus", "nics", "algorithms", "cost"):
    assert key in t, key
assert t["packages"] == 2 and t["numa_nodes"] == 2 and t["cores"] == 16, t
# Its level-2 caches of 256 KiB keep a quarter of that hot.
assert t["cost"]["hot_reduce_bytes"] == 64 << 10, t["cost"]
for dev in t["nics"] + t["gpus"]:
    assert set(("name", "pci", "numa", "pci_switch", "host_bridge")) <= set(dev), dev
# One GPU, its paths to itself and to each NIC (the mlx5 shares its root port).
links = t["gpu_links"]
assert links["paths"] == [["self"]] and links["nvlink_mbytes"] == [[0]], links
assert len(links["to_nics"][0]) == len(t["nics"]) and links["to_nics"][0][0] == "pcie-switch", links
table = t["algorithms"]
colls = {"allreduce", "broadcast", "reduce", "allgather", "reducescatter", "alltoall",
         "gather", "scatter", "allgatherv", "reducescatterv", "alltoallv"}
assert {e["collective"] for e in table} == colls
sizes = sorted({e["bytes"] for e in table})
assert sizes[0] == 8 and sizes[-1] == 1 << 30 and len(sizes) == 28, sizes
for e in table:
    assert e["algorithm"] is not None and e["predicted_us"] > 0, e
    assert e["algorithm"] in e["candidates"], e
    assert min(e["candidates"].values()) == e["candidates"][e["algorithm"]] or \
        abs(min(e["candidates"].values()) / e["candidates"][e["algorithm"]] - 1) < 1e-3, e
small = [e for e in table if e["collective"] == "allreduce" and e["bytes"] == 8][0]
assert small["algorithm"] != "ring", small
for e in table:
    assert "rhd_switch" in e, e
    rhd = e["collective"] == "allreduce" and (e["algorithm"] == "rhd" or e["inter"] == "rhd")
    assert (e["rhd_switch"] is not None) == rhd, e
    assert e["rhd_switch"] is None or e["rhd_switch"] >= 16384, e
PY
else
  fail "baton-topo --json exited $?"
fi
BATON_ALGO=bogus "$topo" --ranks 2 > /dev/null 2>&1 && fail "baton-topo accepted BATON_ALGO=bogus"

# --one-machine: 4 hosts of one rank sharing the XML's 16 cores are not
# crowded, so their table is the separate hosts' one; on a 2-core machine
# (this one's figures, --xml of a bigger one would hide it) they are, and
# a network chunk then pays a wake-up: a 1 MiB ring allreduce takes no
# chunk below its 256 KiB block.
if "$topo" --json --xml "$xml" --ranks 1 --hosts 4 --nic-mbps 10000 > "$tmp/apart.json" &&
  "$topo" --json --xml "$xml" --ranks 1 --hosts 4 --nic-mbps 10000 --one-machine \
    > "$tmp/roomy.json" &&
  "$topo" --json --ranks 1 --hosts 4 --nic-mbps 10000 --one-machine > "$tmp/shared.json"; then
  python3 - "$tmp/apart.json" "$tmp/roomy.json" "$tmp/shared.json" "$(nproc)" <<'PY' ||
import json, sys
apart, roomy, shared = (json.load(open(f))["algorithms"] for f in sys.argv[1:4])
assert apart == roomy, "16 cores for 4 hosts: the table must not change"
if int(sys.argv[4]) < 4:  # this machine: 4 hosts crowd its cores
    e = [e for e in shared if e["collective"] == "allreduce" and e["bytes"] == 1 << 20][0]
    assert e["algorithm"] != "ring" or e["chunk"] >= 256 << 10, e
PY
    fail "baton-topo --one-machine"
else
  fail "baton-topo --one-machine exited $?"
fi
"$topo" --one-machine --bogus > /dev/null 2>&1 && fail "baton-topo accepted --bogus"

# The copy-in allreduce bypasses the table where ranks outnumber cores
# (BATON_COPY_IN=-1), unless BATON_ALGO chooses allreduce's algorithm;
# BATON_COPY_IN=1 takes it anywhere. Where rhd's power of two fits the
# cores (3 ranks on 2), rhd takes the sizes below FoldedRhdMaxBytes first.
cores=$(nproc)
floor_pow2() { local p=1; while [ $((p * 2)) -le "$1" ]; do p=$((p * 2)); done; echo "$p"; }
crowded=$((2 * $(floor_pow2 "$cores")))  # folded, still more ranks than cores
copy_in="ordinary buffers: allreduce from 16 KiB up takes the copy-in path"
"$topo" --ranks "$crowded" | grep -q "$copy_in (BATON_COPY_IN: ranks outnumber cores)" ||
  fail "baton-topo --ranks $crowded: no copy-in line"
"$topo" --ranks "$crowded" | grep -q "takes rhd, not copy-in" &&
  fail "baton-topo --ranks $crowded: an rhd line"
"$topo" --ranks "$cores" | grep -q "copy-in" && fail "baton-topo --ranks $cores: a copy-in line"
BATON_ALGO=allreduce:ring "$topo" --ranks "$crowded" | grep -q "copy-in" &&
  fail "baton-topo with BATON_ALGO=allreduce:ring: a copy-in line"
one_more=$((cores + 1))
if [ "$(floor_pow2 "$one_more")" -le "$cores" ] && "$topo" | grep -q "level-3 caches"; then
  out=$("$topo" --ranks "$one_more")
  echo "$out" | grep -q "allreduce below [0-9]* KiB takes rhd, not copy-in or the model's choice" ||
    fail "baton-topo --ranks $one_more: no rhd line"
  below=$(echo "$out" | sed -n 's/.*allreduce below \([0-9]*\) KiB takes rhd.*/\1/p')
  echo "$out" | grep -q "ordinary buffers: allreduce from $below KiB up takes the copy-in path" ||
    fail "baton-topo --ranks $one_more: copy-in does not start where rhd ends ($below KiB)"
  BATON_ALGO=allreduce:ring "$topo" --ranks "$one_more" | grep -q "takes rhd" &&
    fail "baton-topo with BATON_ALGO=allreduce:ring: an rhd line"
fi
BATON_COPY_IN=1 "$topo" --ranks "$cores" | grep -q "$copy_in (BATON_COPY_IN=1)" ||
  fail "baton-topo with BATON_COPY_IN=1: no copy-in line"

# Registered buffers take their path from 64 KiB where ranks outnumber cores,
# from 32 KiB with a core per rank, or from BATON_REGISTERED_MIN_BYTES.
registered="registered buffers: collectives but alltoall from"
"$topo" --ranks $((cores + 1)) | grep -q "$registered 64 KiB .*(ranks outnumber cores)" ||
  fail "baton-topo --ranks $((cores + 1)): no 64 KiB registered line"
"$topo" --ranks "$cores" | grep -q "$registered 32 KiB .*(a core per rank)" ||
  fail "baton-topo --ranks $cores: no 32 KiB registered line"
BATON_REGISTERED_MIN_BYTES=1M "$topo" --ranks $((cores + 1)) |
  grep -q "$registered 1024 KiB .*(BATON_REGISTERED_MIN_BYTES)" ||
  fail "baton-topo with BATON_REGISTERED_MIN_BYTES=1M: no 1024 KiB registered line"

# The TUNING table on rank 0 (BATON_DEBUG_SUBSYS alone implies INFO), and the
# dump file.
BATON_DEBUG_SUBSYS=TUNING BATON_TOPO_DUMP_FILE="$tmp/dump.json" \
  "$batonrun" -n 2 "$perf" -y 1 -b 8 -e 8 -n 2 -w 1 > "$tmp/tuning.log" 2>&1 ||
  fail "run with BATON_DEBUG_SUBSYS=TUNING"
grep -q "TUNING allreduce 8 B: ring .* us, rhd .* us, tree .* us, hier .* us -> " "$tmp/tuning.log" ||
  fail "no TUNING allreduce line: $(head -5 "$tmp/tuning.log")"
grep -q "TUNING cost figures (defaults" "$tmp/tuning.log" || fail "no cost figures line"
grep -Eq "TUNING cost figures .*; reductions in cache up to [0-9]+ KiB;" "$tmp/tuning.log" ||
  fail "no in-cache bound in the cost figures"
# The ranks' level-2 caches set it: those of the machine BATON_TOPO_FILE
# describes (256 KiB, so 64 KiB) when set.
BATON_TOPO_FILE="$xml" BATON_DEBUG_SUBSYS=TUNING \
  "$batonrun" -n 2 "$perf" -y 1 -b 8 -e 8 -n 2 -w 1 > "$tmp/l2.log" 2>&1 ||
  fail "run with BATON_TOPO_FILE"
grep -q "TUNING cost figures .*; reductions in cache up to 64 KiB;" "$tmp/l2.log" ||
  fail "BATON_TOPO_FILE's level-2 caches not in the cost figures: $(grep 'cost figures' "$tmp/l2.log")"
# (Its value, for 2 ranks with a core each the in-cache crossover, is
# tests/unit/rhd_switch_test.cc's.)
grep -Eq "TUNING rhd allreduce \(float32\) switches to Rabenseifner at [0-9]+ B, .* \(the cost model\)" \
  "$tmp/tuning.log" || fail "no rhd switch line"

# BATON_RHD_SWITCH forces the rhd allreduce's variant, also under
# BATON_ALGO=rhd, on either side of the model's switch; the results are
# checked (-c 1) on 3 ranks (folded) around 16 KiB.
for sw in 1 1G; do
  want=$([[ $sw == 1 ]] && echo rabenseifner || echo doubling)
  BATON_ALGO=rhd BATON_RHD_SWITCH=$sw BATON_DEBUG_SUBSYS=TUNING \
    "$batonrun" -n 3 "$perf" -y 1 -b 8K -e 32K -f 2 -n 3 -w 1 -c 1 > "$tmp/rhd$sw.log" 2>&1 ||
    fail "BATON_RHD_SWITCH=$sw run failed: $(tail -3 "$tmp/rhd$sw.log")"
  grep -q "TUNING allreduce 16384 B: .* -> rhd $want" "$tmp/rhd$sw.log" ||
    fail "BATON_RHD_SWITCH=$sw: 16 KiB not $want"
  grep -q "switches to Rabenseifner at $([[ $sw == 1 ]] && echo 1 || echo 1073741824) B.*(BATON_RHD_SWITCH)" \
    "$tmp/rhd$sw.log" || fail "BATON_RHD_SWITCH=$sw not in the TUNING log"
  awk '/^ +[0-9]+ +[0-9]+ +float/ { rows++; if ($9 != 0 || $13 != 0) bad++ }
       END { exit !(rows == 3 && bad == 0) }' "$tmp/rhd$sw.log" ||
    fail "BATON_RHD_SWITCH=$sw: wrong results or missing rows"
done
python3 - "$tmp/dump.json" <<'PY' || fail "BATON_TOPO_DUMP_FILE content"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["nranks"] == 2 and len(d["hosts"]) == 1 and len(d["hosts"][0]["ranks"]) == 2, d
assert d["cost"]["source"] == "defaults" and len(d["algorithms"]) == 11 * 28
PY

# BATON_CALIBRATE: measured once, then read from the cache, on 2, 3 and 4
# ranks of this host and 3 hosts of one rank over TCP on loopback. The pairs
# measure one at a time while the other ranks wait, so their exchanges must
# not take collective numbers (with more than one pair, creation failed with
# "collective mismatch ... internal exchange").
calibrated() {  # NAME RANKS HOSTS COMMAND...: every rank calibrates, then reads the cache
  local name=$1 ranks=$2 hosts=$3
  shift 3
  for run in 1 2; do
    BATON_CALIBRATE=1 BATON_CALIBRATION_CACHE="$tmp/cache-$name" BATON_DEBUG=INFO \
      BATON_DEBUG_SUBSYS=TUNING "$@" > "$tmp/cal-$name-$run.log" 2>&1 ||
      fail "calibrated run $run of $name: $(grep -m1 -i 'mismatch\|failed' "$tmp/cal-$name-$run.log")"
  done
  local measured cached files
  measured=$(grep -c "calibration: calibrated" "$tmp/cal-$name-1.log")
  cached=$(grep -c "calibration: calibration cache" "$tmp/cal-$name-2.log")
  files=$(ls "$tmp/cache-$name"/calibration-*.txt 2> /dev/null | wc -l)
  [ "$measured" = "$ranks" ] || fail "$name: $measured of $ranks ranks calibrated"
  [ "$cached" = "$ranks" ] || fail "$name: $cached of $ranks ranks read the cache"
  [ "$files" = "$hosts" ] || fail "$name: $files cache files for $hosts hosts"
  grep -q "TUNING cost figures (calibrat" "$tmp/cal-$name-2.log" ||
    fail "$name: cost figures not calibrated"
  cat "$tmp"/cal-"$name"-*.log | grep -E "^ +[0-9]+ +[0-9]+ +float" |
    awk '$9 != 0 || $13 != 0 {bad=1} END {exit bad}' || fail "wrong results in $name"
}
for n in 2 3 4; do
  calibrated "shm$n" "$n" 1 "$batonrun" -n "$n" "$perf" -y 1 -b 8 -e 64K -f 8 -n 2 -w 1
done
lo_hosts() {  # 3 simulated hosts of one rank, TCP over loopback
  local port pids=() rc=0
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  for h in 0 1 2; do
    BATON_HOSTID="cal-h$h" BATON_TRANSPORT=tcp BATON_SOCKET_IFNAME=lo "$batonrun" -n 1 \
      --bind-to none --world-size 3 --rank-offset "$h" --root "127.0.0.1:$port" \
      "$perf" -y 1 -b 8 -e 64K -f 8 -n 2 -w 1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  return $rc
}
calibrated lo3 3 3 lo_hosts

# The automatic choice runs exactly what BATON_ALGO set to it runs: the same
# algorithm, chunk and inter-host stage on every rank at every size, and the
# same connections (the timings are in docs/tuning.md; tests do not time).
calls() {  # the per-call TRACE lines of a run: "rank collective: N bytes with ..."
  sed -nE 's/.*\[([0-9]+)\] BATON TRACE [^ ]+ (allreduce: [0-9]+ bytes with .*)/\1 \2/p' "$1" | sort
}
run_traced() {  # LOG BATON_ALGO perf-flags...
  local log=$1 algo=$2
  shift 2
  BATON_ALGO=$algo BATON_DEBUG=TRACE BATON_DEBUG_SUBSYS=COLL,INIT \
    "$batonrun" -n 4 "$perf" -y 1 -w 1 -n 2 -c 1 "$@" > "$log" 2>&1 || fail "traced run BATON_ALGO=$algo $*"
}
run_traced "$tmp/auto.log" "" -b 8 -e 4M -f 8
calls "$tmp/auto.log" > "$tmp/auto.calls"
[[ -s $tmp/auto.calls ]] || fail "no per-call TRACE lines: $(head -3 "$tmp/auto.log")"
for algo in $(awk '{print $6}' "$tmp/auto.calls" | sort -u); do
  run_traced "$tmp/forced-$algo.log" "allreduce:$algo" -b 8 -e 4M -f 8
  diff <(awk -v a="$algo" '$6 == a' "$tmp/auto.calls") \
    <(calls "$tmp/forced-$algo.log" | awk -v sizes="$(awk -v a="$algo" '$6 == a {print $3}' \
      "$tmp/auto.calls" | sort -u | tr '\n' ' ')" 'BEGIN {n = split(sizes, s, " "); for (i = 1; i <= n; i++) keep[s[i]] = 1} $3 in keep') \
    > "$tmp/calls.diff" || fail "BATON_ALGO=allreduce:$algo ran other calls than auto: $(head -5 "$tmp/calls.diff")"
done
first=$(awk '$3 == 8 {print $6; exit}' "$tmp/auto.calls")
run_traced "$tmp/auto8.log" "" -b 8 -e 8
run_traced "$tmp/forced8.log" "$first" -b 8 -e 8
connections() { grep -o "rank [0-9]* at destroy: .*" "$1" | sort; }
[[ -n $(connections "$tmp/auto8.log") ]] || fail "no connection counts at destroy"
diff <(connections "$tmp/auto8.log") <(connections "$tmp/forced8.log") > "$tmp/conn.diff" ||
  fail "BATON_ALGO=$first opened other connections than auto: $(cat "$tmp/conn.diff")"

# perf/select_ab: every variant in the same processes, the automatic choice read from its table.
"$batonrun" -n 3 "$select_ab" -b 8 -e 4K -f 8 -r 2 -t 0.001 -J "$tmp/ab.jsonl" > "$tmp/ab.log" 2>&1 ||
  fail "select_ab: $(tail -3 "$tmp/ab.log")"
python3 - "$tmp/ab.jsonl" <<'PY' || fail "select_ab's JSON: $(cat "$tmp/ab.jsonl")"
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
assert [r["bytes"] for r in rows] == [8, 64, 512, 4096], rows
for r in rows:
    assert r["ranks"] == 3 and r["chose"] in ("ring", "rhd", "tree", "hier"), r
    assert all(r[v] > 0 for v in ("auto", "ring", "rhd", "tree")), r
PY
"$batonrun" -n 2 "$select_ab" -v rhd > /dev/null 2>&1 && fail "select_ab accepted -v without auto first"

# perf/tune.py on simulated hosts over loopback TCP (no namespaces): one quick sweep.
python3 "$tune" --build "$(dirname "$(dirname "$perf")")" --configs lo2 --sizes 8,4K \
  --algorithms rhd --reps 1 --out "$tmp/tune" > "$tmp/tune.log" 2>&1 ||
  fail "tune.py --configs lo2: $(tail -5 "$tmp/tune.log")"
grep -q "^| 4K | .* | rhd | " "$tmp/tune/tune.md" || fail "tune.py's table: $(cat "$tmp/tune/tune.md")"

if [[ $failures -gt 0 ]]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "tuning: all checks passed"
