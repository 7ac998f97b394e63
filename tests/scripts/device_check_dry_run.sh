#!/usr/bin/env bash
# scripts/device_check.sh's dry run on this build (docs/cuda.md): device_bundle.sh packs the
# build's binaries and the libraries they need, device_check.sh with BATON_DEVICE_DRY_RUN=1
# unpacks them, resolves every library from the bundle and glibc alone in an empty environment,
# starts every binary, sees the CUDA tests skip for want of a GPU and prints each step's command.
#
#   device_check_dry_run.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

BUILD=$build "$root/scripts/device_bundle.sh" "$tmp/bundle"
status=0
BUNDLE=$tmp/bundle BATON_DEVICE_DRY_RUN=1 DEVICE_WORK=$tmp/work \
  "$root/scripts/device_check.sh" "$tmp/results" >/dev/null || status=$?
cat "$tmp/results/summary.txt"
[ "$status" = 0 ] || { echo "FAIL: device_check.sh exited $status"; exit 1; }
grep -q "^dry-run ok" "$tmp/results/summary.txt" || { echo "FAIL: no 'dry-run ok'"; exit 1; }
# Every step the GPU machine runs was reached and printed.
for step in "unit cuda:" "kernels cuda_kernels_bench:" "trainer baton-train:" \
            "perf all_reduce_perf -n 8:" "perf all_gather_perf -n 2:"; do
  grep -q "^$step would run" "$tmp/results/summary.txt" || { echo "FAIL: step '$step' not reached"; exit 1; }
done
# The bundle is one folder under the size the GPU machine's transfer allows.
size=$(du -sm "$tmp/bundle" | cut -f1)
echo "bundle: ${size} MiB"
