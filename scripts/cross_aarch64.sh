#!/usr/bin/env bash
# Baton on aarch64 without an Arm machine (docs/arm.md): installs Debian's
# cross compiler, qemu-user and the arm64 -dev packages (multiarch) when they
# are missing, cross-builds libbaton, batonrun, the perf binaries and the
# single-process tests with cross/aarch64-linux-gnu.ini, and runs them under
# qemu-user: the kernel tests on a NEON-only CPU (Neoverse N1, Graviton 2's
# core) and on an SVE/SVE2 one (qemu's max), the unit tests, and
# `batonrun -n 2 all_reduce_perf` on shared memory and on TCP, which must
# report 0 wrong values.
#
#   scripts/cross_aarch64.sh [--install-only | --no-install] [BUILD_DIR]
#
# BUILD_DIR defaults to build-aarch64. JOBS (default: the cores) bounds
# ninja and the test runs side by side. The default run leaves out the
# slowest, architecture-neutral cases (listed below and printed);
# AARCH64_FULL=1 runs every test whole (about 6 min more under qemu here).
# Exits 0 when everything passed, 1 when something failed.
set -euo pipefail
cd "$(dirname "$0")/.."

# What the cross build needs, as multiarch arm64 packages beside the amd64
# ones (Multi-Arch: same, so apt may upgrade an amd64 twin to the same
# version). Not libpmix-dev:arm64 (it conflicts with the amd64 one that
# Open MPI needs; PMIx is optional) nor OpenBLAS/zlib (the trainer is skipped).
CROSS_PACKAGES=(g++-aarch64-linux-gnu qemu-user-static pkg-config
                libhwloc-dev:arm64 libssl-dev:arm64 libibverbs-dev:arm64
                libgtest-dev:arm64 libgmock-dev:arm64 libhwy-dev:arm64)

install_missing() {
  local missing=() p
  for p in "${CROSS_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
      missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  echo "cross_aarch64: installing ${missing[*]}"
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  # :arm64 packages need the architecture added and its package lists read.
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    $sudo dpkg --add-architecture arm64
  fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
}

mode=run
case "${1:-}" in
  --install-only) install_missing; exit 0 ;;
  --no-install) mode=run-only; shift ;;
esac
[ "$mode" = run-only ] || install_missing
build=${1:-build-aarch64}
njobs=${JOBS:-$(nproc)}
full=${AARCH64_FULL:-0}

now() { printf '%s' "$EPOCHREALTIME"; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.0f", b - a }'; }

# ---- build ----
t0=$(now)
if [ ! -f "$build/build.ninja" ]; then
  # The Python package, Open MPI / Gloo peers, CUDA and the trainer are not
  # cross-built (python/, perf/peers/ and the options say why).
  if ! out=$(meson setup "$build" --cross-file cross/aarch64-linux-gnu.ini --buildtype=release \
    -Dcuda=disabled 2>&1); then
    echo "$out"
    exit 1
  fi
fi
perf_names=(all_reduce all_gather alltoall broadcast reduce reduce_scatter sendrecv gather
            scatter all_gather_v alltoallv hypercube)
targets=(src/batonrun tests/kernels_test tests/cuda_host_test tests/unit_test)
for p in "${perf_names[@]}"; do targets+=("perf/${p}_perf"); done
mkdir -p "$build/meson-logs"
if ! ninja -C "$build" -j "$njobs" "${targets[@]}" >"$build/meson-logs/cross-build.txt" 2>&1; then
  tail -40 "$build/meson-logs/cross-build.txt"
  echo "cross_aarch64: the aarch64 build failed"
  exit 1
fi
# As scripts/setup.sh: a warning in the aarch64 build is a failure too.
if grep -n "warning:" "$build/meson-logs/cross-build.txt"; then
  echo "cross_aarch64: the aarch64 build printed warnings (above)"
  exit 1
fi
echo "cross_aarch64: built libbaton, batonrun, ${#perf_names[@]} perf binaries and 3 test" \
  "programs for aarch64 in $build ($(since "$t0") s)"

# ---- runs under qemu-user ----
# QEMU_CPU picks the emulated core: neoverse-n1 has NEON (ASIMD) and no SVE
# and 64-byte lines; max has SVE, SVE2 and the rest. qemu-user runs the
# programs a process execs only when binfmt_misc knows aarch64, so batonrun
# starts its ranks as `qemu-aarch64-static PROGRAM` (an x86-64 binary the
# kernel runs either way).
qemu=(qemu-aarch64-static)
neon=neoverse-n1
sve=max
logs="$build/meson-logs/aarch64"
rm -rf "$logs"
mkdir -p "$logs"
export BATON_SOCKET_IFNAME=lo BATON_TIMEOUT=60

# The default run's exclusions: the same loops as the tests that stay, at
# sizes (1M+ elements, hundreds to thousands of simulated ranks) that cost
# minutes under emulation and exercise no other instruction. Each Highway
# level runs on the CPU that has it and nowhere else: the NEON level and the
# level-free tests on the NEON CPU, SVE and SVE2 each on the SVE CPU; the
# portable level's sweeps and the streaming-store variants (the same loops
# with other stores) ran on x86 already.
kernels_neon_filter='-*LargeCount*:*StreamingStores*:*AllShapes/*_portable'
kernels_neon_filter+=':*MatchesPortableCoreBitwise/*_portable'
kernels_sve_filter='*_sve-*LargeCount*:*StreamingStores*'
kernels_sve2_filter='*_sve2-*LargeCount*:*StreamingStores*'
unit_filter='-ScheduleTest.RingAllGatherAndReduceScatter:ScheduleTest.RingAllReduceAtThousandRanks'
unit_filter+=':TreeTest.AllAlgorithmsMatchReferenceUpTo64Ranks:TreeTest.DepthIsLogarithmic'
unit_filter+=':TreeTest.AllAlgorithmsMatchReferenceAtLargeRankCounts'
unit_filter+=':ReduceScatterVTest.MatchesReference:AllGatherVTest.MatchesReference'
unit_filter+=':RhdAllGatherTest.MatchesReference:RhdReduceScatterTest.MatchesReference'
unit_filter+=':RhdAllReduceTest.Int32SumMatchesReference'
unit_filter+=':PlanTest.HierarchicalIsLogarithmicWithBoundedFanIn:IpcPlanTest.EveryRankCountCountAndRoot'
# Under SVE too: what depends on the CPU beyond the kernels (counters,
# spin waits, cache lines, atomics in shared memory, sockets, OpenSSL).
unit_sve_filter='TraceRecorder*:TraceFile*:ShmPair*:TcpChannel*:Sockets*:Handshake*:Rdma*'
if [ "$full" = 1 ]; then
  kernels_neon_filter='*' kernels_sve_filter='*_sve' kernels_sve2_filter='*_sve2' unit_filter='*'
fi

names=()
declare -A step_cpu step_kind
# step NAME CPU KIND COMMAND...: runs COMMAND in the background (at most
# $njobs at once), its output in $logs/NAME.log, its status and seconds in
# $logs/NAME.rc.
step() {
  local name=$1 cpu=$2 kind=$3
  shift 3
  names+=("$name")
  step_cpu[$name]=$cpu
  step_kind[$name]=$kind
  while (($(jobs -rp | wc -l) >= njobs)); do wait -n || true; done
  (
    start=$(now)
    rc=0
    QEMU_CPU=$cpu timeout 900 "$@" >"$logs/$name.log" 2>&1 || rc=$?
    echo "$rc $(since "$start")" >"$logs/$name.rc"
  ) &
}

echo "cross_aarch64: running under qemu-user ($("${qemu[0]}" --version | head -1))"
t1=$(now)
step kernels_neon "$neon" gtest "${qemu[@]}" "$build/tests/kernels_test" \
  --gtest_filter="$kernels_neon_filter"
step kernels_sve "$sve" gtest "${qemu[@]}" "$build/tests/kernels_test" \
  --gtest_filter="$kernels_sve_filter"
step kernels_sve2 "$sve" gtest "${qemu[@]}" "$build/tests/kernels_test" \
  --gtest_filter="$kernels_sve2_filter"
step unit_neon "$neon" gtest "${qemu[@]}" "$build/tests/unit_test" --gtest_filter="$unit_filter"
step cuda_host_neon "$neon" gtest "${qemu[@]}" "$build/tests/cuda_host_test"
step unit_sve "$sve" gtest "${qemu[@]}" "$build/tests/unit_test" \
  --gtest_filter="$unit_sve_filter"
wait
# The jobs, one at a time (ranks of one job already share the cores).
allreduce=("${qemu[@]}" "$build/src/batonrun" -n 2 "${qemu[@]}" "$build/perf/all_reduce_perf"
           -b 8 -e 1M -f 4 -c 1)
step allreduce_shm "$neon" perf "${allreduce[@]}"
wait
BATON_TRANSPORT=tcp step allreduce_tcp "$neon" perf "${allreduce[@]}"
wait
# Every datatype and op (fp16, bf16, fp8, PreMulSum) on 3 ranks.
step allreduce_types_shm "$neon" perf "${qemu[@]}" "$build/src/batonrun" -n 3 "${qemu[@]}" \
  "$build/perf/all_reduce_perf" -b 8 -e 64K -f 32 -d all -o all -c 1
wait

# ---- report ----
failed=0
for name in "${names[@]}"; do
  read -r rc secs <"$logs/$name.rc"
  log="$logs/$name.log"
  if [ "${step_kind[$name]}" = gtest ]; then
    passed=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) tests\?\..*/\1/p' "$log" | tail -1)
    skipped=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) tests\?,.*/\1/p' "$log" | tail -1)
    summary="${passed:-0} passed, ${skipped:-0} skipped"
    if [ "$rc" = 0 ] && [ -z "$passed" ]; then rc=1; fi
  else
    summary=$(grep -m1 "^# Out of bounds values" "$log" || echo "no result")
    if [ "$rc" = 0 ] && ! grep -q "^# Out of bounds values : 0 OK" "$log"; then rc=1; fi
  fi
  printf '  %-20s %-11s %4s s  %s  %s\n' "$name" "${step_cpu[$name]}" "$secs" \
    "$([ "$rc" = 0 ] && echo OK || echo "FAILED (exit $rc)")" "$summary"
  if [ "$rc" != 0 ]; then
    failed=1
    tail -30 "$log" | sed 's/^/    | /'
  fi
done
echo "  skipped: on neoverse-n1 the SVE and SVE2 kernel levels (\"this CPU lacks sve\"), and the CMA case" \
  "(qemu-user has no process_vm_readv)"
if [ "$full" != 1 ]; then
  echo "  left out (AARCH64_FULL=1 runs them):"
  echo "    kernels_test on NEON: ${kernels_neon_filter#-}; on SVE and SVE2: ${kernels_sve_filter#*-}" |
    sed 's/:\([^ ]\)/, \1/g'
  echo "${unit_filter#-}" | sed 's/:/, /g; s/^/    unit_test: /' | fold -s -w 96 |
    sed '2,$s/^/      /'
fi
echo "cross_aarch64: runs took $(since "$t1") s; logs in $logs"
exit "$failed"
