#!/usr/bin/env bash
# The perf binaries' flags mean what they mean in nccl-tests (perf/README.md,
# "Flags"), on 2 and 4 ranks: -y 1 (synchronous calls), -S 1 (a timestamp
# column), -a, -z 3, -u, -d f8e4m3/f8e5m2/all, -o mulsum/premulsum/all checked
# against the scaled reference, -R 1 (registered buffers) checked, -R 2 and
# the GPU-only flags printing their
# line, an old "-S null" failing loudly, and hypercube_perf on power-of-two
# rank counts (and a clear failure on 3 ranks), and perf/first_calls.
# Usage: tests/scripts/perf_flags_test.sh BATONRUN PERF_DIR
set -u
batonrun=$1
dir=$2
source "$(dirname "$0")/perf_check.sh"

# expect NAME PATTERN COMMAND...: COMMAND's output (stdout and stderr) matches
# the extended regular expression PATTERN; the exit status is not judged.
expect() {
  local name=$1 pattern=$2
  shift 2
  local out
  out=$(timeout 300 "$@" 2>&1)
  if grep -Eq -- "$pattern" <<<"$out"; then
    echo "ok - $name"
    passed=$((passed + 1))
  else
    echo "not ok - $name (no line matching '$pattern')"
    echo "$out" | tail -30
    failed=$((failed + 1))
  fi
}

ar=("$batonrun" -n 2 "$dir/all_reduce_perf")
small=(-b 8 -e 4K -f 8 -n 2 -w 1 -c 1)
for type in f8e4m3 f8e5m2 bfloat16 int8; do
  perf_check "all_reduce_perf -y 1 -S 1 -a 1 -d $type -o premulsum" \
    "${ar[@]}" "${small[@]}" -y 1 -S 1 -a 1 -d "$type" -o premulsum
done
perf_check "all_reduce_perf -o all -d all -z 3 -u 3 -a 3, 4 ranks" \
  "$batonrun" -n 4 "$dir/all_reduce_perf" "${small[@]}" -o all -d all -z 3 -u 3 -a 3
perf_check "reduce_scatter_perf -o mulsum -d all -y 1, 4 ranks" \
  "$batonrun" -n 4 "$dir/reduce_scatter_perf" -b 64 -e 64K -f 32 -n 2 -w 1 -o mulsum -d all -y 1
perf_check "reduce_perf -o mulsum -r all -z 1 -a 0, 3 ranks" \
  "$batonrun" -n 3 "$dir/reduce_perf" "${small[@]}" -o mulsum -r all -z 1 -a 0
perf_check "broadcast_perf -z 2 -a 2 -T 60 -s null" \
  "${ar[@]/all_reduce_perf/broadcast_perf}" "${small[@]}" -z 2 -a 2 -T 60 -s null

# The rows carry mulsum in the redop column and a timestamp after the in-place
# #wrong; the header names the column.
expect "-o premulsum prints mulsum rows" '^ +8 +8 +f8e4m3 +mulsum +-1 ' \
  "${ar[@]}" -b 8 -e 8 -n 1 -w 1 -d f8e4m3 -o premulsum
expect "-S 1 prints a timestamp column" \
  ' 0 +[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}$' \
  "${ar[@]}" -b 8 -e 8 -n 1 -w 1 -S 1
expect "-S 1 names the timestamp column" '#wrong +timestamp$' "${ar[@]}" -b 8 -e 8 -n 1 -S 1
expect "-R 2 says symmetric registration is local" \
  '^# Option -R 2: symmetric registration is local registration' \
  "${ar[@]}" -b 8 -e 8 -n 1 -R 2
for ranks in 2 4; do
  perf_check "all_reduce_perf -R 1 (registered buffers), $ranks ranks" \
    "$batonrun" -n "$ranks" "$dir/all_reduce_perf" -b 8 -e 4M -f 8 -n 2 -w 1 -R 1
  perf_check "reduce_scatter_perf -R 1 -y 1, $ranks ranks" \
    "$batonrun" -n "$ranks" "$dir/reduce_scatter_perf" -b 64 -e 1M -f 16 -n 2 -w 1 -R 1 -y 1
done
expect "-G 1 says it is ignored" '^# Option -G 1: CUDA graphs are ignored' \
  "${ar[@]}" -b 8 -e 8 -n 1 -G 1
expect "-z 3 prints its mode" 'wait and barrier after each outer iteration' \
  "${ar[@]}" -b 8 -e 8 -n 1 -z 3
expect "-S null fails and points to -y 1" "invalid -S 'null'.*-y 1" \
  "${ar[@]}" -b 8 -e 8 -n 1 -S null

for ranks in 1 2 4; do
  perf_check "hypercube_perf -d all, $ranks ranks" \
    "$batonrun" -n "$ranks" "$dir/hypercube_perf" -b 8 -e 256K -f 8 -n 2 -w 1 -d all
done
perf_check "hypercube_perf -y 1 -m 2 -u 1, 4 ranks over TCP" \
  env BATON_TRANSPORT=tcp "$batonrun" -n 4 "$dir/hypercube_perf" -b 1K -e 1M -f 32 -n 2 -y 1 -m 2 -u 1
expect "hypercube_perf refuses 3 ranks" 'hypercube_perf: 3 ranks is not a power of two' \
  "$batonrun" -n 3 "$dir/hypercube_perf" -b 8 -e 1K -n 1
# first_calls (a communicator's first calls one by one): buckets, the 200-call mean, the slow
# calls, and its own check of the sum; 0 bytes; a size that is not whole floats refused.
for ranks in 1 3; do
  expect "first_calls, $ranks ranks" '^mean of calls 3-202: [0-9.]+ us' \
    "$batonrun" -n "$ranks" "$dir/first_calls" -b 4K -n 300
done
expect "first_calls prints its slow calls" '^calls over 3x \(index:us\):' \
  "$batonrun" -n 2 "$dir/first_calls" -b 0 -n 250
expect "first_calls refuses a size that is not whole floats" '-b a multiple of 4' \
  "$dir/first_calls" -b 6 -n 10
perf_summary
