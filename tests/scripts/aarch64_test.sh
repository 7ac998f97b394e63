#!/usr/bin/env bash
# The aarch64 build as one test of the suite (docs/arm.md): cross-builds
# Baton into BUILD_DIR and runs its tests and an allreduce job under
# qemu-user (scripts/cross_aarch64.sh). Skips (exit 77), saying why, where
# the cross tools are missing; scripts/setup.sh installs them.
#
#   aarch64_test.sh BUILD_DIR
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:?usage: aarch64_test.sh BUILD_DIR}

skip() {
  echo "skipped: $*"
  exit 77
}
arch=$(uname -m)
[ "$arch" = x86_64 ] || skip "the cross build runs on x86-64 hosts; this one is $arch"
missing=()
for tool in aarch64-linux-gnu-g++ qemu-aarch64-static pkg-config; do
  command -v "$tool" >/dev/null || missing+=("$tool")
done
for pc in hwloc libcrypto gtest; do
  [ -f "/usr/lib/aarch64-linux-gnu/pkgconfig/$pc.pc" ] || missing+=("$pc.pc (arm64)")
done
((${#missing[@]} == 0)) ||
  skip "no aarch64 cross tools (${missing[*]}); scripts/cross_aarch64.sh --install-only installs them"
exec "$root/scripts/cross_aarch64.sh" --no-install "$build"
