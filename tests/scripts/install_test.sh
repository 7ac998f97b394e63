#!/usr/bin/env bash
# Installed Baton runs from any prefix with a clean environment: installs the
# build into a temporary root (meson's --destdir, so the files land under a
# prefix nobody configured) and runs batonrun, a perf binary, baton-topo and
# baton-train from there with `env -i` (no LD_LIBRARY_PATH); each must find
# the installed libbaton through its $ORIGIN-relative rpath.
#
#   install_test.sh BUILD_DIR
set -uo pipefail
build=$(cd "$1" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

meson install -C "$build" --no-rebuild --destdir "$tmp" > "$tmp/install.log" 2>&1 ||
  { cat "$tmp/install.log"; echo "FAIL: meson install"; exit 1; }
prefix=$(meson introspect "$build" --buildoptions |
  python3 -c 'import json,sys; print([o["value"] for o in json.load(sys.stdin) if o["name"] == "prefix"][0])')
root=$tmp$prefix
bin=$root/bin
[[ -x $bin/batonrun && -x $bin/all_reduce_perf ]] || { fail "batonrun or all_reduce_perf not installed"; exit 1; }

clean() { env -i PATH=/usr/bin:/bin HOME="$tmp" "$@"; }

# The library each executable loads is the installed one.
# (baton-topo links the internal library statically.)
for exe in batonrun all_reduce_perf; do
  lib=$(clean ldd "$bin/$exe" | awk '/libbaton\.so/ {print $3}')
  [[ $lib == "$root"/* ]] || fail "$exe loads libbaton from '${lib:-nowhere}', not from $root"
done

# A job from the installed tree, results checked.
out=$(clean "$bin/batonrun" -n 2 "$bin/all_reduce_perf" -b 8 -e 1M -f 8 -c 1 -n 2 -w 1 2>&1) ||
  fail "batonrun -n 2 all_reduce_perf from $bin: $out"
grep -qE "^ +8 +2 +float" <<< "$out" || fail "no 8-byte row in: $out"
grep -E "^ +[0-9]+ +[0-9]+ +float" <<< "$out" | awk '$9 != 0 || $13 != 0 {bad = 1} END {exit bad}' ||
  fail "wrong results from the installed perf binary: $out"

clean "$bin/baton-topo" > "$tmp/topo.txt" 2>&1 || fail "baton-topo: $(cat "$tmp/topo.txt")"
if [[ -x $bin/baton-train ]]; then
  clean "$bin/baton-train" --help > "$tmp/train.txt" 2>&1 || fail "baton-train --help: $(cat "$tmp/train.txt")"
fi
[[ -f $root/include/baton.h ]] || fail "baton.h not installed"

if [[ $failures -gt 0 ]]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "install: all checks passed (installed under $root)"
